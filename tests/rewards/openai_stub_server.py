"""A small OpenAI-compatible chat-completions server for testing the LLM judge over real HTTP.

Run as `python openai_stub_server.py`: it binds 127.0.0.1 on a free port and prints the port on its
first line of stdout. What it does for a request is read from the request's model name, written as
a query string, so concurrent tests never share a script:

    score=7             reply "... <score>7</score>" (the default reply is <score>5</score>)
    scores=3,9          reply "... <scores>[3, 9]</scores>"
    text=...            reply exactly this text (garbage, for parse errors)
    fail500=N           answer HTTP 500 to the first N requests with this model name
    fail429=N&after=S   answer HTTP 429 with `Retry-After: S` to the first N
    hang=S / delay=S    sleep S seconds before answering (hang: for timeouts, delay: for concurrency)
    badjson=1           answer 200 with a body that is not JSON
    length=1            mark the reply finish_reason "length" (cut off at max_tokens)

Every answered request reports usage of PROMPT_TOKENS and COMPLETION_TOKENS. `GET /stats` returns
{"requests", "max_concurrent", "last_body", "last_auth"}; `POST /reset` zeroes them and the
per-model failure counters.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

PROMPT_TOKENS = 40
COMPLETION_TOKENS = 6


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.in_flight = 0
        self.max_concurrent = 0
        self.failures_sent: Counter[tuple[str, str]] = Counter()
        self.last_body: dict | None = None
        self.last_auth: str | None = None


STATE = _State()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # concurrency tests open many connections at once


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real server does

    def log_message(self, format: str, *args: object) -> None:  # quiet test output
        pass

    def do_GET(self) -> None:
        if self.path != "/stats":
            return self._send(404, {"error": f"no route {self.path}"})
        with STATE.lock:
            stats = {
                "requests": STATE.requests,
                "max_concurrent": STATE.max_concurrent,
                "last_body": STATE.last_body,
                "last_auth": STATE.last_auth,
            }
        self._send(200, stats)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/reset":
            with STATE.lock:
                STATE.reset()
            return self._send(200, {"ok": True})
        if self.path != "/v1/chat/completions":
            return self._send(404, {"error": {"message": f"no route {self.path}"}})
        with STATE.lock:
            STATE.requests += 1
            STATE.in_flight += 1
            STATE.max_concurrent = max(STATE.max_concurrent, STATE.in_flight)
            STATE.last_body = body
            STATE.last_auth = self.headers.get("Authorization")
        try:
            self._complete(body)
        finally:
            with STATE.lock:
                STATE.in_flight -= 1

    def _complete(self, body: dict) -> None:
        model = body.get("model", "")
        script = {key: values[-1] for key, values in parse_qs(model).items()}
        time.sleep(float(script.get("hang", script.get("delay", 0))))
        for status in ("500", "429"):
            if self._should_fail(model, script, f"fail{status}"):
                headers = {"Retry-After": script["after"]} if "after" in script else {}
                return self._send(int(status), {"error": {"message": f"scripted {status}"}}, headers)
        if "badjson" in script:
            return self._send_raw(200, b"<html>not json</html>", "text/html")
        self._send(200, _completion(model, _reply_text(script), "length" if "length" in script else "stop"))

    def _should_fail(self, model: str, script: dict[str, str], key: str) -> bool:
        with STATE.lock:
            if STATE.failures_sent[model, key] < int(script.get(key, 0)):
                STATE.failures_sent[model, key] += 1
                return True
        return False

    def _send(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        self._send_raw(status, json.dumps(payload).encode(), "application/json", headers)

    def _send_raw(self, status: int, data: bytes, kind: str, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
            pass


def _reply_text(script: dict[str, str]) -> str:
    if "text" in script:
        return script["text"]
    if "scores" in script:
        return f"Compared. <scores>[{', '.join(script['scores'].split(','))}]</scores>"
    return f"Looks fine. <score>{script.get('score', '5')}</score>"


def _completion(model: str, text: str, finish_reason: str) -> dict:
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}
        ],
        "usage": {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": COMPLETION_TOKENS,
            "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
        },
    }


def main() -> None:
    server = Server(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
