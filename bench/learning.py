"""Does GRPO learn? A short run on the tiny-calculator preset, its held-out curve as a table and a plot.

    python bench/learning.py [--steps 12] [--eval-every 4] [--out runs/bench-learning]

The run is the bundled example config (examples/calculator/config.yaml) with only steps, eval
cadence and the output folder overridden, so the figures describe what `make demo` and notebook 03
train. Writes <out>/learning.csv (one row per step; eval columns filled on eval steps) and
<out>/learning.png (when matplotlib, from the `bench` extra, is installed), and prints the first and
last held-out evaluation side by side. The run's own folder (metrics.jsonl, trajectories,
checkpoints) is <out> itself.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path
from typing import Any

import rlfactory_nb as rf

COLUMNS = (
    "step",
    "wall_s",
    "train_reward",
    "eval_sampled_reward",
    "eval_greedy_reward",
    "eval_tool_call_rate",
)
# Which metrics row key fills each column (absent on steps without an eval).
SOURCES = {
    "train_reward": "reward/mean",
    "eval_sampled_reward": "eval/sampled_reward/mean",
    "eval_greedy_reward": "eval/greedy_reward/mean",
    "eval_tool_call_rate": "eval/sampled/tool_call_rate",
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("runs/bench-learning"))
    return parser.parse_args()


def run_config(steps: int, eval_every: int, out: Path) -> rf.RunConfig:
    out = out.resolve()
    return rf.example("calculator").config(
        {
            "name": out.name,
            "output_dir": str(out.parent),
            "grpo.steps": steps,
            "grpo.eval_every": eval_every,
            "grpo.checkpoint_every": 0,  # only the final checkpoint: the bench measures learning
        }
    )


def table_rows(metrics: list[dict[str, Any]], started: float) -> list[dict[str, Any]]:
    """One CSV row per metrics row; `time` in metrics.jsonl is the wall clock when the row was written."""
    rows = []
    for metric in metrics:
        row = {"step": metric["step"], "wall_s": round(metric["time"] - started, 1)}
        row.update({column: metric.get(key, "") for column, key in SOURCES.items()})
        rows.append(row)
    return rows


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def write_plot(rows: list[dict[str, Any]], path: Path) -> bool:
    """The held-out curves against step; False (nothing written) when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    evals = [row for row in rows if row["eval_sampled_reward"] != ""]
    figure, axis = plt.subplots(figsize=(6, 3.5))
    for column, label in (
        ("eval_sampled_reward", "held-out reward (sampled, T=1)"),
        ("eval_greedy_reward", "held-out reward (greedy)"),
        ("eval_tool_call_rate", "tool-call rate (sampled)"),
    ):
        axis.plot([row["step"] for row in evals], [row[column] for row in evals], marker="o", label=label)
    trained = [row for row in rows if row["train_reward"] != ""]
    axis.plot(
        [row["step"] for row in trained],
        [row["train_reward"] for row in trained],
        alpha=0.4,
        label="train reward",
    )
    axis.set(xlabel="GRPO step", ylim=(0, 1.02), title="tiny-calculator GRPO")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return True


def before_after(rows: list[dict[str, Any]]) -> str:
    evals = [row for row in rows if row["eval_sampled_reward"] != ""]
    if not evals:
        return "no evaluation rows (eval-every 0?)"
    first, last = evals[0], evals[-1]
    lines = [
        f"| held-out metric (64 prompts)    | step {first['step']:<3} | step {last['step']:<3} |",
        "|---------------------------------|----------|----------|",
    ]
    for column, label in (
        ("eval_sampled_reward", "reward, sampled (T=1)"),
        ("eval_greedy_reward", "reward, greedy"),
        ("eval_tool_call_rate", "tool-call rate, sampled"),
    ):
        lines.append(f"| {label:<31} | {first[column]:>8.3f} | {last[column]:>8.3f} |")
    return "\n".join(lines)


def main() -> None:
    args = parse_args()
    cfg = run_config(args.steps, args.eval_every, args.out)
    started = time.time()
    result = rf.train_sync(cfg)
    elapsed = time.time() - started
    rows = table_rows(rf.read_metrics(result.run_dir), started)
    write_csv(rows, result.run_dir / "learning.csv")
    plotted = write_plot(rows, result.run_dir / "learning.png")
    print(before_after(rows))
    print(f"{result.step} steps in {elapsed / 60:.1f} min; wrote {result.run_dir / 'learning.csv'}")
    if not plotted:
        print("learning.png not written: matplotlib is not installed (pip install '.[bench]')")


if __name__ == "__main__":
    main()
