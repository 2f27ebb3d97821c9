"""Beyond reward alone: a weak student on the calculator task, four ways, side by side.

    OMP_NUM_THREADS=1 python bench/distill.py [--quick] [--seeds 0 1] [--steps 30] [--eval-every 3]
                                              [--eval-size 32] [--sft-steps 6] [--student NAME]
                                              [--out runs/bench-distill]

The student is the tiny-calculator-weak preset: tiny-calculator's own warm-start stopped at step 550
of the 900 it runs (presets.WEAK_STEPS), same architecture and tokenizer. Measured on 32 held-out
prompts before any training: greedy 0.000, sampled 0.031, tool-call rate 0.22 sampled, copy
accuracy 0.48 (expression) and 0.21 (result); GRPO alone at the example's rate took it to greedy
0.344 in 16 steps (seed 0). So GRPO has a signal, but a long way to go. The earlier student,
tiny-guess, never scored on this task: GRPO alone had no signal and every arm stayed at 0.000. The
teacher is tiny-calculator after `--teacher-steps` GRPO steps of
the example config (examples/calculator/config.yaml), trained first in this run. Four arms, each
run once per seed, alternating (seed 0: the four arms, then seed 1), all on the example's config
with the same steps, batch and held-out evaluation (greedy and sampled, `data.eval_size` prompts of
synthetic:calculator-heldout, every `--eval-every` steps):

- grpo: GRPO alone from the student;
- distill: on-policy distillation alone (`distill.only: true`, reverse KL to the teacher);
- distill+grpo: the reverse KL added to the reward's group advantage (`distill.only: false`);
- sft+grpo: supervised fine-tuning on rejection-sampled trajectories, then GRPO. The student
  rarely succeeds (sampled 0.03), so the samples come from the teacher (`rf.rejection_sampling` with the
  teacher as the policy, k per prompt, kept at reward >= 1); the student is fine-tuned on them for
  `--sft-steps` steps (`rf.sft_sync`), and GRPO continues from that checkpoint. Its step axis counts
  the SFT steps first.

Both distillation arms set `grpo.filter_zero_variance: false`: a student whose rewards are all 0
has only zero-variance groups, which the filter would drop before the teacher scores them.
Writes distill.json and distill.md to bench/results/; the runs' folders go to <out>/.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rlfactory_nb as rf
from bench._common import machine_line, markdown_table, script_args, section, write_result
from rlfactory_nb.train.metrics import read_metrics

NAME = "distill"
STUDENT = "tiny-calculator-weak"
TEACHER_BASE = "tiny-calculator"
ARMS = ("grpo", "distill", "distill+grpo", "sft+grpo")
TARGET = 0.9
"""the reward the first goal asks for when the teacher's is higher"""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    parser.add_argument("--student", default=STUDENT, help="a preset name or a model folder")
    parser.add_argument("--steps", type=int, default=30, help="training steps per arm (sft+grpo: GRPO steps after SFT)")
    parser.add_argument("--eval-every", type=int, default=3)
    parser.add_argument("--eval-size", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=8, help="grpo.prompts_per_step")
    parser.add_argument("--group", type=int, default=4, help="grpo.group_size")
    parser.add_argument("--teacher-steps", type=int, default=2, help="GRPO steps that train the teacher")
    parser.add_argument("--sft-steps", type=int, default=6)
    parser.add_argument("--sft-lr", type=float, default=1e-3)
    parser.add_argument("--rs-prompts", type=int, default=32, help="rejection sampling: prompts")
    parser.add_argument("--rs-k", type=int, default=4, help="rejection sampling: samples per prompt")
    parser.add_argument("--teacher", default=None, help="a trained teacher's folder (default: train one first)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more overrides for every arm's run")
    parser.add_argument("--results-dir", type=Path, default=None, help="where distill.{json,md} go (default bench/results)")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-distill"))
    parser.add_argument("--quick", action="store_true", help="one seed, 2 steps, eval every 1 on 8 prompts")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds = args.seeds[:1]
        args.steps, args.eval_every, args.eval_size = 2, 1, 8
        args.prompts, args.group, args.teacher_steps = 2, 2, 1
        args.sft_steps, args.rs_prompts, args.rs_k = 1, 4, 2
    return args


def base_config(args: argparse.Namespace, name: str, seed: int, model: str, **extra: Any) -> rf.RunConfig:
    """The example's calculator config with the bench's batch, steps, eval cadence and folder."""
    overrides = {
        "name": name, "output_dir": str(args.out.resolve()), "model.name": model, "model.device": "cpu",
        "grpo.seed": seed, "grpo.steps": args.steps, "grpo.prompts_per_step": args.prompts,
        "grpo.group_size": args.group, "grpo.eval_every": args.eval_every, "grpo.checkpoint_every": 0,
        "data.eval_size": args.eval_size, **extra,
    }  # fmt: skip
    return rf.example("calculator").config(overrides)


