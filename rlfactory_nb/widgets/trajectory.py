"""TrajectoryView: one trajectory as the trainer sees it.

Turns with their reasoning folded, their parsed calls (name, arguments, parse errors) and tool
results (status, latency, cached), what an environment or a simulated user said to an answer (each
labelled apart from tool results) and the episode's state after the turn, then the token strip: every response token, green where the loss mask is 1 (sampled by the
policy, trained) and grey where it is 0 (template and tool tokens, masked); hovering a token shows
its id and, for trained tokens, the engine's logprob. A toggle shows the drift check's verdict.

The HTML builders are plain functions, so the same views render in tests, in exported HTML, and in
the widget. `traj.view(tokenizer)` is `TrajectoryView(traj, tokenizer)`.
"""

from __future__ import annotations

import html
import json
from typing import Any

import ipywidgets as widgets

from rlfactory_nb.rollout.display import MASKED_COLOR, TRAINED_COLOR
from rlfactory_nb.train.distill import TEACHER_KEY
from rlfactory_nb.types import Trajectory, Turn
from rlfactory_nb.widgets._base import StaticFallback
from rlfactory_nb.widgets.compare import change_color
from rlfactory_nb.widgets.registry import register_view

STATUS_COLORS = {"ok": "#1b7f3b", "error": "#b00020", "timeout": "#b35c00", "invalid_args": "#b00020", "unknown_tool": "#b00020"}
_STYLE = f"""<style>
.rf-strip {{ font-family: monospace; font-size: 90%; line-height: 1.7; white-space: pre-wrap; }}
.rf-token {{ border-radius: 2px; padding: 0 1px; }}
.rf-trained {{ background: {TRAINED_COLOR}; }}
.rf-masked {{ background: {MASKED_COLOR}; color: #555; }}
.rf-turn pre {{ margin: 2px 0; white-space: pre-wrap; }}
.rf-table td, .rf-table th {{ padding: 2px 8px; text-align: left; }}
.rf-reasoning {{ color: #555; }} .rf-reasoning pre {{ font-style: italic; }}
.rf-reply {{ border-left: 3px solid #6a4fb3; padding-left: 6px; margin: 2px 0; }}
.rf-state pre {{ color: #355; font-size: 90%; margin: 0; }}
</style>"""


def summary_html(traj: Trajectory) -> str:
    trained = sum(traj.loss_mask)
    reward = traj.metadata.get("reward")
    parts = [
        f"<b>trajectory {html.escape(traj.id)}</b>",
        f"{traj.num_turns} turn(s)",
        f"finish: {html.escape(traj.finish_reason)}",
        f"prompt {len(traj.prompt_ids)} tokens",
        f"response {len(traj.response_ids)} tokens (trained {trained}, masked {len(traj.response_ids) - trained})",
    ]
    if reward is not None:
        parts.append(f"reward {reward:.3f}" if isinstance(reward, (int, float)) else f"reward {html.escape(str(reward))}")
    if "ground_truth" in traj.metadata:
        parts.append(f"ground truth {html.escape(str(traj.metadata['ground_truth']))}")
    if "env_reward" in traj.metadata:
        parts.append(f"environment reward {html.escape(str(traj.metadata['env_reward']))}")
    error = traj.metadata.get("env_error")
    if isinstance(error, dict):
        parts.append(
            f"<span style='color:#b00020'>environment failed in {html.escape(str(error.get('kind')))}: "
            f"{html.escape(str(error.get('message', ''))[:300])}</span>"
        )
    if drift_summary(traj):
        parts.append(drift_summary(traj))
    if "program" in traj.metadata:
        parts.append(program_summary(traj.metadata["program"]))
    return " &middot; ".join(parts)


def program_summary(counters: dict[str, Any]) -> str:
    """An agent program's calls, and where each training segment began and why (programs/assembly.py);
    the view's token strip shows the last segment, the earlier ones are in metadata["segments"]."""
    starts = "; ".join(f"{number}: {html.escape(str(reason))}" for number, reason in enumerate(counters.get("segment_starts", []), 1))
    return (
        f"agent program: {counters.get('calls', 0)} call(s), {counters.get('merged', 0)} merged, "
        f"{counters.get('forks', 0)} new segment(s) &middot; segments began at {starts or 'no call'}"
    )


