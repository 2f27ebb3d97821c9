"""A hostile judge endpoint (issue 32, item 4): the policy's text is in the judge's prompt, so the
judge's replies are untrusted. A reply written to stall the score parser, a server that drips bytes,
a gzip bomb, nonsense usage numbers: each ends in a JudgeError or JudgeParseError within the judge's
budgets, and the event loop keeps running meanwhile.

The server is a real HTTP server on 127.0.0.1 (a thread of this process); what it does is chosen by
the first segment of the path, so each test's judge has its own base URL.
"""

import asyncio
import gzip
import json
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlfactory_nb.rewards.judge import JudgeError, JudgeParseError, LLMJudge
from rlfactory_nb.rewards.samples import make_sample

BOMB_BYTES = 64 * 2**20
"""the gzip bomb's size once inflated, against the judge's 1 MiB default budget"""
DRIP_BYTES, DRIP_EVERY_S = 40, 0.2
"""the drip sends its first DRIP_BYTES one at a time, 8 s in all, each well within timeout_s"""


def completion(content: str, usage: dict | None = None) -> dict:
    usage = usage if usage is not None else {"prompt_tokens": 40, "completion_tokens": 6}
    return {"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}], "usage": usage}


class Hostile(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.replies: dict[str, tuple[bytes, dict[str, str], float]] = {}
        """case -> (body, extra headers, seconds between the first DRIP_BYTES bytes)"""
        self.requests = 0

    def script(self, case: str, body: bytes, headers: dict[str, str] | None = None, drip_s: float = 0.0) -> str:
        """The base URL of a judge that gets `body` for every request."""
        self.replies[case] = (body, headers or {}, drip_s)
        return f"http://127.0.0.1:{self.server_address[1]}/{case}/v1"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Hostile

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.requests += 1
        body, headers, drip_s = self.server.replies[self.path.split("/")[1]]
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            start = DRIP_BYTES if drip_s else 0
            for index in range(start):
                self.wfile.write(body[index : index + 1])
                self.wfile.flush()
                time.sleep(drip_s)
            self.wfile.write(body[start:])
        except (BrokenPipeError, ConnectionResetError):  # the judge gave up and left
            pass


@pytest.fixture(scope="module")
def hostile():
    server = Hostile()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def bomb() -> bytes:
    """A valid completion behind 64 MiB of JSON whitespace, gzipped to about 64 KiB."""
    whitespace = b" " * BOMB_BYTES
    return gzip.compress(whitespace + json.dumps(completion("<score>9</score>")).encode(), compresslevel=9)


def sample():
    return make_sample("<answer>36</answer>", ground_truth="36", id="s0")


class Heartbeat:
    """Measures the longest time the event loop went without running this task."""

    def __init__(self) -> None:
        self.longest_gap_s = 0.0

    async def run(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            self.longest_gap_s = max(self.longest_gap_s, now - last)
            last = now


async def score_with_heartbeat(judge: LLMJudge, group: bool) -> tuple[BaseException | object, float, Heartbeat]:
    heartbeat = Heartbeat()
    beating = asyncio.create_task(heartbeat.run())
    start = time.perf_counter()
    try:
        outcome: BaseException | object = await (judge.score_group([sample()]) if group else judge(sample()))
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        outcome = exc
    elapsed = time.perf_counter() - start
    await asyncio.sleep(0.05)  # one more beat, which measures a stall that lasted until the score
    beating.cancel()
    return outcome, elapsed, heartbeat


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "reply, group",
    [
        ("<score>" + " " * 2000, False),
        ("<score>" + " " * 900_000 + "</score", False),
        ("<scores>" + " " * 2000, True),
        ("[" + "<think>" * 100_000, True),
    ],
    ids=["score-then-spaces", "score-then-900k-spaces", "scores-then-spaces", "many-think-tags"],
)
async def test_a_reply_made_to_stall_the_parser_fails_fast_and_the_loop_keeps_running(hostile, reply, group):
    # before: the backtracking regexes took 29 s for 2,000 spaces, on the event loop
    judge = LLMJudge(hostile.script("stall", json.dumps(completion(reply)).encode()), "m", cache=False)
    outcome, elapsed, heartbeat = await score_with_heartbeat(judge, group)
    assert isinstance(outcome, JudgeParseError), outcome
    # generous for a busy 2-core machine (a judge's first request also builds its HTTP client)
    assert elapsed < 5.0 and heartbeat.longest_gap_s < 0.5, (elapsed, heartbeat.longest_gap_s)


@pytest.mark.timeout(60)
async def test_a_server_dripping_bytes_cannot_outlast_max_duration(hostile):
    body = b" " * DRIP_BYTES + json.dumps(completion("<score>9</score>")).encode()
    url = hostile.script("drip", body, drip_s=DRIP_EVERY_S)
    judge = LLMJudge(url, "m", timeout_s=0.5, max_retries=1, backoff_s=0.01, cache=False)
    start = time.perf_counter()
    with pytest.raises(JudgeError, match=r"failed after 2 attempt.*ReadTimeout: no reply within 0.5 s"):
        await judge(sample())
    elapsed = time.perf_counter() - start
    assert elapsed < judge.max_duration_s + 0.5, (elapsed, judge.max_duration_s)  # before: 16 s and a score


@pytest.mark.timeout(60)
@pytest.mark.parametrize("layers", [1, 2], ids=["gzip", "gzip-of-gzip"])
async def test_a_gzip_bomb_stops_at_the_byte_budget_and_is_not_scored(hostile, bomb, layers):
    body = bomb if layers == 1 else gzip.compress(bomb)
    url = hostile.script(f"bomb{layers}", body, {"Content-Encoding": ", ".join(["gzip"] * layers)})
    judge = LLMJudge(url, "m", max_retries=0, backoff_s=0.01)
    tracemalloc.start()
    try:
        with pytest.raises(JudgeError, match=r"max_reply_bytes=1048576 once inflated|Content-Encoding 'gzip, gzip'"):
            await judge(sample())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, f"{peak / 2**20:.0f} MiB held for a reply"  # before: 64 MiB inflated, scored
    assert judge.usage.failures == 1 and judge.usage.requests == 0
    requests = hostile.requests
    with pytest.raises(JudgeError):  # nothing was cached: the endpoint is asked again
        await judge(sample())
    assert hostile.requests == requests + 1


@pytest.mark.parametrize(
    "usage, field",
    [
        ({"prompt_tokens": float("nan"), "completion_tokens": 6}, "prompt_tokens"),
        ({"prompt_tokens": 40, "completion_tokens": -1_000_000}, "completion_tokens"),
        ({"prompt_tokens": "lots", "completion_tokens": 6}, "prompt_tokens"),
        ({"prompt_tokens": 1e300, "completion_tokens": 6}, "prompt_tokens"),
    ],
    ids=["nan", "negative", "text", "huge"],
)
async def test_usage_numbers_are_validated(hostile, usage, field):
    url = hostile.script(f"usage-{field}", json.dumps(completion("<score>9</score>", usage)).encode())
    judge = LLMJudge(url, "m", cache=False)
    with pytest.raises(JudgeError, match=rf"invalid usage: usage\.{field} = .* is not a token count"):
        await judge(sample())  # before: a bare ValueError, or a negative cost
    assert judge.cost(1.0, 1.0) == 0.0 and judge.usage.failures == 1


@pytest.mark.parametrize(
    "body, headers, error",
    [
        (b"[" * 100_000 + b"]" * 100_000, {}, "not JSON"),
        (b"\xff\xfe not utf-8", {}, "not JSON"),
        (b"plain text", {"Content-Encoding": "gzip"}, "not valid gzip"),
        (gzip.compress(b"{}")[:-12], {"Content-Encoding": "gzip"}, "ends before its compressed stream"),
        (b"{}", {"Content-Encoding": "br"}, "Content-Encoding 'br'"),
    ],
    ids=["deep-json", "not-utf8", "bad-gzip", "cut-gzip", "unasked-encoding"],
)
async def test_every_unusable_body_is_a_judge_error(hostile, body, headers, error):
    judge = LLMJudge(hostile.script("garbage", body, headers), "m", max_retries=0, cache=False)
    with pytest.raises(JudgeError, match=error):  # before: a bare RecursionError for deep JSON
        await judge(sample())


_JUDGE_PIECES = ["<score>", "</score>", "<scores>", "</scores>", "<think>", "</think>", "[", "]", ",", "/10", "10", "7.5", " " * 50, "-", "e9999"]


@given(st.lists(st.one_of(st.sampled_from(_JUDGE_PIECES), st.text(max_size=8)), max_size=60))
@settings(max_examples=200, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
def test_any_reply_is_a_score_in_range_or_a_value_error(pieces):
    """The judge's parsers on random replies: a score in [0, 1] (a list of them), or the ValueError
    the judge turns into a JudgeError; never another exception, never past the deadline."""
    from rlfactory_nb.rewards.judge_prompts import parse_group_scores, parse_score

    reply = "".join(pieces)
    for parse in (parse_score, parse_group_scores):
        try:
            result = parse(reply)
        except ValueError:
            continue
        for score in result if isinstance(result, list) else [result]:
            assert 0.0 <= score <= 1.0