def arm_config(args: argparse.Namespace, name: str, seed: int, model: str, **extra: Any) -> rf.RunConfig:
    """An arm's GRPO run: the shared config plus `--set` (the teacher's runs do not take it)."""
    return base_config(args, name, seed, model, **extra).replace(args.set)


def curve(run_dir: Path, started: float, step_offset: int = 0, wall_offset: float = 0.0) -> list[dict[str, Any]]:
    """The held-out points of a run: step, wall seconds since `started`, greedy and sampled reward."""
    return [
        {"step": m["step"] + step_offset, "wall_s": round(m["time"] - started + wall_offset, 1),
         "greedy": m["eval/greedy_reward/mean"], "sampled": m["eval/sampled_reward/mean"]}
        for m in read_metrics(run_dir) if "eval/greedy_reward/mean" in m
    ]  # fmt: skip


def train_summary(run_dir: Path) -> dict[str, float]:
    """Train reward and reverse KL over the run, and how many steps updated the policy at all."""
    rows = [m for m in read_metrics(run_dir) if "reward/mean" in m]
    kl = [m["distill/reverse_kl"] for m in rows if "distill/reverse_kl" in m]
    return {
        "train_reward_mean": sum(m["reward/mean"] for m in rows) / max(len(rows), 1),
        "train_reward_max": max((m["reward/mean"] for m in rows), default=0.0),
        "reverse_kl_first": kl[0] if kl else None, "reverse_kl_last": kl[-1] if kl else None,
    }  # fmt: skip


def train_teacher(args: argparse.Namespace) -> dict[str, Any]:
    """tiny-calculator after a few GRPO steps of the example: its checkpoint and held-out greedy."""
    cfg = base_config(args, "teacher", 0, TEACHER_BASE, **{
        "grpo.steps": args.teacher_steps, "grpo.prompts_per_step": 16, "grpo.group_size": 8,
        "grpo.eval_every": args.teacher_steps,
    })  # fmt: skip
    started = time.monotonic()
    wall = time.time()
    result = rf.train_sync(cfg, replace=True)
    points = curve(Path(result.run_dir), wall)
    return {"checkpoint": str(result.checkpoint), "curve": points, "seconds": round(time.monotonic() - started)}


def given_teacher(args: argparse.Namespace) -> dict[str, Any]:
    """A teacher trained before (`--teacher`): its held-out greedy, evaluated as the runs evaluate."""
    cfg = base_config(args, "teacher-eval", 0, args.teacher)
    started = time.monotonic()
    report = rf.evaluate_sync(args.teacher, None, cfg, limit=args.eval_size)
    greedy = report.summary()["greedy_reward"]
    return {"checkpoint": args.teacher, "curve": [{"step": None, "wall_s": 0.0, "greedy": greedy, "sampled": None}],
            "seconds": round(time.monotonic() - started)}  # fmt: skip


def teacher_samples(args: argparse.Namespace, teacher: str) -> dict[str, Any]:
    """Rejection sampling with the teacher as the policy: its saved, scored samples are the SFT data.
    (It fine-tunes a throwaway copy of the teacher for one step; only the samples are used.)"""
    cfg = base_config(args, "teacher-samples", 0, teacher, **{
        "sft.prompts_per_round": args.rs_prompts, "sft.samples_per_prompt": args.rs_k, "sft.steps": 1,
        "sft.batch_size": 2,
    })  # fmt: skip
    result = rf.rejection_sampling_sync(cfg, rounds=1, min_reward=1.0, replace=True)
    return {"run_dir": str(result.run_dir), **result.rounds[0]}


def arm_overrides(arm: str, teacher: str) -> dict[str, Any]:
    """What an arm's GRPO run adds to the shared config: the distill: section for the distillation
    arms, with the zero-variance filter off (the student's all-zero groups must reach the teacher)."""
    if arm not in ("distill", "distill+grpo"):
        return {}
    return {"distill": {"teacher": teacher, "coef": 1.0, "only": arm == "distill"}, "grpo.filter_zero_variance": False}