def turns_html(traj: Trajectory) -> str:
    """Every assistant turn, each with the advantage it trained with when credit went per turn
    (`metadata["turn_advantages"]`, written by the trainer: train/credit.py)."""
    advantages = traj.metadata.get("turn_advantages") or []
    return "".join(
        turn_html(i, turn, advantages[i - 1] if i <= len(advantages) else None) for i, turn in enumerate(traj.turns, 1)
    )


def turn_html(index: int, turn: Turn, advantage: float | None = None) -> str:
    rows = []
    for call, result in zip(turn.calls, turn.results):
        color = STATUS_COLORS.get(result.status, "#000")
        rows.append(
            f"<tr><td>call <code>{html.escape(call.name)}</code></td>"
            f"<td><code>{html.escape(json.dumps(call.arguments, ensure_ascii=False))}</code></td>"
            f"<td style='color:{color}'>{html.escape(result.status)}</td>"
            f"<td><code>{html.escape(result.content[:300])}</code></td>"
            f"<td>{result.latency_s * 1000:.0f} ms{' (cached)' if result.cached else ''}</td></tr>"
        )
    for call in turn.calls[len(turn.results) :]:
        rows.append(f"<tr><td>call <code>{html.escape(call.name)}</code></td><td colspan=4>not run yet</td></tr>")
    for error in turn.parse_errors:
        rows.append(f"<tr><td style='color:#b00020'>parse error</td><td colspan=4>{html.escape(error.message)}</td></tr>")
    table = f"<table class='rf-table'>{''.join(rows)}</table>" if rows else ""
    return (
        f"<div class='rf-turn'><b>assistant turn {index}</b>{credit_html(turn, advantage)} ({turn.num_tokens} tokens, "
        f"{turn.generate_s:.2f} s generate, {turn.tools_s:.2f} s tools, {html.escape(turn.finish_reason)})"
        f"{reasoning_html(turn)}<pre>{html.escape(turn.answer if turn.reasoning and turn.answer is not None else turn.text)}</pre>"
        f"{table}{replies_html(turn)}{state_html(turn.state)}</div>"
    )


def credit_html(turn: Turn, advantage: float | None) -> str:
    """The turn's own environment reward and the advantage its tokens trained with, when known."""
    parts = []
    if turn.env_reward is not None:
        parts.append(f"environment reward {turn.env_reward:g}")
    if advantage is not None:
        parts.append(f"advantage {advantage:+.3f}")
    return f" <span class='rf-credit'>[{' · '.join(parts)}]</span>" if parts else ""


SPEAKER_LABELS = {"user": "user (simulated)", "env": "environment"}


def replies_html(turn: Turn) -> str:
    """What the environment said to an answer without a call, labelled by who said it (a simulated
    user, or the environment: a game's move), apart from tool results; its tokens are masked."""
    if not turn.replies:
        return ""
    label = html.escape(SPEAKER_LABELS.get(turn.speaker, turn.speaker or "environment"))
    said = "".join(f"<pre>{html.escape(str(message.get('content', '')))}</pre>" for message in turn.replies)
    timing = f" ({turn.env_s:.2f} s)" if turn.env_s else ""
    return f"<div class='rf-reply rf-reply-{html.escape(turn.speaker or 'env')}'><b>{label}</b>{timing} (masked){said}</div>"


def state_html(state: dict[str, Any] | None, label: str = "state after this turn") -> str:
    """An environment's `state()` as the loop recorded it (JSON-safe), folded under a label."""
    if state is None:
        return ""
    shown = html.escape(json.dumps(state, ensure_ascii=False, indent=1, default=str)[:2000])
    return f"<details class='rf-state' open><summary>{html.escape(label)}</summary><pre>{shown}</pre></details>"


def reasoning_html(turn: Turn) -> str:
    """The turn's reasoning, folded: what the family's parser read inside its markers (Qwen's
    <think>, Harmony's analysis channel, Mistral's [THINK]). Rewards score the text outside it."""
    if not turn.reasoning:
        return ""
    return (
        f"<details class='rf-reasoning'><summary>reasoning ({len(turn.reasoning)} characters"
        f"{f', {turn.calls_in_reasoning} call(s) drafted, not run' if turn.calls_in_reasoning else ''})"
        f"</summary><pre>{html.escape(turn.reasoning)}</pre></details>"
    )


