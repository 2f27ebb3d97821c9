"""Typed records that cross module boundaries: messages, tools, calls, results, turns, trajectories.

The mask convention, stated once for the whole project:

    Trajectory.loss_mask[i] == 1  exactly when response_ids[i] was sampled by the policy;
    prompt tokens, chat-template tokens (headers, the "\\n" after <|im_end|>) and tool-response
    tokens are 0. Trajectory.logprobs holds the engine's logprob of each sampled token, in order,
    so sum(loss_mask) == len(logprobs).

Messages stay plain dicts (OpenAI / Hugging Face chat format) so that any chat template renders them.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict  # pydantic validates only this TypedDict on Python < 3.12

from rlfactory_nb._views import view_of
from rlfactory_nb.errors import DatasetError

ToolStatus = Literal["ok", "error", "timeout", "invalid_args", "unknown_tool"]
FinishReason = Literal["stop", "max_turns", "length", "error"]


class Message(TypedDict):
    """One chat message in the Hugging Face / OpenAI format that chat templates render."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: NotRequired[list[dict[str, Any]]]
    reasoning_content: NotRequired[str]
    name: NotRequired[str]


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about one tool."""

    name: str
    description: str
    input_schema: dict[str, Any]
    server: str = ""
    """the MCP server (or "python") that serves the tool"""

    def to_openai(self) -> dict[str, Any]:
        """The `{"type": "function", ...}` form chat templates expect in `tools=`."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.input_schema},
        }


