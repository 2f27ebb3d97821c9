"""Do `grpo.mask_truncated` and `grpo.dynamic_sampling` change what the tiny-calculator learns?

    python bench/learning_options.py [--quick] [--steps 10] [--eval-every 5] [--rounds 2]
                                     [--out runs/bench-learning-options]

Three runs of the bundled example config (examples/calculator/config.yaml, as bench/learning.py runs
it), one after another in this process, identical but for one option each: the baseline,
`grpo.mask_truncated: true`, and `grpo.dynamic_sampling: {max_rounds: N}`. Same seed, steps, eval
cadence and held-out prompts, so the held-out reward of each arm is compared with the others' from
this same run, never with an old number. Besides held-out reward, each arm reports what its option
acts on: trajectories truncated per step, trained groups per step, rollout rounds and prompts drawn,
and wall time. Figures go to bench/results/learning_options.json and the BENCHMARKS.md section to
bench/results/learning_options.md.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rlfactory_nb as rf
from bench._common import machine_line, markdown_table, section, write_result
from rlfactory_nb.train.metrics import read_metrics

NAME = "learning_options"


def arms(rounds: int) -> dict[str, dict[str, Any]]:
    """Arm name -> the overrides that make it (the baseline has none)."""
    return {
        "baseline": {},
        "mask_truncated": {"grpo.mask_truncated": True},
        f"dynamic_sampling (max_rounds {rounds})": {"grpo.dynamic_sampling": {"max_rounds": rounds}},
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 steps, eval at 0 and 3")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2, help="dynamic_sampling.max_rounds")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-learning-options"))
    parser.add_argument(
        "--summarize", action="store_true", help="rewrite the results from the run folders under --out"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.steps = args.eval_every = min(args.steps, 3)
    return args


def arm_config(name: str, overrides: dict[str, Any], args: argparse.Namespace) -> rf.RunConfig:
    """The example config with the bench's steps and eval cadence, and the arm's option.

    >>> args = parse_args(["--quick"])
    >>> cfg = arm_config("mask_truncated", {"grpo.mask_truncated": True}, args)
    >>> cfg.name, cfg.grpo.steps, cfg.grpo.mask_truncated, cfg.grpo.dynamic_sampling
    ('mask_truncated', 3, True, None)
    """
    return rf.example("calculator").config(
        {
            "name": name.split(" ")[0],
            "output_dir": str(args.out.resolve()),
            "grpo.steps": args.steps,
            "grpo.eval_every": args.eval_every,
            "grpo.checkpoint_every": 0,  # only the final checkpoint: the bench measures learning
            **overrides,
        }
    )


def run_arm(name: str, overrides: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    cfg = arm_config(name, overrides, args)
    if not args.summarize:
        if cfg.run_dir.exists():
            shutil.rmtree(cfg.run_dir)
        rf.train_sync(cfg)
    return summarize(name, read_metrics(cfg.run_dir))


def summarize(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm's figures from its metrics rows; wall time runs from the first row (the evaluation
    before training) to the last, so a one-off preset build or model load is not counted.

    >>> rows = [{"step": 0, "time": 10.0, "eval/sampled_reward/mean": 0.2, "eval/greedy_reward/mean": 0.0},
    ...         {"step": 1, "time": 70.0, "rollout/truncated": 4, "rollout/trajectories": 128,
    ...          "groups/trained": 9, "sampling/rounds": 1, "sampling/prompts_drawn": 16,
    ...          "eval/sampled_reward/mean": 0.5, "eval/greedy_reward/mean": 0.25}]
    >>> figures = summarize("baseline", rows)
    >>> figures["sampled"], figures["truncated_share"], figures["groups_trained_mean"], figures["wall_s"]
    ([0.2, 0.5], 0.03125, 9.0, 60.0)
    """
    steps = [row for row in rows if row["step"] > 0 and "rollout/trajectories" in row]
    evals = [row for row in rows if "eval/sampled_reward/mean" in row]

    def mean(key: str) -> float:
        return sum(row.get(key, 0) for row in steps) / max(len(steps), 1)

    return {
        "arm": name,
        "eval_steps": [row["step"] for row in evals],
        "sampled": [row["eval/sampled_reward/mean"] for row in evals],
        "greedy": [row["eval/greedy_reward/mean"] for row in evals],
        "truncated_share": sum(row.get("rollout/truncated", 0) for row in steps)
        / max(sum(row["rollout/trajectories"] for row in steps), 1),
        "groups_trained_mean": mean("groups/trained"),
        "rounds_mean": mean("sampling/rounds"),
        "prompts_drawn_mean": mean("sampling/prompts_drawn"),
        "wall_s": round(rows[-1]["time"] - rows[0]["time"], 1),
    }