def prompt_html(traj: Trajectory) -> str:
    lines = []
    for message in traj.messages:
        if message["role"] == "assistant":
            break
        lines.append(f"<div><b>{html.escape(message['role'])}</b>: {html.escape(str(message['content'])[:500])}</div>")
    return "".join(lines) + state_html(traj.metadata.get("env_state"), "state after reset")


def token_strip_html(traj: Trajectory, tokenizer: Any = None) -> str:
    """Response tokens as spans classed `rf-trained` / `rf-masked`; the title shows id and logprob.
    A distilled trajectory (a teacher's log-prob of each sampled token in its metadata:
    train/distill.py) has its trained tokens coloured by the teacher-student gap instead of green."""
    logprobs = iter(traj.logprobs)
    gaps = teacher_gaps(traj)
    scale = max((abs(gap) for gap in gaps), default=0.0)
    spans, sampled = [], 0
    for token_id, mask in zip(traj.response_ids, traj.loss_mask):
        text = tokenizer.decode([token_id]) if tokenizer is not None else f"[{token_id}]"
        shown = html.escape(text).replace("\n", "↵\n")
        style = ""
        if mask:
            logprob = next(logprobs, None)
            title = f"id {token_id}, trained" + (f", logprob {logprob:.3f}" if logprob is not None else "")
            if gaps:  # as many as logprobs, so `logprob` is set
                gap = gaps[sampled]
                title += f", teacher {logprob + gap:.3f}, gap {gap:+.3f}"
                style = f" style='background:{change_color(gap, scale)}'"
            sampled += 1
        else:
            title = f"id {token_id}, masked"
        kind = "rf-trained" if mask else "rf-masked"
        spans.append(f"<span class='rf-token {kind}' title='{title}'{style}>{shown}</span>")
    hint = "" if tokenizer is not None else " &middot; token ids shown: pass a tokenizer to decode them, <code>traj.view(policy.tokenizer)</code>"
    legend = (
        "<div><span class='rf-token rf-trained'>trained (loss mask 1)</span> "
        f"<span class='rf-token rf-masked'>masked (loss mask 0)</span>{hint}</div>"
    )
    if gaps:
        legend += (
            f"<div>trained tokens coloured by teacher minus student log-prob: <span class='rf-token' "
            f"style='background:{change_color(scale, scale)};color:#fff'>+{scale:.2f} the teacher's more likely</span> … 0 … "
            f"<span class='rf-token' style='background:{change_color(-scale, scale)};color:#fff'>−{scale:.2f} less likely</span></div>"
        )
    return f"{legend}<div class='rf-strip'>{''.join(spans)}</div>"


def teacher_gaps(traj: Trajectory) -> list[float]:
    """Teacher minus student log-prob of each sampled token (empty when no teacher scored it)."""
    teacher = traj.metadata.get(TEACHER_KEY) or []
    if len(teacher) != len(traj.logprobs):
        return []
    return [float(t) - float(s) for t, s in zip(teacher, traj.logprobs)]


