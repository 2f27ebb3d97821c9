"""An episode's recorded calls -> exact training sequences (segments) and the episode's Trajectory.

The merge rule, over ids only: calls are taken in the order they arrived; a call whose prompt ids
start with a segment's ids so far (an earlier prompt + its completion + what followed) extends that
segment: the ids in between (tool results, a user's message, the next header) enter with loss mask
0, its completion with mask 1. Any other call starts a new segment: a program that rewrote its
history (a summary, a sub-agent, other tools) or two calls branching from one reply. So
`loss_mask` is 1 exactly on sampled ids in every segment, whatever the program did.

The episode's Trajectory carries its *last* segment's ids (the one that produced the final reply),
every call's turn (so reward functions see every call), and the earlier segments in
`metadata["segments"]`; training turns each segment into a row with the episode's advantage, or,
when credit goes per turn, each call's own (`token_turns` says which call each token came from;
`expand_segments`; docs/decisions.md says why). `metadata["program"]` holds the counters: calls,
merged, forks, drift, and why each segment began; `metadata["final_answer"]` the answer the program
returned, outside the family's reasoning.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from rlfactory_nb.programs.sessions import CallRecord, Serving
from rlfactory_nb.rollout.tokens import drift_check, prompt_ids
from rlfactory_nb.types import FinishReason, Message, ToolResult, Trajectory, Turn

SEGMENTS_KEY = "segments"
"""Trajectory.metadata key of the earlier segments (dicts of ids, mask, log-probs, calls, reason)"""
PROGRAM_KEY = "program"
"""Trajectory.metadata key of the episode's counters"""


@dataclass
class Segment:
    """One exact sequence: a prompt, then sampled completions and masked ids between them."""

    prompt_ids: list[int]
    reason: str
    """why it began: "first call", "history rewritten at call k", "branch at call k" """
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def add(self, call: CallRecord) -> None:
        between = call.prompt_ids[len(self.all_ids) :]
        self.response_ids += between + call.completion_ids
        self.loss_mask += [0] * len(between) + [1] * len(call.completion_ids)
        self.logprobs += call.logprobs
        self.calls.append(call)

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt_ids": self.prompt_ids, "response_ids": self.response_ids, "loss_mask": self.loss_mask,
            "logprobs": self.logprobs, "calls": [c.index for c in self.calls], "reason": self.reason,
        }


def segments_of(calls: Sequence[CallRecord]) -> tuple[list[Segment], int]:
    """The segments of an episode's calls (module docstring) and how many calls merged into one."""
    segments: list[Segment] = []
    merged = 0
    for call in sorted(calls, key=lambda c: c.index):
        prompt = call.prompt_ids
        host = max(
            (s for s in segments if len(s.all_ids) <= len(prompt) and prompt[: len(s.all_ids)] == s.all_ids),
            key=lambda s: len(s.all_ids), default=None,
        )
        if host is None:
            if not segments:
                reason = "first call"
            elif call.extends is not None or any(prompt[: len(s.prompt_ids)] == s.prompt_ids for s in segments):
                reason = f"branch at call {call.index}: it continues a history another call already continued"
            else:
                reason = f"history rewritten at call {call.index}"
            host = Segment(list(prompt), reason)
            segments.append(host)
        else:
            merged += 1
        host.add(call)
    return segments, merged


@dataclass(frozen=True)
class ProgramOutcome:
    """How a program's episode ended, beside its calls."""

    messages: list[Message]
    """the row's prompt"""
    metadata: dict[str, Any]
    answer: Any = None
    error: str | None = None
    """why the program ended without an answer (raised, timed out, returned a non-string)"""
    limit_hit: str | None = None