def run_arm(args: argparse.Namespace, arm: str, seed: int, teacher: str, samples_dir: str) -> dict[str, Any]:
    name = f"{arm.replace('+', '-')}-seed{seed}"
    started = time.monotonic()
    wall = time.time()
    step_offset, wall_offset, model, extra = 0, 0.0, args.student, arm_overrides(arm, teacher)
    if arm == "sft+grpo":
        sft_cfg = base_config(args, f"{name}-sft", seed, args.student, **{
            "sft.steps": args.sft_steps, "sft.lr": args.sft_lr, "sft.batch_size": 16, "sft.seed": seed,
            "sft.min_reward": 1.0,
        })  # fmt: skip
        sft = rf.sft_sync(sft_cfg, data=samples_dir, replace=True)
        model, step_offset = str(sft.checkpoint), args.sft_steps
        wall_offset = time.monotonic() - started
        wall = time.time()
    result = rf.train_sync(arm_config(args, name, seed, model, **extra), replace=True)
    run_dir = Path(result.run_dir)
    points = curve(run_dir, wall, step_offset, wall_offset)
    if arm == "sft+grpo":  # the student before SFT is the other arms' step 0
        points[0]["note"] = "after SFT"
    return {"arm": arm, "seed": seed, "seconds": round(time.monotonic() - started), "curve": points,
            **train_summary(run_dir)}  # fmt: skip


def first_reaching(points: list[dict[str, Any]], target: float) -> dict[str, Any] | None:
    return next((p for p in points if p["greedy"] >= target - 1e-9), None)


def reached_text(record: dict[str, Any], target: float) -> str:
    point = first_reaching(record["curve"], target)
    if point is None:
        best = max(p["greedy"] for p in record["curve"])
        return f"not by step {record['curve'][-1]['step']} (best {best:.3f})"
    return f"step {point['step']} ({point['wall_s']:.0f} s)"


def verdicts(runs: list[dict[str, Any]], target: float) -> list[str]:
    """The two goals, judged per seed; a run that never reached a target counts as a bound."""
    lines = []
    for seed in sorted({r["seed"] for r in runs}):
        by_arm = {r["arm"]: r for r in runs if r["seed"] == seed}
        grpo = by_arm.get("grpo")
        if grpo is None:
            continue
        grpo_hit = first_reaching(grpo["curve"], target)
        last = grpo["curve"][-1]["step"]
        grpo_steps = f"{grpo_hit['step']}" if grpo_hit else f"> {last}"
        for arm in ("distill", "distill+grpo"):
            if arm not in by_arm:
                continue
            hit = first_reaching(by_arm[arm]["curve"], target)
            if hit is None:
                verdict = "missed (never reached)"
            elif grpo_hit is None:
                verdict = f"ratio < {hit['step'] / last:.2f}" if last else "n/a"
            else:
                verdict = f"ratio {hit['step'] / max(grpo_hit['step'], 1):.2f}"
            lines.append(f"- Seed {seed}, {arm} to greedy {target:.2f}: step {hit['step'] if hit else '-'}; "
                         f"GRPO alone: step {grpo_steps} ({verdict}; goal <= 0.20).")
        if "sft+grpo" in by_arm:
            final = grpo["curve"][-1]["greedy"]
            hit = first_reaching(by_arm["sft+grpo"]["curve"], final)
            lines.append(f"- Seed {seed}, sft+grpo to GRPO alone's final greedy {final:.3f} (step {last}): "
                         f"{'step ' + str(hit['step']) if hit else 'not reached'} (goal <= {last / 2:g}, SFT steps included).")
    return lines


def goal_summary(runs: list[dict[str, Any]], target: float) -> list[str]:
    """Each goal in one line: how many runs met it (a goal counts as met only where a run reached its target
    within its ratio of GRPO alone's steps; a GRPO run that never reached the target counts as its cap)."""
    lines = verdicts(runs, target)
    first = [line for line in lines if "greedy" in line and "distill" in line]
    met_first = [line for line in first if "missed" not in line and _ratio(line) <= 0.2]
    second = [line for line in lines if "sft+grpo" in line]
    met_second = [line for line in second if "not reached" not in line and _within(line)]
    return [(f"- Goal 1 (distillation to greedy {target:.2f} in at most a fifth of GRPO alone's steps): "
            f"{'met' if first and len(met_first) == len(first) else 'missed'} ({len(met_first)} of {len(first)} runs). "
            f"Goal 2 (SFT-then-GRPO to GRPO alone's final score in at most half its steps): "
            f"{'met' if second and len(met_second) == len(second) else 'missed'} ({len(met_second)} of {len(second)} seeds).")]  # fmt: skip


def _ratio(line: str) -> float:
    """The ratio in a verdict line; a bound ("ratio < 0.25") counts as its value."""
    return float(line.split("ratio ", 1)[1].split(";", 1)[0].removeprefix("< "))


def _within(line: str) -> bool:
    step = int(line.split("): step ", 1)[1].split(" ", 1)[0])
    bound = float(line.split("goal <= ", 1)[1].split(",", 1)[0])
    return step <= bound


