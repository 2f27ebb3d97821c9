"""Does GRPO learn? A short run on the tiny-calculator preset, its held-out curve as a table and a plot.

    python bench/learning.py [--quick] [--steps 12] [--eval-every 4] [--out runs/bench-learning]

The run is the bundled example config (examples/calculator/config.yaml) with only steps, eval
cadence and the output folder overridden, so the figures describe what `make demo` and notebook 03
train. Writes <out>/learning.csv (one row per step; eval columns filled on eval steps) and
<out>/learning.png (when matplotlib, from the `bench` extra, is installed), and prints the first and
last held-out evaluation side by side. The run's own folder (metrics.jsonl, trajectories,
checkpoints) is <out> itself; a previous bench run there is replaced. The figures also go to
bench/results/learning.json and the BENCHMARKS.md section to bench/results/learning.md.
"""

from __future__ import annotations

import argparse
import csv
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rlfactory_nb as rf
from bench._common import (
    RESULTS_DIR,
    machine_line,
    markdown_table,
    peak_rss_mib,
    section,
    write_result,
)

NAME = "learning"

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


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 steps, eval every 2")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("runs/bench-learning"))
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.eval_every = min(args.steps, 4), min(args.eval_every, 2)
    return args


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
        from matplotlib.ticker import MaxNLocator
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
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return True


EVAL_COLUMNS = (
    ("eval_sampled_reward", "reward, sampled (T=1)"),
    ("eval_greedy_reward", "reward, greedy"),
    ("eval_tool_call_rate", "tool-call rate, sampled"),
)


def eval_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [row for row in rows if row["eval_sampled_reward"] != ""]


def before_after(rows: list[dict[str, Any]], eval_size: int = 64) -> str:
    """Every held-out evaluation as a column, the first (before training) to the last.

    >>> rows = [{"step": s, "eval_sampled_reward": r, "eval_greedy_reward": r, "eval_tool_call_rate": 1.0}
    ...         for s, r in ((0, 0.25), (4, 0.5))]
    >>> print(before_after(rows))
    | held-out metric (64 prompts) | step 0 | step 4 |
    |---|---:|---:|
    | reward, sampled (T=1) | 0.250 | 0.500 |
    | reward, greedy | 0.250 | 0.500 |
    | tool-call rate, sampled | 1.000 | 1.000 |
    """
    evals = eval_rows(rows)
    if not evals:
        return "no evaluation rows (eval-every 0?)"
    header = [f"held-out metric ({eval_size} prompts)"] + [f"step {row['step']}" for row in evals]
    table = [[label] + [f"{row[column]:.3f}" for row in evals] for column, label in EVAL_COLUMNS]
    return markdown_table(header, table)


def summary(rows: list[dict[str, Any]], result: Any, cfg: rf.RunConfig, elapsed: float) -> dict[str, Any]:
    evals = eval_rows(rows)
    step_times = [row["wall_s"] for row in rows if row["step"]]
    return {
        "steps": result.step,
        "eval_every": cfg.grpo.eval_every,
        "wall_s": round(elapsed, 1),
        "seconds_per_step": round(step_times[-1] / len(step_times), 1) if step_times else None,
        "peak_rss_mib": round(peak_rss_mib()),
        "before": {column: evals[0][column] for column, _ in EVAL_COLUMNS} if evals else None,
        "after": {column: evals[-1][column] for column, _ in EVAL_COLUMNS} if evals else None,
        "csv": str(result.run_dir / "learning.csv"),
        "rows": rows,
    }


def markdown(
    data: dict[str, Any], table: str, plotted: bool, argv: list[str], machine: str, out: Path
) -> str:
    bullets = [
        (
            "- The bundled `examples/calculator/config.yaml` (16 prompts x 8 rollouts per step, up to 3 "
            "turns with the calculator MCP tool, DAPO loss, lr 3e-4, `hf` engine, one process) with only "
            "the step count, eval cadence and output folder changed. Held-out evaluation: 64 prompts the "
            "training set never shows, one rollout each, sampled at T=1 and greedy."
        ),
        (
            f"- {data['steps']} steps in {data['wall_s'] / 60:.1f} min wall, evaluations included "
            f"(about {data['seconds_per_step']} s a step on average); peak RSS {data['peak_rss_mib']} MiB."
        ),
        "- Rollouts are sampled, so reruns differ by a few points.",
        "- Output: `bench/results/learning.csv` (step, wall_s, train_reward, eval_sampled_reward, "
        f"eval_greedy_reward, eval_tool_call_rate) and the plot below, copied from the run folder `{out}/`"
        + ("." if plotted else "; `learning.png` was not written (matplotlib missing)."),
    ]
    if data["before"] and data["before"]["eval_greedy_reward"] < 0.05:
        bullets.insert(
            2,
            "- Greedy reward before training is near 0: after the warm-start the first token is close to "
            "a coin-flip between calling the tool and guessing, and greedy decoding picks guessing.",
        )
    plot = ["![held-out reward vs step](bench/results/learning.png)"] if plotted else []
    title = "GRPO learns the calculator task (tiny-calculator preset)"
    return section(title, "bench/learning.py", argv, machine, table, bullets, *plot)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    machine = machine_line()
    cfg = run_config(args.steps, args.eval_every, args.out)
    if cfg.run_dir.exists():
        print(f"replacing the previous bench run in {cfg.run_dir}")
        shutil.rmtree(cfg.run_dir)
    started = time.time()
    result = rf.train_sync(cfg)
    elapsed = time.time() - started
    rows = table_rows(rf.read_metrics(result.run_dir), started)
    write_csv(rows, result.run_dir / "learning.csv")
    plotted = write_plot(rows, result.run_dir / "learning.png")
    for name in ("learning.csv", "learning.png") if plotted else ("learning.csv",):
        shutil.copy(result.run_dir / name, RESULTS_DIR / name)  # kept with BENCHMARKS.md
    table = before_after(rows, cfg.data.eval_size)
    data = summary(rows, result, cfg, elapsed)
    write_result(NAME, data, markdown(data, table, plotted, argv, machine, args.out))
    print(table)
    print(f"{result.step} steps in {elapsed / 60:.1f} min; wrote {result.run_dir / 'learning.csv'}")
    if not plotted:
        print("learning.png not written: matplotlib is not installed (pip install '.[bench]')")


if __name__ == "__main__":
    main()