@dataclass(frozen=True)
class ToolCall:
    """One call parsed from model text."""

    name: str
    arguments: dict[str, Any]
    raw: str = ""
    """the exact text of the call block, for display and error messages"""

    def to_message_call(self) -> dict[str, Any]:
        """The `tool_calls` entry of an assistant message."""
        return {"type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class MalformedCall:
    """A tool-call block the parser could not turn into a ToolCall; the model is told about it.

    A record of the model's mistake, kept in `Turn.parse_errors` beside `Turn.calls`: never raised."""

    message: str
    raw: str = ""


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one tool call. A failure is data: `status` says what went wrong."""

    name: str
    status: ToolStatus
    content: str
    """the text the model will see (already truncated to the configured cap)"""
    latency_s: float = 0.0
    cached: bool = False
    details: dict[str, Any] | None = None
    """data for people beside what the model reads, never shown to it: an agent tool's transcript
    (`Trajectory.from_dict(result.details["trajectory"])`); None for most tools"""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class Turn:
    """One assistant turn and what followed it (tool calls, their results)."""

    text: str
    """the decoded assistant text, as generated (for display; training uses the ids)"""
    num_tokens: int = 0
    calls: list[ToolCall] = field(default_factory=list)
    results: list[ToolResult] = field(default_factory=list)
    parse_errors: list[MalformedCall] = field(default_factory=list)
    finish_reason: str = "stop"
    generate_s: float = 0.0
    tools_s: float = 0.0
    policy_version: int | None = None
    """the weights version that sampled this turn (the engine's Generation.policy_version)"""
    reasoning: str = ""
    """the text inside the model family's reasoning markers (markers removed)"""
    answer: str | None = None
    """the text outside reasoning, call blocks as written, as the family read it; None for a turn no
    family read (a hand-made Turn): Sample then strips Qwen-style think blocks itself"""
    calls_in_reasoning: int = 0
    """call blocks written inside reasoning: drafts, not run"""
    replies: list[Message] = field(default_factory=list)
    """what the environment said to this turn when it made no call (a user's reply, a game's move),
    as it entered the conversation (masked); empty for a turn answered by tool results"""
    speaker: str = ""
    """who said `replies`: "user" (a simulated user) or "env" (a game, an observation)"""
    env_s: float = 0.0
    """seconds the environment took to respond to this turn"""
    state: dict[str, Any] | None = None
    """the environment's `state()` after this turn and its answer (None: it shows none)"""
    env_reward: float | None = None
    """the reward the environment gave with its answer to this turn (`Response.reward`; None: none),
    the turn's own reward when `grpo.advantage` is "turn" or "step_groups" (train/credit.py)"""


@dataclass
class Trajectory:
    """One multi-turn rollout, in exactly the tokens a trainer consumes (see the module docstring)."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    finish_reason: FinishReason = "stop"
    metadata: dict[str, Any] = field(default_factory=dict)
    id: str = ""

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def num_sampled_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def truncated(self) -> bool:
        """Cut off by a limit rather than finished by the model: max_new_tokens or max_total_tokens
        ("length"), or max_turns with tool calls left unanswered ("max_turns")."""
        return self.finish_reason in ("length", "max_turns")

    def tool_calls(self) -> list[ToolCall]:
        return [call for turn in self.turns for call in turn.calls]

    def tool_results(self) -> list[ToolResult]:
        return [result for turn in self.turns for result in turn.results]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def view(self, tokenizer: Any = None) -> Any:
        """A notebook widget (TrajectoryView): turns, tool calls, and the tokens coloured by loss mask.
        `tokenizer` (e.g. `policy.tokenizer`) decodes the token strip; without it, ids are shown."""
        return view_of(self, tokenizer=tokenizer)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        turns = [
            Turn(
                **{
                    **turn,
                    "calls": [ToolCall(**c) for c in turn.get("calls", [])],
                    "results": [ToolResult(**r) for r in turn.get("results", [])],
                    "parse_errors": [MalformedCall(**e) for e in turn.get("parse_errors", [])],
                }
            )
            for turn in data.get("turns", [])
        ]
        return cls(**{**data, "turns": turns})


def save_jsonl(trajectories: Iterable[Trajectory], path: str | Path, append: bool = False) -> Path:
    """Write trajectories one JSON object per line (the format jobs stream to disk)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w", encoding="utf-8") as out:
        for traj in trajectories:
            out.write(json.dumps(traj.to_dict(), ensure_ascii=False) + "\n")
    return path


def load_jsonl(path: str | Path) -> list[Trajectory]:
    """Read a file written by `save_jsonl`. Such files are shared, so every field's type is checked: a
    line that is not JSON or not a trajectory raises a ValueError naming the file, the line and the field.
    """
    with Path(path).open("rb") as lines:
        return parse_trajectories(enumerate(lines, 1), str(path))


def parse_trajectories(lines: Iterable[tuple[int, bytes | str | None]], where: str) -> list[Trajectory]:
    """Trajectories from numbered JSON lines (`load_jsonl`'s checks); a line given as None (too long
    to read) or not a trajectory is a ValueError naming `where` and the line."""
    from pydantic import ValidationError

    trajectories = []
    for number, line in lines:
        if line is None:
            raise DatasetError(f"{where}, line {number}: too long to be read")
        if not line.strip():
            continue
        try:
            trajectories.append(_trajectory_schema().validate_json(line, strict=True))
        except ValidationError as error:
            raise DatasetError(f"{where}, line {number}: not a trajectory: {_describe(error)}") from None
    return trajectories


@functools.cache
def _trajectory_schema() -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(Trajectory)


def _describe(error: Any, shown: int = 5) -> str:
    """The first problems of a pydantic ValidationError, each as `field.path: message`."""
    problems = [f"{'.'.join(map(str, e['loc'])) or 'the line'}: {e['msg']}" for e in error.errors()]
    more = f" (and {len(problems) - shown} more)" if len(problems) > shown else ""
    return "; ".join(problems[:shown]) + more


@dataclass
class Sample:
    """What a reward function receives: one trajectory seen from the task's side."""

    prompt: list[Message]
    response: str
    """all assistant text of the trajectory, turns joined by newlines"""
    final_answer: str
    tool_calls: list[ToolCall]
    tool_results: list[ToolResult]
    num_turns: int
    finish_reason: str
    ground_truth: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)
    trajectory: Trajectory | None = None
    id: str = ""
    reasoning: str = ""
    """the reasoning of every assistant turn (the family's markers removed), joined by newlines"""
    env: Any = field(default=None, repr=False, compare=False)
    """the episode's Environment, still open while rewards run (None for the default ToolSet
    environment, or once the episode is closed): a reward can read the state the agent left"""

    @classmethod
    def from_trajectory(
        cls,
        traj: Trajectory,
        ground_truth: Any = None,
        extract_answer: Callable[[str], str] | None = None,
        env: Any = None,
    ) -> Sample:
        """Build the reward function's view of `traj`; `extract_answer` maps the last assistant text
        to the final answer (default: `<answer>...</answer>` if present, else the last turn's text
        outside reasoning, as the model family read it); `env`: the episode's open Environment.
        An agent program's episode has no last turn of its own: the answer it returned (outside the
        family's reasoning, `metadata["final_answer"]`) takes that turn's place."""
        prompt = list(traj.messages[: _prompt_length(traj.messages)])
        assistant_texts = [turn.text for turn in traj.turns]
        last = assistant_texts[-1] if assistant_texts else ""
        returned = traj.metadata.get("final_answer")
        if isinstance(returned, str):  # what an agent program returned
            final_answer = extract_answer(returned) if extract_answer is not None else default_answer(returned)
        elif extract_answer is not None:
            final_answer = extract_answer(last)
        else:
            outside = traj.turns[-1].answer if traj.turns else None
            final_answer = default_answer(last if outside is None else outside)
        return cls(
            prompt=prompt,
            response="\n".join(assistant_texts),
            final_answer=final_answer,
            tool_calls=traj.tool_calls(),
            tool_results=traj.tool_results(),
            num_turns=traj.num_turns,
            finish_reason=traj.finish_reason,
            ground_truth=traj.metadata.get("ground_truth") if ground_truth is None else ground_truth,
            metadata=dict(traj.metadata),
            trajectory=traj,
            id=traj.id,
            reasoning="\n".join(turn.reasoning for turn in traj.turns if turn.reasoning),
            env=env,
        )


_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)


def default_answer(text: str) -> str:
    """The final answer in an assistant message.

    >>> default_answer("<think>12*3?</think>The result is <answer> 36 </answer>")
    '36'
    >>> default_answer("<think>hmm</think>\\n\\n42")
    '42'
    """
    found = _ANSWER.findall(text)
    if found:
        return found[-1].strip()
    return _THINK.sub("", text).strip()


def _prompt_length(messages: list[Message]) -> int:
    """Messages before the first assistant message form the prompt."""
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            return i
    return len(messages)