def drift_html(traj: Trajectory, tokenizer: Any = None) -> str:
    """The drift check recorded at the end of the rollout (agent `drift="warn"` or `"strict"`)."""
    position = traj.metadata.get("drift_position")
    if position is None:
        return "<div>drift check: not run (the agent had drift=\"off\", or the trajectory is still running)</div>"
    if not isinstance(position, int):  # metadata read from a file: show it, never as markup
        return f"<div>drift check: unreadable drift_position {html.escape(repr(position))}</div>"
    if position < 0:
        return "<div style='color:#1b7f3b'>drift check: the rollout ids equal a full chat-template render</div>"
    dropped = traj.metadata.get("dropped_think_blocks", 0)
    rewritten = traj.metadata.get("rewritten_tokens", 0)
    if rewritten and not dropped:
        return (
            f"<div style='color:#555'>drift check: expected template drift. A full chat-template render writes "
            f"{html.escape(str(rewritten))} sampled end token(s) differently in history, as this model family's "
            f"template does by design (first at position {position}); nothing else differs. Training uses the "
            "rollout ids.</div>"
        )
    if dropped:
        return (
            f"<div style='color:#555'>drift check: expected template drift. A full chat-template render drops the "
            f"empty think block of {html.escape(str(dropped))} earlier assistant turn(s), which the rollout keeps as sampled in "
            "Qwen3's non-thinking mode (first at position "
            f"{position}); nothing else differs. Training uses the rollout ids.</div>"
        )
    ids = traj.prompt_ids + traj.response_ids
    window = ids[max(0, position - 8) : position + 8]
    context = tokenizer.decode(window) if tokenizer is not None else str(window)
    where = "in the prompt" if position < len(traj.prompt_ids) else f"at response token {position - len(traj.prompt_ids)}"
    return (
        f"<div style='color:#b35c00'>drift check: the rollout ids differ from a full render at position "
        f"{position} ({where}): <code>{html.escape(str(traj.metadata.get('drift_tokens', '')))}</code>; rollout "
        f"context <code>{html.escape(repr(context))}</code>. Training uses the rollout ids as sampled.</div>"
    )


def drift_details(traj: Trajectory, tokenizer: Any = None) -> str:
    """The drift check folded behind a "Drift check" summary (a saved view's twin of the toggle)."""
    verdict = drift_summary(traj) or "not run"
    return f"<details class='rf-drift'><summary>Drift check: {verdict}</summary>{drift_html(traj, tokenizer)}</details>"


def drift_summary(traj: Trajectory) -> str:
    """The drift verdict in a few words, for the summary line ('' before the check has run)."""
    position = traj.metadata.get("drift_position")
    if position is None:
        return ""
    if not isinstance(position, int):
        return f"unreadable drift_position {html.escape(repr(position))}"
    if position < 0:
        return "no template drift"
    dropped = traj.metadata.get("dropped_think_blocks", 0)
    if dropped:
        return f"template drift: {html.escape(str(dropped))} dropped think block(s), expected"
    if traj.metadata.get("rewritten_tokens", 0):
        return "template drift: end tokens rewritten in history, expected"
    return f"<span style='color:#b35c00'>template drift at position {position}</span>"


def view_html(traj: Trajectory, tokenizer: Any = None) -> str:
    """The whole view as one HTML document fragment (also what the widget shows)."""
    turns = turns_html(traj)
    return f"{_STYLE}<div>{summary_html(traj)}</div>{prompt_html(traj)}{turns}{token_strip_html(traj, tokenizer)}"


@register_view(Trajectory)
class TrajectoryView(StaticFallback, widgets.VBox):
    """A widget over one trajectory; `update(traj)` redraws it (the stepper calls it after each turn).
    `tokenizer` decodes the token strip; without one it shows token ids."""

    def __init__(self, trajectory: Trajectory, tokenizer: Any = None):
        self.tokenizer = tokenizer
        self.summary = widgets.HTML()
        self.turns = widgets.HTML()
        self.strip = widgets.HTML()
        self.drift_toggle = widgets.ToggleButton(value=False, description="Drift check", icon="search")
        self.drift = widgets.HTML(layout=widgets.Layout(display="none"))
        self.drift_toggle.observe(self._toggle_drift, names=["value"])
        super().__init__([self.summary, self.turns, self.strip, widgets.HBox([self.drift_toggle]), self.drift])
        self.add_class("rf-trajectory-view")
        self.update(trajectory)

    def update(self, trajectory: Trajectory) -> None:
        self.trajectory = trajectory
        turns = turns_html(trajectory)
        self.summary.value = f"{_STYLE}<div>{summary_html(trajectory)}</div>"
        self.turns.value = f"{_STYLE}{prompt_html(trajectory)}{turns}"
        self.strip.value = f"{_STYLE}{token_strip_html(trajectory, self.tokenizer)}"
        self.drift.value = drift_html(trajectory, self.tokenizer)

    def static_html(self) -> str:
        """The view, with the drift check folded behind "Drift check" as the live toggle keeps it."""
        return view_html(self.trajectory, self.tokenizer) + drift_details(self.trajectory, self.tokenizer)

    def _toggle_drift(self, change: dict[str, Any]) -> None:
        self.drift.layout.display = "block" if change["new"] else "none"
