"""Does GRPO learn? A short run on the tiny-calculator preset, its held-out curve as a table and a plot.

    python bench/learning.py [--quick] [--steps 12] [--eval-every 4] [--out runs/bench-learning]
                             [--dtypes float32 bfloat16] [--layouts padded packed]

The run is the bundled example config (examples/calculator/config.yaml) with only steps, eval
cadence, the output folder and the compute dtype overridden, so the figures describe what `make demo`
and notebook 03 train. It runs once per compute dtype (`model.dtype`; the master weights and AdamW
state stay float32), one after the other with the same seeds: float32 is what a CPU run uses, bfloat16
what a GPU run uses (CPU runs bfloat16 arithmetic the same way), so the bfloat16 row shows whether
mixed precision learns as well. With `--layouts padded packed` each dtype also runs with
`grpo.padding_free` (its run named `<dtype>-packed`): same seeds, so the two runs start from the
same rollouts and show whether packed micro-batches learn as padded ones do. Writes <out>/learning.csv (one row per dtype and step; eval columns
filled on eval steps) and <out>/learning.png (when matplotlib, from the `bench` extra, is installed),
and prints the held-out evaluations side by side. Each run's own folder (metrics.jsonl, trajectories,
checkpoints) is <out>/<dtype>; a previous bench run there is replaced. The figures also go to
bench/results/learning.json and the BENCHMARKS.md section to bench/results/learning.md.
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
from bench._common import (
    RESULTS_DIR,
    machine_line,
    markdown_table,
    peak_rss_mib,
    section,
    write_csv,
    write_result,
)
from rlfactory_nb.train.metrics import read_metrics

NAME = "learning"

COLUMNS = (
    "dtype",
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
    parser.add_argument(
        "--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES, help="compute dtypes, one run each"
    )
    parser.add_argument(
        "--layouts",
        nargs="+",
        default=["padded"],
        choices=LAYOUTS,
        help="micro-batch layouts, one run each per dtype (packed: grpo.padding_free)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.eval_every = min(args.steps, 4), min(args.eval_every, 2)
    return args


DTYPES = ("float32", "bfloat16")
"""compute dtypes compared (model.dtype); the master weights and AdamW state are float32 in both"""
LAYOUTS = ("padded", "packed")
"""micro-batch layouts compared: padded rows, or packed ones (grpo.padding_free)"""


def run_name(dtype: str, layout: str = "padded") -> str:
    """A run's name and its key in the tables: its dtype, '-packed' when packed."""
    return dtype if layout == "padded" else f"{dtype}-{layout}"


def run_config(
    steps: int, eval_every: int, out: Path, dtype: str = "float32", layout: str = "padded"
) -> rf.RunConfig:
    out = out.resolve()
    return rf.example("calculator").config(
        {
            "name": run_name(dtype, layout),
            "output_dir": str(out),
            "model.dtype": dtype,
            "grpo.padding_free": layout == "packed",
            "model.master_dtype": "float32",
            "grpo.steps": steps,
            "grpo.eval_every": eval_every,
            "grpo.checkpoint_every": 0,  # only the final checkpoint: the bench measures learning
        }
    )


def table_rows(metrics: list[dict[str, Any]], started: float, dtype: str = "float32") -> list[dict[str, Any]]:
    """One CSV row per metrics row; `time` in metrics.jsonl is the wall clock when the row was written."""
    rows = []
    for metric in metrics:
        row = {"dtype": dtype, "step": metric["step"], "wall_s": round(metric["time"] - started, 1)}
        row.update({column: metric.get(key, "") for column, key in SOURCES.items()})
        rows.append(row)
    return rows