def table(results: list[dict[str, Any]]) -> str:
    header = [
        "arm",
        "held-out sampled: first -> last",
        "greedy: first -> last",
        "truncated",
        "groups trained / step",
        "rounds / step",
        "prompts / step",
        "wall",
    ]
    rows = [
        [
            r["arm"],
            f"{r['sampled'][0]:.3f} -> {r['sampled'][-1]:.3f}",
            f"{r['greedy'][0]:.3f} -> {r['greedy'][-1]:.3f}",
            f"{100 * r['truncated_share']:.1f}%",
            f"{r['groups_trained_mean']:.1f}",
            f"{r['rounds_mean']:.2f}",
            f"{r['prompts_drawn_mean']:.1f}",
            f"{r['wall_s'] / 60:.1f} min",
        ]
        for r in results
    ]
    return markdown_table(header, rows)


NOISE = 0.1
"""held-out reward differences below this are within two standard errors of sampling noise (64 prompts)"""


def verdict(results: list[dict[str, Any]]) -> str:
    """Whether each option moved the last held-out reward away from the baseline's by more than NOISE.

    >>> arm = {"arm": "baseline", "sampled": [0.2, 0.60], "greedy": [0.0, 0.75]}
    >>> print(verdict([arm, {**arm, "arm": "mask_truncated", "sampled": [0.2, 0.65]}]))
    - mask_truncated: held-out reward 0.650 sampled / 0.750 greedy against the baseline's 0.600 / 0.750: \
no change beyond sampling noise (+-0.1).
    """
    baseline, *others = results
    lines = []
    for arm in others:
        moved = max(abs(arm[k][-1] - baseline[k][-1]) for k in ("sampled", "greedy")) >= NOISE
        lines.append(
            f"- {arm['arm']}: held-out reward {arm['sampled'][-1]:.3f} sampled / {arm['greedy'][-1]:.3f} greedy "
            f"against the baseline's {baseline['sampled'][-1]:.3f} / {baseline['greedy'][-1]:.3f}: "
            + (
                "a change larger than sampling noise."
                if moved
                else f"no change beyond sampling noise (+-{NOISE:g})."
            )
        )
    return "\n".join(lines)


def markdown(results: list[dict[str, Any]], args: argparse.Namespace, argv: list[str], machine: str) -> str:
    bullets = [
        (
            f"- The bundled `examples/calculator/config.yaml` for {args.steps} steps, three times, differing "
            "only in the option named; held-out evaluation on the same 64 prompts, one rollout each, "
            f"sampled at T=1 and greedy, every {args.eval_every} steps (first column: before training)."
        ),
        (
            "- One run per arm, sampled: with 64 held-out prompts a held-out reward carries about +-0.06 of "
            "sampling noise (one standard error), so differences smaller than about 0.1 are not evidence "
            "that an option changes learning."
        ),
        verdict(results),
        (
            "- What each option acts on, per step: the truncated column is the share of trajectories cut "
            "off by a limit (what mask_truncated leaves out of the loss); dynamic sampling trains more "
            "groups per step for more rollouts (rounds and prompts per step). Wall time runs from the "
            "evaluation before training to the last row."
        ),
    ]
    title = "Training options side by side: mask_truncated and dynamic_sampling (tiny-calculator)"
    return section(title, "bench/learning_options.py", argv, machine, table(results), bullets)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    machine = machine_line()
    results = []
    for name, overrides in arms(args.rounds).items():
        print(f"=== {name} ===", flush=True)
        results.append(run_arm(name, overrides, args))
        print(table(results), flush=True)
    if args.summarize:  # the section shows the command that trained, and says when the machine was read
        argv = [arg for arg in argv if arg != "--summarize"]
        machine += " (Read when the figures were re-read from the run folders, not while they trained.)"
    write_result(NAME, {"steps": args.steps, "arms": results}, markdown(results, args, argv, machine))


if __name__ == "__main__":
    main()
