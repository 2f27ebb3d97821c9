"""RolloutStepper: walk through one live rollout a turn at a time.

"Next turn" runs one assistant turn and the tool calls it makes, or the environment's response to
it (`AgentSession.step`), "Run to end" finishes the trajectory, "Reset" starts a fresh one from the
same prompt (closing an episode in progress). With an environment, a dataset row as the prompt is
what its `reset` sees, and the view shows what the environment or a simulated user said, each
labelled, and the episode's state after every step. The trajectory under the
buttons is the same object `agent.rollout` would return, drawn by TrajectoryView after every turn.
The async methods (`next_turn`, `run_to_end`) are the API; the buttons schedule them on the kernel's
loop so the kernel stays responsive while the model generates.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import html
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets

from rlfactory_nb._async import run_sync
from rlfactory_nb.envs.base import ToolSetEnvironment
from rlfactory_nb.programs.program import AgentProgram
from rlfactory_nb.rollout.agent import Agent, AgentSession
from rlfactory_nb.runtime import Runtime
from rlfactory_nb.types import Message, Trajectory, Turn
from rlfactory_nb.widgets._base import StaticFallback, error_area, home_loop, run_callback
from rlfactory_nb.widgets.registry import register_view
from rlfactory_nb.widgets.trajectory import TrajectoryView


def as_messages(prompt: str | Sequence[Message] | dict[str, Any]) -> list[Message]:
    """A prompt given as text, as chat messages, or as a dataset row (`{"messages": ...}`)."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, dict):
        return list(prompt["messages"])
    return list(prompt)


@register_view(Agent)
class RolloutStepper(StaticFallback, widgets.VBox):
    """One rollout of `agent` from `prompt`, a turn at a time; also the view a core module gets
    for an agent: `view_of(agent, prompt=...)` (rlfactory_nb/_views.py). An `rf.AgentProgram`
    steps one model call at a time (its session has the same step / done / trajectory)."""

    def __init__(
        self, agent: Agent | AgentProgram | Runtime, prompt: str | Sequence[Message] | dict[str, Any],
        metadata: dict[str, Any] | None = None,
    ):
        """`agent`: an Agent, or a run's Runtime (its tools started), stepped with `runtime.agent()`."""
        agent = agent.agent() if isinstance(agent, Runtime) else agent
        self.agent = agent
        self.messages = as_messages(prompt)
        self.row = prompt if isinstance(prompt, dict) else None
        """a dataset row given as the prompt: an environment's `reset` sees its columns"""
        self.metadata = dict(metadata or (prompt.get("metadata") if isinstance(prompt, dict) else None) or {})
        if isinstance(prompt, dict) and "ground_truth" in prompt:
            self.metadata.setdefault("ground_truth", prompt["ground_truth"])
        self.next_button = widgets.Button(description="Next turn", icon="step-forward", button_style="primary")
        self.run_button = widgets.Button(description="Run to end", icon="fast-forward")
        self.reset_button = widgets.Button(description="Reset", icon="undo")
        self.status = widgets.HTML()
        self.versions = widgets.HTML()
        self.errors = error_area()
        self.next_button.on_click(lambda _: self._click(self.next_turn))
        self.run_button.on_click(lambda _: self._click(self.run_to_end))
        self.reset_button.on_click(lambda _: self._click(self.reset))
        self.session: AgentSession = agent.start(self._prompt(), self.metadata)
        self.view = TrajectoryView(self.session.trajectory, agent.tokenizer)
        buttons = widgets.HBox([self.next_button, self.run_button, self.reset_button, self.status])
        super().__init__([buttons, self.versions, self.view, self.errors])
        self.add_class("rf-rollout-stepper")
        self._busy = False
        self._loop = home_loop()
        self._refresh()

    @property
    def trajectory(self) -> Trajectory:
        return self.session.trajectory

    @property
    def done(self) -> bool:
        return self.session.done

    async def next_turn(self) -> Turn | None:
        """Run one more turn (generation + tool calls); returns it."""
        turn = await self.session.step()
        self._refresh()
        return turn

    async def run_to_end(self) -> Trajectory:
        while not self.session.done:
            await self.session.step()
            self._refresh()
        return self.trajectory

    def reset(self) -> None:
        """Start over from the prompt (a new sample); an episode in progress is closed."""
        previous = self.session
        if not previous.done:
            _close_soon(previous)
        self.session = self.agent.start(self._prompt(), self.metadata)
        self.errors.clear_output()
        self._refresh()

    def static_html(self) -> str:
        return f"<div>{self.status.value}</div>{self.versions.value}{self.view.static_html()}"

    def _prompt(self) -> Any:
        if self.row is None:
            return self.messages
        return {key: value for key, value in self.row.items() if key != "metadata"}

    def _click(self, action: Any) -> None:
        if self._busy:
            return
        self._set_busy(True)
        outcome = run_callback(self.errors, action, loop=self._loop)
        if isinstance(outcome, (asyncio.Future, concurrent.futures.Future)):
            outcome.add_done_callback(lambda _: self._set_busy(False))
        else:
            self._set_busy(False)

    def _set_busy(self, busy: bool) -> None:
        self._busy = busy
        self._refresh()

    def _refresh(self) -> None:
        traj = self.trajectory
        self.view.update(traj)
        ended = self.session.done
        self.next_button.disabled = self.run_button.disabled = ended or self._busy
        state = "running..." if self._busy else (f"ended: {html.escape(traj.finish_reason)}" if ended else "ready")
        episode_env = getattr(self.session, "env", None)  # an agent program's session has none
        env = "" if isinstance(episode_env, ToolSetEnvironment) or episode_env is None else (
            f" &middot; environment {html.escape(type(episode_env).__name__)}"
        )
        self.status.value = f"&nbsp;turn {traj.num_turns} of at most {self.agent.max_turns} &middot; {state}{env}"
        self.versions.value = versions_html(traj.turns)


register_view(AgentProgram)(RolloutStepper)


def _close_soon(session: AgentSession) -> None:
    """Close an abandoned session's environment: on the running loop (a notebook cell), else now."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        run_sync(session.close())
        return
    loop.create_task(session.close())


def versions_html(turns: Sequence[Turn]) -> str:
    """Which policy version (a job's step) sampled each turn; empty when no engine reports one.

    >>> versions_html([Turn("a", policy_version=3), Turn("b", policy_version=4)])
    "<div class='rf-policy-versions'>policy version per turn: 1: step 3 &middot; 2: step 4</div>"
    """
    if all(turn.policy_version is None for turn in turns):
        return ""
    labels = " &middot; ".join(
        f"{number}: {'?' if turn.policy_version is None else f'step {html.escape(str(turn.policy_version))}'}"
        for number, turn in enumerate(turns, start=1)
    )
    return f"<div class='rf-policy-versions'>policy version per turn: {labels}</div>"