def write_plot(rows: list[dict[str, Any]], path: Path) -> bool:
    """The held-out curves against step; False (nothing written) when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        return False
    figure, axis = plt.subplots(figsize=(6, 3.5))
    dtypes = list(dict.fromkeys(row.get("dtype", "float32") for row in rows))
    for dtype, style in zip(dtypes, ("-", "--", ":")):
        own = [row for row in rows if row.get("dtype", "float32") == dtype]
        evals = eval_rows(own)
        suffix = f", {dtype}" if len(dtypes) > 1 else ""
        for (column, label), color in zip(EVAL_COLUMNS, ("C0", "C1", "C2")):
            axis.plot(
                [row["step"] for row in evals],
                [row[column] for row in evals],
                style,
                color=color,
                marker="o",
                label=f"held-out {label}{suffix}",
            )
        trained = [row for row in own if row["train_reward"] != ""]
        axis.plot(
            [row["step"] for row in trained],
            [row["train_reward"] for row in trained],
            style,
            color="C7",
            alpha=0.4,
            label=f"train reward{suffix}",
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
        "dtype": cfg.model.dtype,
        "master_dtype": cfg.model.master_dtype,
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


def dtype_tables(runs: dict[str, list[dict[str, Any]]], eval_size: int = 64) -> str:
    """`before_after` for each compute dtype's run, each under a line naming it."""
    return "\n\n".join(
        f"Compute dtype {describe(dtype)} (master weights and AdamW state float32):\n\n"
        f"{before_after(rows, eval_size)}"
        for dtype, rows in runs.items()
    )


def run_kinds(names: list[str]) -> str:
    """What the runs compare, for a title.

    >>> run_kinds(["float32", "float32-packed", "bfloat16", "bfloat16-packed"])
    'float32 and bfloat16 compute, padded and packed micro-batches'
    >>> run_kinds(["float32"])
    'float32 compute'
    """
    dtypes = dict.fromkeys(name.partition("-")[0] for name in names) or {"float32": None}
    layouts = dict.fromkeys(name.partition("-")[2] or "padded" for name in names)
    kinds = f"{' and '.join(dtypes)} compute"
    return kinds + (f", {' and '.join(layouts)} micro-batches" if len(layouts) > 1 else "")


def describe(name: str) -> str:
    """A run's name as the tables say it: 'float32-packed' -> 'float32, packed micro-batches'."""
    dtype, _, layout = name.partition("-")
    return f"{dtype}, {layout} micro-batches (grpo.padding_free)" if layout else dtype


def dtype_bullets(by_dtype: dict[str, dict[str, Any]]) -> list[str]:
    """Per run: steps, wall time, s/step; then the held-out rewards after the last step side by side."""
    timing = "; ".join(
        f"{dtype}: {run['steps']} steps in {run['wall_s'] / 60:.1f} min (about {run['seconds_per_step']} s a step)"
        for dtype, run in by_dtype.items()
    )
    after = [(dtype, run["after"]) for dtype, run in by_dtype.items() if run["after"]]
    rewards = ", ".join(
        f"{dtype} {values['eval_sampled_reward']:.3f} sampled / {values['eval_greedy_reward']:.3f} greedy"
        for dtype, values in after
    )
    return [
        (
            "- One run per compute dtype and layout, one after the other in this process, same config "
            "and seeds: "
            f"{timing}, evaluations included."
        ),
        (
            f"- Held-out reward after the last step: {rewards}. bfloat16 compute runs over float32 master "
            "weights and AdamW state (autocast). At this preset's lr (3e-4) even bfloat16 weights would "
            "move: the row checks that the mixed-precision path trains as well as float32 (rollouts are "
            "sampled, so a few points either way are noise); the lr 1e-6 case is checked by "
            "tests/train/test_precision.py and bench/gpu_check.sh."
        ),
    ]


