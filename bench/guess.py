"""Does the guessing game learn? The example config (examples/guess/config.yaml) on the tiny-guess
preset, once per seed: held-out reward before and after GRPO.

    OMP_NUM_THREADS=1 python bench/guess.py [--quick] [--seeds 0 1] [--steps N] [--advantage episode step_groups]
                                            [--set key=value ...] [--out runs/bench-guess] [--resume]

The run is the example's config with only the seed, the steps, the advantage mode (`grpo.advantage`,
each given mode run side by side) and the output folder overridden, plus any `--set` keys, so the
figures describe what `rlfactory-nb train examples/guess/config.yaml` trains. Held-out: the 256
games of examples/guess/data/heldout.jsonl, one sampled (temperature 1) and one greedy rollout each.
Reference points (exact, over a range's seven secrets with the game's reward): a player who guesses at
random among the numbers the hints allow, as the warm-start's teacher does, scores 0.660; bisection 0.857.
`--resume` continues the runs already in --out (their checkpoints) up to --steps, and reads a run that
got there without training it again (only its steps up to --steps: the rate is constant, so a longer
run's first steps are the shorter run); a resumed run's wall time is then the sum of its steps' times
(evaluations included, the model load and the step-0 evaluation not).
Writes bench/results/guess.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rlfactory_nb as rf
from bench._common import machine_line, markdown_table, script_args, section, write_result
from rlfactory_nb.train.metrics import read_metrics

NAME = "guess"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=None, help="default: the config's")
    parser.add_argument("--advantage", nargs="+", default=[None], help="grpo.advantage modes, run side by side (default: the config's)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more config overrides")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-guess"))
    parser.add_argument("--quick", action="store_true", help="one seed, 40 steps")
    parser.add_argument("--resume", action="store_true", help="continue the runs in --out (module docstring)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.steps = args.seeds[:1], args.steps or 40
    return args


def run(seed: int, steps: int | None, out: Path, advantage: str | None, extra: list[str], resume: bool = False) -> dict:
    overrides = {"name": f"{advantage or 'config'}-seed{seed}", "output_dir": str(out.resolve()), "grpo.seed": seed}
    if steps is not None:
        overrides["grpo.steps"] = steps
    if advantage is not None:
        overrides["grpo.advantage"] = advantage
    cfg = rf.example("guess").config(overrides).replace(extra)
    started = time.monotonic()
    done = read_metrics(cfg.run_dir) if resume and Path(cfg.run_dir).exists() else []
    if not done or max(m["step"] for m in done) < cfg.grpo.steps:
        rf.train_sync(cfg, replace=not resume, resume=resume and bool(done))
    metrics = [m for m in read_metrics(cfg.run_dir) if m["step"] <= cfg.grpo.steps]  # a longer run: its first steps
    evals = {m["step"]: (m["eval/sampled_reward/mean"], m["eval/greedy_reward/mean"])
             for m in metrics if "eval/sampled_reward/mean" in m}
    train = [m["reward/mean"] for m in metrics if "reward/mean" in m]
    seconds = sum(m.get("time/step_s", 0.0) for m in metrics) if resume else time.monotonic() - started
    return {"seed": seed, "advantage": cfg.grpo.advantage, "seconds": round(seconds), "evals": evals,
            "train_first10": statistics.fmean(train[:10]), "train_last10": statistics.fmean(train[-10:])}


def main() -> None:
    args = parse_args(sys.argv[1:])
    machine = machine_line()
    runs = [run(seed, args.steps, args.out, mode, args.set, args.resume) for seed in args.seeds for mode in args.advantage]
    steps = sorted(runs[0]["evals"])
    header = ["grpo.advantage", "seed", *(f"step {s}: sampled / greedy" for s in steps), "train reward, first 10 -> last 10 steps", "wall s"]
    rows = [[r["advantage"], r["seed"], *(f"{r['evals'][s][0]:.3f} / {r['evals'][s][1]:.3f}" for s in steps),
             f"{r['train_first10']:.3f} -> {r['train_last10']:.3f}", r["seconds"]] for r in runs]
    gain = [r["evals"][steps[-1]][0] - r["evals"][steps[0]][0] for r in runs]
    bullets = [
        f"- Held-out sampled reward, step {steps[0]} -> step {steps[-1]}: "
        + ", ".join(f"{g:+.3f}" for g in gain) + " (seeds " + ", ".join(str(r["seed"]) for r in runs) + "); "
        "one game's reward has a standard deviation of about 0.33, so 256 games give a standard error of "
        "about 0.02 per evaluation.",
        *(f"- Held-out greedy at step {steps[-1]}, mean over seeds {', '.join(str(r['seed']) for r in runs if r['advantage'] == mode)}: "
          f"{statistics.fmean(r['evals'][steps[-1]][1] for r in runs if r['advantage'] == mode):.3f} ({mode})"
          for mode in dict.fromkeys(r["advantage"] for r in runs)),
        ("- Reference points, exact over a range's seven secrets with the game's reward: a random guess among the "
         "numbers the hints allow (the warm-start's teacher) 0.660; bisection 0.857."),
    ]
    if args.resume:
        bullets.append(
            "- Resumed or read from runs already in the output folder (`--resume`): the load average above is "
            "this command's, and the wall column is the sum of each run's step times, evaluations included, "
            "under the load it trained with."
        )
    markdown = section("The guessing game (examples/guess): held-out reward before and after GRPO",
                       "bench/guess.py", script_args(), machine, markdown_table(header, rows), bullets)
    write_result(NAME, {"runs": [{**r, "evals": {str(k): v for k, v in r["evals"].items()}} for r in runs]}, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
