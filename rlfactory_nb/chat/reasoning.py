"""Where reasoning sits in an assistant message, for any family with an open and a close marker.

Two shapes occur. A message may open and close its own blocks (`<think>...</think>answer`), or the
generation prompt may pre-fill the opener (Qwen3.5 ends it with `<think>\\n` when thinking is on), so
the sampled text starts inside reasoning and the first thing to appear is a close
(`...reasoning</think>\\n\\nanswer`). A close with no opener before it is read as that second shape
even when the caller did not say so: a template the family record does not know may pre-fill too.

An unclosed opener runs to the end of the text (a turn cut off mid-thought is all reasoning). Every
search starts where the last stopped, so the cost is linear in the text however hostile it is.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReasoningMarkers:
    """The strings that open and close one reasoning block."""

    open: str
    close: str


@dataclass(frozen=True)
class Segment:
    """A run of message text, inside a reasoning block or outside any."""

    text: str
    """the run as written, markers included for a reasoning run"""
    inner: str
    """the run without its markers (equal to `text` outside reasoning)"""
    in_reasoning: bool


def segments(
    text: str, markers: ReasoningMarkers | None, starts_inside: bool = False, leading_only: bool = False
) -> list[Segment]:
    """`text` cut into reasoning and non-reasoning runs, in order; their `text`s join to `text`.
    `leading_only`: only a block at the start is reasoning (a family whose template writes reasoning
    first, so an opener later in the text, e.g. inside a tool argument, is data)."""
    if markers is None:
        return [Segment(text, text, False)]
    out: list[Segment] = []
    pos = 0
    spans = _spans(text, markers, starts_inside)
    if leading_only:
        spans = spans[:1] if spans and not text[: spans[0][0]].strip() else []
    for start, end in spans:
        if start > pos:
            out.append(Segment(text[pos:start], text[pos:start], False))
        block = text[start:end]
        inner = block.removeprefix(markers.open)
        inner = inner.removesuffix(markers.close)
        out.append(Segment(block, inner, True))
        pos = end
    if pos < len(text) or not out:
        out.append(Segment(text[pos:], text[pos:], False))
    return out


def split(
    text: str, markers: ReasoningMarkers | None, starts_inside: bool = False, leading_only: bool = False
) -> tuple[str, str]:
    """(reasoning, the rest): reasoning blocks' inner text joined by newlines, and the text outside
    them, both stripped.

    >>> split("<think>6*6</think>\\n\\n36", ReasoningMarkers("<think>", "</think>"))
    ('6*6', '36')
    >>> split("6*6 is 36</think>36", ReasoningMarkers("<think>", "</think>"))
    ('6*6 is 36', '36')
    """
    parts = segments(text, markers, starts_inside, leading_only)
    reasoning = "\n".join(p.inner.strip() for p in parts if p.in_reasoning and p.inner.strip())
    return reasoning, "".join(p.text for p in parts if not p.in_reasoning).strip()


def _spans(text: str, markers: ReasoningMarkers, starts_inside: bool) -> list[tuple[int, int]]:
    """(start, end) of each reasoning block, markers included."""
    spans, pos = [], 0
    first_close, first_open = text.find(markers.close), text.find(markers.open)
    if starts_inside or (first_close >= 0 and (first_open < 0 or first_close < first_open)):
        pos = len(text) if first_close < 0 else first_close + len(markers.close)
        spans.append((0, pos))
    while (start := text.find(markers.open, pos)) >= 0:
        close = text.find(markers.close, start + len(markers.open))
        pos = len(text) if close < 0 else close + len(markers.close)
        spans.append((start, pos))
    return spans