def markdown(
    data: dict[str, Any], table: str, plotted: bool, argv: list[str], machine: str, out: Path
) -> str:
    by_dtype = data.get("by_dtype", {})
    bullets = [
        (
            "- The bundled `examples/calculator/config.yaml` (16 prompts x 8 rollouts per step, up to 3 "
            "turns with the calculator MCP tool, DAPO loss, lr 3e-4, `hf` engine, one process) with only "
            "the step count, eval cadence, output folder and compute dtype changed. Held-out evaluation: "
            "64 prompts the training set never shows, one rollout each, sampled at T=1 and greedy."
        ),
        *(
            dtype_bullets(by_dtype)
            if len(by_dtype) > 1
            else [
                (
                    f"- {data['steps']} steps in {data['wall_s'] / 60:.1f} min wall, evaluations included "
                    f"(about {data['seconds_per_step']} s a step on average)."
                )
            ]
        ),
        f"- Peak RSS {data['peak_rss_mib']} MiB (the process's, over every run in it).",
        "- Rollouts are sampled, so reruns differ by a few points.",
        "- Output: `bench/results/learning.csv` (dtype, step, wall_s, train_reward, eval_sampled_reward, "
        f"eval_greedy_reward, eval_tool_call_rate) and the plot below, copied from the run folder `{out}/`"
        + ("." if plotted else "; `learning.png` was not written (matplotlib missing)."),
    ]
    if data["before"] and data["before"]["eval_greedy_reward"] < 0.05:
        bullets.insert(
            -3,
            "- Greedy reward before training is near 0: after the warm-start the first token is close to "
            "a coin-flip between calling the tool and guessing, and greedy decoding picks guessing.",
        )
    plot = ["![held-out reward vs step](bench/results/learning.png)"] if plotted else []
    title = f"GRPO learns the calculator task (tiny-calculator preset): {run_kinds(list(by_dtype))}"
    return section(title, "bench/learning.py", argv, machine, table, bullets, *plot)


def train_once(
    args: argparse.Namespace, dtype: str, layout: str = "padded"
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One training run in compute dtype `dtype` and micro-batch `layout`: its CSV rows and its summary."""
    from rlfactory_nb.models import presets

    name = run_name(dtype, layout)
    cfg = run_config(args.steps, args.eval_every, args.out, dtype, layout)
    if cfg.model.name in presets.PRESETS:
        presets.preset_path(cfg.model.name)  # a first-use build (minutes) is not part of the run's time
    if cfg.run_dir.exists():
        print(f"replacing the previous bench run in {cfg.run_dir}")
        shutil.rmtree(cfg.run_dir)
    started = time.time()
    result = rf.train_sync(cfg)
    elapsed = time.time() - started
    rows = table_rows(read_metrics(result.run_dir), started, name)
    print(f"{name}: {result.step} steps in {elapsed / 60:.1f} min")
    return rows, summary(rows, result, cfg, elapsed)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    machine = machine_line()
    runs = {
        run_name(dtype, layout): train_once(args, dtype, layout)
        for dtype in args.dtypes
        for layout in args.layouts
    }
    rows = [row for dtype_rows, _ in runs.values() for row in dtype_rows]
    out = args.out.resolve()
    write_csv(rows, out / "learning.csv", COLUMNS)
    plotted = write_plot(rows, out / "learning.png")
    for name in ("learning.csv", "learning.png") if plotted else ("learning.csv",):
        shutil.copy(out / name, RESULTS_DIR / name)  # kept with BENCHMARKS.md
    eval_size = run_config(args.steps, args.eval_every, args.out).data.eval_size
    table = dtype_tables({dtype: dtype_rows for dtype, (dtype_rows, _) in runs.items()}, eval_size)
    by_dtype = {dtype: {k: v for k, v in run.items() if k != "rows"} for dtype, (_, run) in runs.items()}
    data = {**next(iter(runs.values()))[1], "by_dtype": by_dtype}
    data["peak_rss_mib"] = round(peak_rss_mib())
    write_result(NAME, data, markdown(data, table, plotted, argv, machine, args.out))
    print(table)
    print(f"wrote {out / 'learning.csv'}")
    if not plotted:
        print("learning.png not written: matplotlib is not installed (pip install '.[bench]')")


if __name__ == "__main__":
    main()
