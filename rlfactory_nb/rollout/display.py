"""Plain-text and HTML views of a trajectory: turns, tool calls, and tokens marked by the loss mask.

The widget layer builds richer views; these work anywhere (a terminal, a log, a notebook without
widgets) and are what `make demo` prints.
"""

from __future__ import annotations

import html
import json
from typing import Any

from rlfactory_nb.types import Trajectory

TRAINED_COLOR, MASKED_COLOR = "#c8f7c5", "#e8e8e8"


def format_trajectory(traj: Trajectory, tokenizer: Any = None) -> str:
    """A readable summary: the prompt, each turn with its calls and results (or what the environment
    or a simulated user said, labelled) and the state after it, the mask totals."""
    lines = [f"trajectory {traj.id}: {traj.num_turns} turn(s), finish_reason={traj.finish_reason}"]
    for message in traj.messages:
        if message["role"] == "assistant":
            break
        lines.append(f"  [{message['role']}] {message['content'][:200]}")
    for index, turn in enumerate(traj.turns, 1):
        lines.append(f"  [assistant turn {index}] ({turn.num_tokens} tokens, {turn.generate_s:.2f} s) {turn.text!r}")
        for call, result in zip(turn.calls, turn.results):
            lines.append(
                f"    call {call.name}({call.arguments}) -> {result.status} {result.content!r} "
                f"({result.latency_s * 1000:.0f} ms{', cached' if result.cached else ''})"
            )
        for error in turn.parse_errors:
            lines.append(f"    parse error: {error.message}")
        speaker = {"user": "user (simulated)", "env": "environment"}.get(turn.speaker, turn.speaker or "environment")
        for message in turn.replies:
            lines.append(f"    [{speaker}, masked] {str(message.get('content', ''))[:200]!r}")
        if turn.state is not None:
            lines.append(f"    state: {json.dumps(turn.state, ensure_ascii=False, default=str)[:300]}")
    if "env_reward" in traj.metadata:
        lines.append(f"  environment reward: {traj.metadata['env_reward']}")
    if "env_error" in traj.metadata:
        lines.append(f"  environment failed: {traj.metadata['env_error'].get('message', '')}")
    trained = sum(traj.loss_mask)
    lines.append(
        f"  tokens: prompt {len(traj.prompt_ids)}, response {len(traj.response_ids)} "
        f"(trained {trained}, masked {len(traj.response_ids) - trained})"
    )
    if tokenizer is not None:
        lines.append("  response tokens, [trained] and masked:")
        lines.append("    " + _marked_text(traj, tokenizer).replace("\n", "\n    "))
    return "\n".join(lines)


def _marked_text(traj: Trajectory, tokenizer: Any) -> str:
    """Response text with trained spans in [brackets]."""
    out, open_span = [], False
    for token_id, mask in zip(traj.response_ids, traj.loss_mask):
        if mask and not open_span:
            out.append("[")
        if not mask and open_span:
            out.append("]")
        open_span = bool(mask)
        out.append(tokenizer.decode([token_id]))
    return "".join(out) + ("]" if open_span else "")


def trajectory_html(traj: Trajectory, tokenizer: Any) -> str:
    """Response tokens coloured by loss mask (green: trained, grey: masked); hover shows id and logprob."""
    logprobs = iter(traj.logprobs)
    spans = []
    for token_id, mask in zip(traj.response_ids, traj.loss_mask):
        text = html.escape(tokenizer.decode([token_id])).replace("\n", "↵<br>")
        title = f"id {token_id}" + (f", logprob {next(logprobs):.3f}" if mask else ", masked")
        color = TRAINED_COLOR if mask else MASKED_COLOR
        spans.append(f'<span title="{title}" style="background:{color};font-family:monospace">{text}</span>')
    summary = html.escape(format_trajectory(traj)).replace("\n", "<br>")
    return f"<div><div style='font-family:monospace;font-size:90%'>{summary}</div><div>{''.join(spans)}</div></div>"