def assemble(
    serving: Serving, calls: Sequence[CallRecord], episode: ProgramOutcome, traj_id: str, drift: str = "warn"
) -> Trajectory:
    """The episode's Trajectory (module docstring)."""
    segments, merged = segments_of(calls)
    ordered = sorted(calls, key=lambda c: c.index)
    drifted = sum(_drifts(serving, s) for s in segments) if drift != "off" else 0
    metadata = dict(episode.metadata)
    metadata[PROGRAM_KEY] = {
        "calls": len(ordered), "merged": merged, "forks": max(len(segments) - 1, 0), "drift": drifted,
        "segment_starts": [s.reason for s in segments],
        "ignored_sampling": sum(bool(c.ignored) for c in ordered),
        "unmet_tool_choice": sum(c.unmet_tool_choice for c in ordered),
        "serve_ms": [round(c.serve_s * 1e3, 3) for c in ordered],
    }
    metadata[SEGMENTS_KEY] = [s.to_dict() for s in segments[:-1]]
    metadata["tools"] = ordered[-1].tools if ordered else None  # as the program sent them: a render needs them
    if episode.error is not None:
        metadata["program_error"] = episode.error
    metadata["final_answer"] = _outside_reasoning(serving, episode.answer) if episode.error is None else ""
    last = segments[-1] if segments else None
    if last is None:
        prompt = _render_prompt(serving, episode.messages)
        last = Segment(prompt, "no call")
    messages = ordered[-1].messages + [ordered[-1].history_message] if ordered else list(episode.messages)
    return Trajectory(
        prompt_ids=last.prompt_ids, response_ids=last.response_ids, loss_mask=last.loss_mask, logprobs=last.logprobs,
        turns=_turns(ordered), messages=messages, finish_reason=_finish(ordered, episode), metadata=metadata, id=traj_id,
    )


def _outside_reasoning(serving: Serving, answer: Any) -> Any:
    """What the program returned, with the family's reasoning removed, as a parser reads an Agent's
    last turn (`Turn.answer`): Sample.from_trajectory then reads `<answer>` in both alike. None
    while the program still runs (a stepper's partial trajectory)."""
    return serving.chat_format.split_reasoning(answer)[1] if isinstance(answer, str) else answer


def _render_prompt(serving: Serving, messages: list[Message]) -> list[int]:
    return prompt_ids(serving.tokenizer, messages, None, serving.enable_thinking, chat_format=serving.chat_format, trusted=messages)


def _finish(calls: Sequence[CallRecord], episode: ProgramOutcome) -> FinishReason:
    if episode.limit_hit in ("max_turns", "length"):  # the program's error then is the refused call
        return episode.limit_hit  # type: ignore[return-value]
    if episode.error is not None:
        return "error"
    return "length" if calls and calls[-1].finish_reason == "length" else "stop"


def _turns(calls: Sequence[CallRecord]) -> list[Turn]:
    """Every call's turn, with the results the program sent back for its tool calls (read from later
    requests' tool messages): a reward function sees every call and what it returned."""
    answers: dict[str, str] = {}
    for call in calls:
        answers.update(call.answers)
    turns = []
    for call in calls:
        ids = [entry["id"] for entry in call.reply.get("tool_calls") or []]
        results = [ToolResult(c.name, "ok", answers[i]) for c, i in zip(call.turn.calls, ids) if i in answers]
        turns.append(dataclasses.replace(call.turn, results=results))
    return turns


def _drifts(serving: Serving, segment: Segment) -> bool:
    """Whether a full render of the segment's last history differs from its ids beyond what the
    family's template rewrites on purpose (the rf.Agent's drift rule)."""
    last = segment.calls[-1]
    found = drift_check(
        serving.tokenizer, segment.all_ids, last.messages + [last.history_message], last.tools, serving.enable_thinking,
        **serving.drift_options,
    )
    return not found.ok and not found.expected


# ---------------------------------------------------------------------- training rows and metrics


