"""`rlfactory-nb compare RUN_DIR --steps 0 30`: what a run changed between two steps, as files.

Step 0 is the run's base model; any other step is its checkpoint. The trajectories scored are the
ones the run saved at the later step (or the nearest saved step before it): fixed token ids, scored
by both policies (`rf.compare_policies`). Written to OUT (default RUN_DIR/compare/step_A-step_B):
tokens.csv (one row per sampled token), turns.csv, top_tokens.csv, and compare.html, the view's
static page, which opens offline.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlfactory_nb.compare import compare_policies_sync
from rlfactory_nb.config import RunConfig
from rlfactory_nb.errors import PathNotFoundError
from rlfactory_nb.models.checkpoint import RUN_CONFIG, list_checkpoints
from rlfactory_nb.train.run_folder import COMPARE, TRAJECTORIES, RunFolder
from rlfactory_nb.types import Trajectory


def run_compare_command(args: argparse.Namespace) -> int:
    run = Path(args.run_dir)
    first, second = args.steps
    trajectories = saved_trajectories(run, max(first, second))[: args.limit]
    comparison = compare_policies_sync(trajectories, policy_at(run, first), policy_at(run, second), device=args.device)
    out = Path(args.out) if args.out else run / COMPARE / f"step_{first}-step_{second}"
    out.mkdir(parents=True, exist_ok=True)
    comparison.tokens.to_csv(out / "tokens.csv", index=False)
    comparison.turns.to_csv(out / "turns.csv", index=False)
    comparison.top_tokens(args.top).to_csv(out / "top_tokens.csv", index=False)
    page = (
        f"<html><head><meta charset='utf-8'><title>{run.name}: step {first} vs {second}</title></head>"
        "<body style='font-family:sans-serif'>"
    )
    # the view's offline rendering, reached by type: no core module imports a widget module
    (out / "compare.html").write_text(f"{page}{comparison.view().static_html()}</body></html>", encoding="utf-8")
    print(comparison.top_tokens(args.top).to_string(index=False, float_format=lambda value: f"{value:.4f}"))  # never 1.2e-05
    print(f"wrote {out}/tokens.csv, turns.csv, top_tokens.csv and compare.html ({len(trajectories)} trajectories)")
    return 0


def policy_at(run: Path, step: int) -> str:
    """The model a run held at `step`: its base model for 0, else that step's checkpoint folder."""
    checkpoints = {checkpoint.step: checkpoint.path for checkpoint in list_checkpoints(run)}
    if step == 0:
        base = RunFolder(run).status().get("model")
        if base is None and checkpoints:
            base = RunConfig.from_yaml(next(iter(checkpoints.values())) / RUN_CONFIG).model.name
        if base is None:
            raise PathNotFoundError(f"{run} names no base model (no job.json, no checkpoint): is it a run folder?")
        return str(base)
    if step not in checkpoints:
        raise PathNotFoundError(f"{run} has no checkpoint of step {step}; it has steps {sorted(checkpoints) or 'none'}")
    return str(checkpoints[step])


def saved_trajectories(run: Path, step: int) -> list[Trajectory]:
    """The trajectories saved at `step`, or at the nearest saved step before it."""
    usable = [saved for saved in RunFolder(run).trajectory_steps() if saved <= step]
    if not usable:
        raise PathNotFoundError(f"{run}/{TRAJECTORIES} holds no saved step at or before {step}")
    return RunFolder(run).load_trajectories(usable[-1])
