"""Asynchronous GRPO against synchronous: steps per minute, engine idle share and held-out reward.

    python bench/async_training.py [--quick] [--steps 8] [--eval-every 4] [--settings sync-engine 0 1 2]
                                   [--out runs/bench-async]

The calculator example (examples/calculator/config.yaml) on the Ray backend with one engine actor and
one policy worker, one CPU each (the 2-core layout: half the machine generates, half trains), run
once per setting, back to back in one invocation, with the same seeds. Settings "0", "1" and "2" are
`grpo.max_staleness` with the same objective, the decoupled loss (grpo.truncate_ratio 2.0: the
trainer recomputes the old log-probs, one more forward pass per update), so they differ in the bound
alone; "sync-engine" is the synchronous default, the engine's log-probs taken as the old ones (no
recompute), to show what that forward pass costs.

Steps per minute count the training steps' wall time without the held-out evaluations (identical
work in every run); engine idle share is 1 - the engines' busy share over the same time. Writes
<out>/async_training.csv (one row per setting and step) and <out>/async_training.png (held-out
greedy reward against wall-clock time, when matplotlib is installed); the figures go to
bench/results/async_training.json and the BENCHMARKS.md section to bench/results/async_training.md.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rlfactory_nb as rf
from bench._common import RESULTS_DIR, machine_line, markdown_table, section, write_csv, write_result
from rlfactory_nb.train.metrics import read_metrics

NAME = "async_training"
EVAL_SIZE = 32
COLUMNS = (
    "setting",
    "step",
    "wall_s",
    "step_s",
    "eval_s",
    "staleness_mean",
    "engine_busy_share",
    "trainer_busy_share",
    "wait_rollouts_s",
    "train_reward",
    "eval_greedy_reward",
    "eval_sampled_reward",
)
SOURCES = {
    "step_s": "time/step_s",
    "eval_s": "time/eval_s",
    "staleness_mean": "async/staleness_mean",
    "engine_busy_share": "async/engine_busy_share",
    "trainer_busy_share": "async/trainer_busy_share",
    "wait_rollouts_s": "time/wait_rollouts_s",
    "train_reward": "reward/mean",
    "eval_greedy_reward": "eval/greedy_reward/mean",
    "eval_sampled_reward": "eval/sampled_reward/mean",
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 steps, small steps, no mid-run eval")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--out", type=Path, default=Path("runs/bench-async"))
    args = parser.parse_args(argv)
    args.overrides = {}
    if args.quick:
        args.steps, args.eval_every = min(args.steps, 3), 3
        args.overrides = {"grpo.prompts_per_step": 2, "grpo.group_size": 2, "data.eval_size": 2}
    return args


SETTINGS = {"sync-engine": (0, None), "0": (0, 2.0), "1": (1, 2.0), "2": (2, 2.0)}
"""setting: (grpo.max_staleness, grpo.truncate_ratio)"""


def run_config(args: argparse.Namespace, setting: str) -> rf.RunConfig:
    staleness, truncate_ratio = SETTINGS[setting]
    overrides: dict[str, Any] = {
        "name": f"setting-{setting}",
        "grpo.truncate_ratio": truncate_ratio,
        "output_dir": str(args.out.resolve()),
        "grpo.steps": args.steps,
        "grpo.eval_every": args.eval_every,
        "grpo.checkpoint_every": 0,
        "grpo.max_staleness": staleness,
        "data.eval_size": EVAL_SIZE,
        "cluster.backend": "ray",
        "cluster.num_workers": 1,
        "cluster.num_engines": 1,
        "cluster.cpus_per_worker": 1,
        **args.overrides,
    }
    return rf.example("calculator").config(overrides)


LABELS = {
    "sync-engine": "synchronous, engine log-probs as old",
    "0": "max_staleness 0 (synchronous)",
    "1": "max_staleness 1",
    "2": "max_staleness 2",
}


def table_rows(metrics: list[dict[str, Any]], started: float, setting: str) -> list[dict[str, Any]]:
    rows = []
    for metric in metrics:
        row = {
            "setting": setting,
            "step": metric["step"],
            "wall_s": round(metric["time"] - started, 1),
        }
        row.update({column: metric.get(key, "") for column, key in SOURCES.items()})
        rows.append(row)
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Steps per minute without evaluations, engine idle share (time-weighted), held-out rewards."""
    steps = [row for row in rows if row["step"] > 0]
    train_s = [row["step_s"] - (row["eval_s"] or 0.0) for row in steps]
    busy = sum(row["engine_busy_share"] * s for row, s in zip(steps, train_s))
    evals = [row for row in rows if row["eval_greedy_reward"] != ""]
    return {
        "steps": len(steps),
        "train_s": round(sum(train_s), 1),
        "steps_per_min": round(60 * len(steps) / sum(train_s), 3),
        "engine_idle_share": round(1 - busy / sum(train_s), 3),
        "staleness_mean": round(sum(row["staleness_mean"] for row in steps) / len(steps), 3),
        "greedy_first": evals[0]["eval_greedy_reward"],
        "greedy_last": evals[-1]["eval_greedy_reward"],
        "sampled_last": evals[-1]["eval_sampled_reward"],
    }