def segment_trajectories(traj: Trajectory) -> list[Trajectory]:
    """The training rows of one episode: its earlier segments, then the trajectory itself."""
    rows = [
        Trajectory(
            prompt_ids=s["prompt_ids"], response_ids=s["response_ids"], loss_mask=s["loss_mask"], logprobs=s["logprobs"],
            turns=[], finish_reason=traj.finish_reason, metadata={"episode": traj.id, "segment_reason": s["reason"]},
            id=f"{traj.id}/segment{k}",
        )
        for k, s in enumerate(traj.metadata.get(SEGMENTS_KEY) or [])
    ]
    return rows + [traj]


def token_turns(traj: Trajectory) -> list[list[int]]:
    """For each training row of the episode (`segment_trajectories`: earlier segments, then the
    trajectory), the episode turn each of its response tokens was sampled in (-1: not sampled).

    A turn is an assistant turn of an rf.Agent's loop (the k-th run of sampled tokens), or a program's
    model call, whichever segment it landed in: `traj.turns[k]` is call k, and a segment holds its
    calls' completions in their order (`Turn.num_tokens` tokens each).

    >>> token_turns(Trajectory(prompt_ids=[1], response_ids=[5, 6, 7, 8], loss_mask=[1, 0, 1, 1]))
    [[0, -1, 1, 1]]
    """
    segments = traj.metadata.get(SEGMENTS_KEY) or []
    if not segments:
        return [_runs(traj.loss_mask)]
    earlier = {index for segment in segments for index in segment["calls"]}
    last = [index for index in range(len(traj.turns)) if index not in earlier]
    masks = [segment["loss_mask"] for segment in segments] + [traj.loss_mask]
    calls = [segment["calls"] for segment in segments] + [last]
    return [_by_call(mask, [(index, traj.turns[index].num_tokens) for index in order]) for mask, order in zip(masks, calls)]


def _runs(mask: Sequence[int]) -> list[int]:
    """The k-th run of consecutive 1s is turn k; -1 where the mask is 0."""
    turns, turn, previous = [], -1, 0
    for value in mask:
        if value and not previous:
            turn += 1
        turns.append(turn if value else -1)
        previous = value
    return turns


def _by_call(mask: Sequence[int], calls: Sequence[tuple[int, int]]) -> list[int]:
    """The call each sampled token of a segment belongs to: its calls' completions, in order."""
    owners = [index for index, count in calls for _ in range(count)]
    sampled = iter(owners)
    return [next(sampled, -1) if value else -1 for value in mask]


def expand_segments(trajectories: list[Trajectory], advantages: Any) -> tuple[list[Trajectory], Any]:
    """Every segment of every episode as its own training row, with its advantages: the episode's
    (a (N,) tensor), or, per token (a list per episode covering its rows' response tokens in order,
    train/credit.py), each row its own slice. Trajectories without segments pass through unchanged."""
    if not any(t.metadata.get(SEGMENTS_KEY) for t in trajectories):
        return trajectories, advantages
    rows, values = [], []
    for traj, advantage in zip(trajectories, advantages):
        parts = segment_trajectories(traj)
        rows += parts
        if isinstance(advantages, torch.Tensor):
            values += [advantage] * len(parts)
            continue
        start = 0
        for part in parts:
            values.append(list(advantage[start : start + len(part.response_ids)]))
            start += len(part.response_ids)
    return rows, torch.stack(values) if isinstance(advantages, torch.Tensor) else values


def program_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Per-step counters of program episodes (`program/calls`, `merged`, `forks`, `drift`, errors);
    empty when no trajectory came from a program."""
    counters = [t.metadata[PROGRAM_KEY] for t in trajectories if PROGRAM_KEY in t.metadata]
    if not counters:
        return {}
    row = {f"program/{key}": float(sum(c[key] for c in counters)) for key in ("calls", "merged", "forks", "drift")}
    row["program/errors"] = float(sum("program_error" in t.metadata for t in trajectories))
    row["program/ignored_sampling"] = float(sum(c["ignored_sampling"] for c in counters))
    return row
