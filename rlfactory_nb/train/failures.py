"""A dead Ray actor, said so that a person can act on it.

Ray reports an actor whose process died as a `RayActorError` carrying an actor id and a long text.
The trainer knows its actors by role ("policy worker 1 of 2", "engine actor 0"); matching the id
turns the error into "policy worker 1 of 2 (pid 4242) died: <Ray's reason>". Ray is looked at only
when it is already imported, so the local backend never pays for it.

`StepGuard` watches a step's work on the backend (rollouts, rewards, the update, the weight sync, a
checkpoint) and turns a failure into `StepFailed`, naming the step, the phase, the dead actor and the
checkpoint to resume from; the trainer and the step source (train/steps.py) share one.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlfactory_nb.errors import StepFailed

if TYPE_CHECKING:
    from rlfactory_nb.train.backends import Backend

_PID = re.compile(r"\bpid: (\d+)")
_EXIT_DETAIL = re.compile(r"(?:Worker exit detail|The actor is dead because)[:]? ([^\n]+)")


class StepGuard:
    """Watches a step's work on the backend; a failure becomes StepFailed saying what died and how to resume."""

    def __init__(self) -> None:
        self.backend: Backend | None = None
        """set once the trainer has started it"""
        self.last_checkpoint: Path | None = None
        """where a failed run resumes from"""

    @contextlib.contextmanager
    def during(self, step: int, phase: str, actor_deaths_only: bool = False) -> Iterator[None]:
        """Around the awaits of one phase of step `step`. With `actor_deaths_only` (rollouts and
        rewards, whose other errors are the user's to see as they are) any exception but a Ray
        actor's death passes through unchanged."""
        try:
            yield
        except Exception as error:
            if actor_deaths_only and not is_actor_death(error):
                raise
            where = self.last_checkpoint or "none yet (resuming starts the run over)"
            raise StepFailed(
                f"step {step} failed during {phase}: "
                f"{describe_failure(error, backend_actors(self.backend), backend_node_of(self.backend))}\n"
                f"The last checkpoint is {where}. Fix the cause, then resume: train(cfg, resume=True), "
                "`rlfactory-nb train CONFIG --resume`, or launch(cfg, cluster, resume=True)."
            ) from error


def backend_actors(backend: Backend) -> dict[str, Any]:
    """The backend's Ray actors by role (empty for a backend without any, such as LocalBackend)."""
    return backend.actors()


def is_actor_death(error: BaseException) -> bool:
    return _actor_error(error) is not None


def backend_node_of(backend: Backend) -> Callable[[str], str | None]:
    """The node an actor role runs on, from the backend's placement record (cluster/placement.py),
    for backends that keep one; else a function that knows none."""
    placement = getattr(backend, "placement", None)
    return placement.node_of if placement is not None else lambda role: None


def describe_failure(
    error: BaseException, actors: Mapping[str, Any], node_of: Callable[[str], str | None] = lambda role: None
) -> str:
    """`error` in one paragraph; when it is a Ray actor death, which of `actors` died, on which node
    (`node_of(role)`), and why."""
    dead = _actor_error(error)
    if dead is None:
        return f"{type(error).__name__}: {error}"
    text = str(dead)
    role = next((name for name, handle in actors.items() if _actor_id(handle) == dead.actor_id), None)
    node = node_of(role) if role is not None else None
    who = (role or f"a Ray actor ({dead.actor_id})") + (f" on node {node}" if node else "")
    pid = _PID.search(text)
    reason = _EXIT_DETAIL.search(text)
    return (
        f"{who}{f' (pid {pid.group(1)})' if pid else ''} died"
        + (f": {reason.group(1).strip()}" if reason else "")
        + " (its process was killed or crashed: check the machine's memory (OOM killer) and the worker log)"
    )


def _actor_error(error: BaseException) -> Any:
    """The RayActorError in `error`'s cause chain, or None."""
    exceptions = sys.modules.get("ray.exceptions")
    if exceptions is None:
        return None
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, exceptions.RayActorError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _actor_id(handle: Any) -> str | None:
    actor_id = getattr(handle, "_actor_id", None)
    return actor_id.hex() if actor_id is not None else None
