"""One request to a chat endpoint (a judge, a model used as a tool), answered within a time budget
and a byte budget.

The replies come from a server this process does not control, and the policy's own text is in the
prompt, so a reply may be hostile. httpx's timeout bounds each read, not the whole
reply: a server sending one byte every 0.8 s kept a request alive past 25 s against a 0.5 s
`timeout_s`. And httpx inflates a compressed chunk in one piece: a 0.39 MiB gzip reply became
1.3 GiB of memory. So `post` puts one deadline on the whole attempt (connect to last byte) and reads
the raw body, inflating it here with an output bound, so no more than `max_bytes` of decoded body is
ever held. Usage numbers are checked too: they feed `ChatUsage.cost`.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import time
import zlib
from dataclasses import dataclass
from typing import Any

import httpx

ACCEPT_ENCODING = "gzip, deflate"
"""the encodings `post` can inflate with a bound (sent as Accept-Encoding)"""
_MAX_TOKEN_COUNT = 2**53
"""a token count above this is not one (and would lose precision as a float)"""


class ReplyRejected(Exception):
    """The endpoint's reply broke a budget or cannot be decoded; the message says which."""


@dataclass(frozen=True)
class Answer:
    """An endpoint's complete reply: status, headers and the decoded body."""

    status: int
    headers: httpx.Headers
    body: bytes

    def excerpt(self, limit: int = 300) -> str:
        """The body's first `limit` characters, for error messages."""
        return self.body[: 4 * limit].decode("utf-8", "replace")[:limit]


async def post(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    *,
    timeout_s: float,
    max_bytes: int,
) -> Answer:
    """POST `body` as JSON; the whole reply must arrive within `timeout_s` and decode to at most
    `max_bytes`. A missed deadline raises `httpx.ReadTimeout` (a timeout like httpx's own, retried
    by the caller); a reply past the budget or in an encoding other than ACCEPT_ENCODING raises
    `ReplyRejected`."""
    try:
        async with asyncio.timeout(timeout_s):
            request_headers = {**headers, "Accept-Encoding": ACCEPT_ENCODING}
            async with client.stream("POST", url, json=body, headers=request_headers) as response:
                decoder = _BoundedDecoder(response.headers.get("content-encoding", ""), max_bytes)
                async for chunk in response.aiter_raw():
                    decoder.feed(chunk)
                return Answer(response.status_code, response.headers, decoder.finish())
    except TimeoutError as exc:
        raise httpx.ReadTimeout(f"the reply was not complete within {timeout_s:g} s") from exc


class _BoundedDecoder:
    """Inflates a body (identity, gzip or deflate) chunk by chunk, never past `max_bytes` of output."""

    def __init__(self, content_encoding: str, max_bytes: int):
        codings = [name.strip().lower() for name in content_encoding.split(",")]
        codings = [name for name in codings if name not in ("", "identity")]
        if len(codings) > 1 or (codings and codings[0] not in ("gzip", "deflate")):
            raise ReplyRejected(
                f"the reply's Content-Encoding {content_encoding!r} is not one of {ACCEPT_ENCODING!r}"
            )
        # wbits 32 + 15: a gzip or a zlib header, detected from the stream itself
        self._inflate = zlib.decompressobj(wbits=32 + zlib.MAX_WBITS) if codings else None
        self._coding = codings[0] if codings else "identity"
        self._parts: list[bytes] = []
        self._size = 0
        self._max_bytes = max_bytes

    def feed(self, data: bytes) -> None:
        if self._inflate is None:
            return self._keep(data)
        try:
            while data:  # at most one byte past the budget per call, so memory stays bounded
                self._keep(self._inflate.decompress(data, self._max_bytes - self._size + 1))
                data = self._inflate.unconsumed_tail
        except zlib.error as exc:
            raise ReplyRejected(f"the reply's body is not valid {self._coding} ({exc})") from exc

    def finish(self) -> bytes:
        if self._inflate is not None and not self._inflate.eof:
            raise ReplyRejected(f"the reply's {self._coding} body ends before its compressed stream does")
        return b"".join(self._parts)

    def _keep(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > self._max_bytes:
            encoded = "" if self._inflate is None else f" once inflated ({self._coding})"
            raise ReplyRejected(f"the reply is larger than max_reply_bytes={self._max_bytes}{encoded}")
        self._parts.append(data)


def token_counts(data: Any) -> tuple[int, int]:
    """(prompt_tokens, completion_tokens) of a chat-completions reply's `usage`; (0, 0) without one.

    >>> token_counts({"usage": {"prompt_tokens": 40, "completion_tokens": 6.0}})
    (40, 6)
    """
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    return _token_count(usage, "prompt_tokens"), _token_count(usage, "completion_tokens")


def _token_count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key)
    if value is None:
        return 0
    number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    if not 0 <= number <= _MAX_TOKEN_COUNT or number != int(number):  # the comparison rejects nan too
        raise ReplyRejected(f"usage.{key} = {value!r:.40} is not a token count (a whole number >= 0)")
    return int(number)


def retry_after_s(headers: httpx.Headers) -> float | None:
    """Seconds a 429/503 asks to wait: `Retry-After` as seconds or as an HTTP date."""
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, OverflowError):
            return None
    return max(0.0, seconds) if math.isfinite(seconds) else None