def train_once(args: argparse.Namespace, setting: str) -> list[dict[str, Any]]:
    cfg = run_config(args, setting)
    if cfg.run_dir.exists():
        shutil.rmtree(cfg.run_dir)
    started = time.time()
    result = rf.train_sync(cfg)
    print(f"setting {setting}: {result.step} steps in {(time.time() - started) / 60:.1f} min")
    return table_rows(read_metrics(result.run_dir), started, setting)


def write_plot(rows: list[dict[str, Any]], path: Path) -> bool:
    """Held-out greedy reward against wall-clock minutes, one line per setting."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axis = plt.subplots(figsize=(6, 3.5))
    for setting in dict.fromkeys(row["setting"] for row in rows):
        evals = [r for r in rows if r["setting"] == setting and r["eval_greedy_reward"] != ""]
        axis.plot(
            [r["wall_s"] / 60 for r in evals],
            [r["eval_greedy_reward"] for r in evals],
            marker="o",
            label=LABELS.get(setting, f"max_staleness {setting}"),
        )
    axis.set(
        xlabel="wall-clock minutes",
        ylabel="held-out greedy reward",
        ylim=(0, 1.02),
        title="tiny-calculator GRPO, Ray: 1 engine + 1 worker",
    )
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return True


def markdown(by_setting: dict[str, dict[str, Any]], argv: list[str], machine: str, plotted: bool) -> str:
    base = by_setting.get("0")
    header = [
        "setting",
        "steps/min",
        "vs max_staleness 0",
        "engine idle",
        "staleness mean",
        "held-out greedy first -> last",
        "sampled last",
    ]
    rows = []
    for setting, run in by_setting.items():
        speedup = f"{run['steps_per_min'] / base['steps_per_min']:.2f}x" if base else ""
        rows.append(
            [
                LABELS.get(setting, setting),
                run["steps_per_min"],
                speedup,
                f"{run['engine_idle_share']:.0%}",
                run["staleness_mean"],
                f"{run['greedy_first']:.3f} -> {run['greedy_last']:.3f}",
                f"{run['sampled_last']:.3f}",
            ]
        )
    bullets = [
        (
            "- Goals (issue 16): at max_staleness 1, >= 1.6x the steps per minute of synchronous; "
            "held-out reward within 0.05 of synchronous at the same step count."
        ),
        (
            "- Steps per minute exclude the held-out evaluations; the held-out reward is over "
            f"{EVAL_SIZE} prompts, one sample each, so a difference of 0.05 is {0.05 * EVAL_SIZE:g} prompts."
        ),
    ]
    extra = (
        ["![held-out greedy reward against wall-clock time](bench/results/async_training.png)"]
        if plotted
        else []
    )
    return section(
        "Asynchronous GRPO (max_staleness 0, 1, 2)",
        "bench/async_training.py",
        argv,
        machine,
        markdown_table(header, rows),
        bullets,
        *extra,
    )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    machine = machine_line()
    from rlfactory_nb.models import presets

    presets.preset_path("tiny-calculator")
    runs = {setting: train_once(args, setting) for setting in args.settings}
    rows = [row for run in runs.values() for row in run]
    out = args.out.resolve()
    write_csv(rows, out / f"{NAME}.csv", COLUMNS)
    plotted = write_plot(rows, out / f"{NAME}.png")
    for name in (f"{NAME}.csv", f"{NAME}.png") if plotted else (f"{NAME}.csv",):
        shutil.copy(out / name, RESULTS_DIR / name)
    by_setting = {setting: summary(run) for setting, run in runs.items()}
    write_result(NAME, {"by_setting": by_setting}, markdown(by_setting, argv, machine, plotted))
    for setting, run in by_setting.items():
        print(f"setting {setting}: {run}")


if __name__ == "__main__":
    main()