def stuck_note(runs: list[dict[str, Any]]) -> list[str]:
    """Where GRPO alone never saw a nonzero reward, it never updated: say what that does to the goals."""
    grpo = [r for r in runs if r["arm"] == "grpo"]
    if not grpo or any(r["train_reward_max"] > 0 for r in grpo):
        return []
    return [("- GRPO alone never saw a nonzero training reward: every group's rewards were equal (all 0), so the "
            "zero-variance filter dropped them all and no step changed the policy; it would need unboundedly many "
            "steps. The first goal is then met by any arm that reaches the target at all, and the second only "
            "vacuously (GRPO alone's final score is the student's own). With every reward 0 the group advantage "
            "is 0 too, so distill+grpo trains on the reverse KL alone, as distill does (the same KL figures per seed).")]  # fmt: skip


def markdown(runs: list[dict[str, Any]], teacher: dict[str, Any], samples: dict[str, Any], args: argparse.Namespace,
             argv: list[str], machine: str, seconds: float) -> str:
    """The BENCHMARKS.md section: one row per run (greedy and wall seconds at each eval), the goals."""
    teacher_greedy = teacher["curve"][-1]["greedy"]
    target = min(teacher_greedy, TARGET)
    steps = sorted({p["step"] for r in runs for p in r["curve"]})
    header = ["arm", "seed", *(f"step {s}" for s in steps), f"reaches greedy {target:.2f}", "train reward mean",
              "reverse KL first -> last", "wall s"]  # fmt: skip
    rows = []
    for r in runs:
        by_step = {p["step"]: p for p in r["curve"]}
        cells = [f"{by_step[s]['greedy']:.3f} ({by_step[s]['wall_s']:.0f} s)" if s in by_step else "" for s in steps]
        kl = ("-" if r["reverse_kl_first"] is None else f"{r['reverse_kl_first']:.2f} -> {r['reverse_kl_last']:.2f}")
        rows.append([r["arm"], r["seed"], *cells, reached_text(r, target), f"{r['train_reward_mean']:.3f}", kl, r["seconds"]])
    bullets = [
        (f"- Cells: held-out greedy reward on {args.eval_size} prompts of synthetic:calculator-heldout (wall seconds since "
        f"the arm started, SFT included). Student: {args.student} (held-out greedy at step 0 in the table); teacher: "
        f"tiny-calculator after {args.teacher_steps} GRPO steps of the example config, held-out greedy {teacher_greedy:.3f} "
        f"(trained in {teacher['seconds']} s). Target for the first goal: min(teacher, {TARGET}) = {target:.3f}."),
        (f"- Each arm: {args.steps} steps of {args.prompts} prompts x {args.group} completions, the example's DAPO loss "
        f"and lr; sft+grpo first fine-tunes for {args.sft_steps} steps (batch 16, lr {args.sft_lr:g}) on the teacher's "
        f"rejection-sampled trajectories ({samples.get('rejection/kept', 0):.0f} of {samples.get('rejection/sampled', 0):.0f} "
        "kept at reward 1): the student's own samples rarely score, so the teacher's are the data."),
        *verdicts(runs, target),
        *goal_summary(runs, target),
        *stuck_note(runs),
        (f"- Whole bench: {seconds:.0f} s, on a machine shared with other work (the load average above); the wall "
        "seconds are for comparing arms within this run only."),
        "- Earlier, with tiny-guess as the student (bench/manual/distill_lr.md): distillation alone at a 10x rate; SFT for 40 steps, then GRPO or distillation (greedy 0.281 -> 0.500 in 12 distillation steps).",
        "- How the student and the rates were chosen, and why every arm stops near 0.34 (bench/manual/distill_student.md).",
    ]
    return section("Beyond reward alone: on-policy distillation and SFT-then-GRPO from a weak student (calculator)",
                       "bench/distill.py", argv, machine, markdown_table(header, rows), bullets)


def main() -> None:
    args = parse_args(sys.argv[1:])
    machine = machine_line()
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    teacher = train_teacher(args) if args.teacher is None else given_teacher(args)
    teacher_greedy = teacher["curve"][-1]["greedy"]
    print(f"teacher: {teacher}", flush=True)
    samples = teacher_samples(args, teacher["checkpoint"]) if "sft+grpo" in args.arms else {}
    print(f"teacher samples: {samples}", flush=True)
    runs = []
    for seed in args.seeds:
        for arm in args.arms:
            runs.append(run_arm(args, arm, seed, teacher["checkpoint"], samples.get("run_dir", "")))
            print(runs[-1], flush=True)
    target = min(teacher_greedy, TARGET)
    text = markdown(runs, teacher, samples, args, script_args(), machine, time.monotonic() - started)
    write_result(NAME, {"teacher": teacher, "teacher_samples": samples, "target": target, "runs": runs}, text, args.results_dir)
    print(text)


if __name__ == "__main__":
    main()
