"""Time to reward, ours vs TRL's GRPOTrainer: training wall time until held-out greedy reward reaches a
target, on the calculator task (its calculator tool) and the guessing game (an environment).

    OMP_NUM_THREADS=1 python bench/time_to_reward.py [--quick] [--tasks calculator guess] [--seeds 0 1]
                                                     [--cap-s 360] [--parallel-tasks]

Targets: held-out greedy 0.9 on the calculator (64 held-out questions), 0.70 on the guessing game
(256 held-out games). Runs alternate within a task (ours seed 0, TRL seed 0, ours seed 1, TRL seed
1), each in its own process on one thread, each stopped at the target or when its training time
reaches the cap. Held-out greedy is measured the same way for both: `rf.evaluate` with the example's
config on the weights the trainer holds, every few steps; evaluation time is off the clock and
reported apart. Both start from the same preset weights, with the example config's data, group size,
batch, learning rate, DAPO loss, clip range, KL coefficient and lengths (bench/_race.py says how each
is set on TRL). Writes bench/results/time_to_reward.{json,md}; each run's record is kept under
runs/bench-time-to-reward/.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import RESULTS_DIR, ROOT, machine_line, markdown_table, script_args, section, write_result

NAME = "time_to_reward"
RUNS = ROOT / "runs" / "bench-time-to-reward"
TRAINERS = ("ours", "trl")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["calculator", "guess"], choices=["calculator", "guess"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--cap-s", type=float, default=360.0, help="training seconds per run (evaluations excluded)")
    parser.add_argument("--every", type=int, default=None, help="steps between evaluations (default: per task)")
    parser.add_argument("--parallel-tasks", action="store_true", help="the tasks' run sequences side by side (2 cores)")
    parser.add_argument("--quick", action="store_true", help="one seed, 2 steps between evaluations, 30 s cap")
    parser.add_argument("--report", action="store_true", help="only rewrite the section from the kept run records")
    parser.add_argument("--worker", nargs=3, metavar=("TRAINER", "TASK", "SEED"), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.cap_s, args.every = args.seeds[:1], min(args.cap_s, 30.0), args.every or 2
    return args


def record_path(task: str, trainer: str, seed: int) -> Path:
    return RUNS / f"{task}-{trainer}-seed{seed}.json"


def run_worker(trainer: str, task: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """One run in its own process; its record, or the error it ended with."""
    from bench._race import TASKS

    out = record_path(task, trainer, seed)
    out.unlink(missing_ok=True)
    RUNS.mkdir(parents=True, exist_ok=True)
    every = args.every or TASKS[task]["eval_every"]
    command = [sys.executable, __file__, "--worker", trainer, task, str(seed), "--cap-s", str(args.cap_s),
               "--every", str(every), "--out", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", TRL_EXPERIMENTAL_SILENCE="1")
    print(f"{task}: {trainer} seed {seed}", flush=True)
    with (RUNS / f"{task}-{trainer}-seed{seed}.log").open("w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT, check=False)
    if done.returncode == 0 and out.exists():
        return json.loads(out.read_text())
    tail = (RUNS / f"{task}-{trainer}-seed{seed}.log").read_text().strip().splitlines()[-3:]
    failed = {"task": task, "trainer": trainer, "seed": seed, "error": " / ".join(tail) or f"exit {done.returncode}"}
    out.write_text(json.dumps(failed) + "\n")
    return failed


def run_task(task: str, args: argparse.Namespace, records: list[dict[str, Any]]) -> None:
    for seed in args.seeds:
        for trainer in TRAINERS:  # ours seed 0, TRL seed 0, ours seed 1, TRL seed 1
            records.append(run_worker(trainer, task, seed, args))


def kept_records(tasks: list[str], seeds: list[int]) -> list[dict[str, Any]]:
    paths = [record_path(t, tr, s) for t in tasks for s in seeds for tr in TRAINERS]
    return [json.loads(p.read_text()) for p in paths if p.exists()]


# ---------------------------------------------------------------------- the section


def reached_text(record: dict[str, Any]) -> str:
    if "error" in record:
        return "failed"
    if record["reached_s"] is None:
        best = max(point["greedy"] for point in record["curve"])
        return f"not reached by {record['cap_s']:.0f} s (best {best:.3f})"
    step = next(p["step"] for p in record["curve"] if p["greedy"] >= record["target"])
    return f"**{record['reached_s']:.0f} s** (step {step})"


def curve_text(record: dict[str, Any]) -> str:
    return ", ".join(f"{p['step']}: {p['greedy']:.2f}" for p in record.get("curve", []))


def ratio_text(records: list[dict[str, Any]], task: str) -> str:
    """Ours / TRL from the mean time to the target over the seeds, when both reached it in every seed;
    else a bound: a run that never reached it counts as its cap, so the ratio is a bound."""
    times: dict[str, list[float]] = {trainer: [] for trainer in TRAINERS}
    bound = {trainer: False for trainer in TRAINERS}
    for r in records:
        if r["task"] != task or "error" in r:
            continue
        times[r["trainer"]].append(r["reached_s"] if r["reached_s"] is not None else r["train_s"])
        bound[r["trainer"]] |= r["reached_s"] is None
    if not times["ours"] or not times["trl"]:
        return "no ratio: a side has no run"
    ours, trl = statistics.fmean(times["ours"]), statistics.fmean(times["trl"])
    if bound["ours"] and bound["trl"]:
        return f"no ratio: neither side reached the target (means of training time at the cap: ours {ours:.0f} s, TRL {trl:.0f} s)"
    if bound["trl"]:
        return f"ours / TRL <= {ours / trl:.2f} (TRL did not reach it by the cap in every seed: its time counts as the cap, so its true time is longer)"
    if bound["ours"]:
        return f"ours / TRL >= {ours / trl:.2f} (ours did not reach it in every seed)"
    return f"ours / TRL = {ours / trl:.2f} (mean {ours:.0f} s vs {trl:.0f} s)"


def per_step_text(records: list[dict[str, Any]], task: str) -> str:
    """Training seconds per step (128 episodes) over all of a side's runs: the cost of a step, apart from
    how many steps the target takes."""
    cost = {}
    for trainer in TRAINERS:
        runs = [r for r in records if r["task"] == task and r["trainer"] == trainer and "error" not in r and r["steps"]]
        if runs:
            cost[trainer] = sum(r["train_s"] for r in runs) / sum(r["steps"] for r in runs)
    if len(cost) < 2:
        return "no per-step figure"
    return f"training seconds per step: ours {cost['ours']:.1f}, TRL {cost['trl']:.1f} ({cost['ours'] / cost['trl']:.2f}x)"


def markdown(records: list[dict[str, Any]], argv: list[str], machine: str, notes: list[str]) -> str:
    header = ["task (target)", "trainer", "seed", "time to target (training s)", "steps", "held-out greedy by step", "eval s (off the clock)"]
    rows = []
    for r in records:
        target = {"calculator": "0.9", "guess": "0.70"}[r["task"]]
        if "error" in r:
            rows.append([f"{r['task']} ({target})", r["trainer"], r["seed"], f"failed: {r['error'][:300]}", "", "", ""])
            continue
        rows.append([f"{r['task']} ({target})", r["trainer"], r["seed"], reached_text(r), r["steps"], curve_text(r),
                     f"{sum(p['eval_s'] for p in r['curve']):.0f}"])
    tasks = sorted({r["task"] for r in records})
    bullets = [f"- {task}: {ratio_text(records, task)} (goal: ours at most 0.5x TRL's time); {per_step_text(records, task)}."
               for task in tasks]
    for task in tasks:
        runs = [r for r in records if r["task"] == task and "error" not in r]
        if runs and all(r["reached_s"] is not None and r["steps"] == 1 for r in runs):
            bullets.append(f"- {task}: every run reached the target at its first evaluation, after one step (greedy "
                           "decoding flips from answering directly to calling the tool), so this race is the cost of one step.")
    bullets += notes
    return section("Time to reward against TRL's GRPOTrainer (calculator tool, guessing game)", "bench/time_to_reward.py",
                   argv, machine, markdown_table(header, rows), bullets)


def trl_logged(task: str, seed: int) -> dict[str, str]:
    """TRL's own metrics over a run (the line it logs when training ends; logging is off until then)."""
    import ast

    log = RUNS / f"{task}-trl-seed{seed}.log"
    lines = [line for line in log.read_text().splitlines() if line.startswith("{'train_runtime'")] if log.exists() else []
    return ast.literal_eval(lines[-1]) if lines else {}


def trl_behaviour(records: list[dict[str, Any]]) -> list[str]:
    parts = []
    for r in records:
        if r["trainer"] != "trl" or "error" in r:
            continue
        logged = trl_logged(r["task"], r["seed"])
        if "tools/call_frequency" in logged:
            parts.append(f"{r['task']} seed {r['seed']}: tool calls per completion {float(logged['tools/call_frequency']):.2f}, "
                         f"completion {float(logged['completions/mean_length']):.1f} tokens, train reward {float(logged['reward']):.3f}")
    return ["- What TRL's rollouts did, over each run (its own logged means): " + "; ".join(parts) + "."] if parts else []


def shares_text(records: list[dict[str, Any]]) -> list[str]:
    """Per task and trainer: the share of training time in generation (with tools or the game) and the rest."""
    lines = []
    for task in sorted({r["task"] for r in records}):
        parts = []
        for trainer in TRAINERS:
            runs = [r for r in records if r["task"] == task and r["trainer"] == trainer and "error" not in r and r["train_s"]]
            total = sum(r["train_s"] for r in runs)
            if not total:
                continue
            keys = ("time/rollout_s",) if trainer == "ours" else ("generate_and_tools_s",)
            generating = sum(r["seconds_by_key"].get(k, 0.0) for r in runs for k in keys)
            update = sum(r["seconds_by_key"].get("time/update_s", 0.0) for r in runs) if trainer == "ours" else total - generating
            parts.append(f"{'ours' if trainer == 'ours' else 'TRL'} {generating / total:.0%} generating "
                         f"(tools or game included), {update / total:.0%} {'updating' if trainer == 'ours' else 'the rest (scoring passes, update)'}")
        lines.append(f"- {task}, share of training time: " + "; ".join(parts) + ".")
    return lines


def where_time_goes(records: list[dict[str, Any]]) -> list[str]:
    lines = []
    for r in records:
        if "error" in r or not r.get("seconds_by_key"):
            continue
        keys = ", ".join(f"{k} {v:.0f}" for k, v in sorted(r["seconds_by_key"].items(), key=lambda kv: -kv[1]) if v >= 1)
        share = (f"; the process had {r['process_cpu_s'] / r['process_wall_s']:.0%} of a core over its life"
                 if r.get("process_wall_s") else "")
        lines.append(f"  - {r['task']} {r['trainer']} seed {r['seed']} ({r['train_s']:.0f} s training, {r['steps']} steps): {keys}{share}")
    return [*shares_text(records), ("- Where the training time went (seconds summed over the run's steps; ours: its metrics rows' `time/` keys, "
            "which overlap where rollouts run ahead; TRL: its `_generate`, tool calls and the game included, the rest "
            "is its update):"), *lines] if lines else []


BOUNDS = (
    "- What bounds it on 2 cores: each run is one process on one thread, so a step is one thread's compute: "
    "decoding token by token (with the calculator's MCP calls or the game's replies in the same loop) and the "
    "update's forward and backward passes, about half each for ours (shares above). With `--parallel-tasks` the "
    "two tasks' runs share the 2 cores (alternation within a task keeps each pair under like load), and other "
    "work on the machine kept the load average near the figures above: where recorded, a run's process had well "
    "under a core, so absolute times are several times a quiet machine's; the ratios are the figures to read."
)
HELD_EQUAL = [
    ("- Held equal: the preset's starting weights (tiny-calculator, tiny-guess), the example's training rows, 16 "
    "prompts x 8 completions per step (one generation batch of 128), an optimizer step per 32 completions in "
    "micro-batches of 16 (TRL: per-device batch 16, 2 accumulation steps, `steps_per_generation` 8), AdamW lr 3e-4 "
    "constant, grad clip 1.0, DAPO loss with clip 0.2 / 0.28, KL coefficient 0 (calculator) and 0.05 (guess, "
    "k3 on both), T=1, float32, one thread, no vLLM (TRL: `use_cpu`, no bf16, no gradient checkpointing). "
    "The held-out evaluation is the same call on both (`rf.evaluate` with the example's config, the run's seed): "
    "their step-0 points agree exactly."),
    ("- Calculator on TRL: `tools=` with the calculator the MCP server runs (`tools/servers/calculator.evaluate`), "
    "given as the preset's exact tool spec (a dict that is also callable: a Python function would render a spec "
    "of its own, which this 1M-parameter model was never shown); the tokenizer gets TRL's copy of Qwen3's chat "
    "template (TRL accepts only its own copies for multi-turn training; the presets' template renders the same "
    "text, a test checks); the reward is the example's `exact_match` on the last message; "
    "`max_tool_calling_iterations` 2 (ours: 3 turns); `max_completion_length` 160 for the whole multi-turn "
    "completion (ours: 48 new tokens a turn)."),
    ("- The guessing game on TRL (`environment_factory`): TRL goes on with an episode only after a tool call, so "
    "the game's class (bench/_race.py `GuessGame`, over the same `Guess` environment) offers a `guess(number)` "
    "tool answered by the game's hint, and the completion's final answer is played as the last guess. The "
    "tiny-guess preset plays by answering with a bare number, as its warm-start taught; under TRL it must call "
    "the tool to get a hint, and its prompts carry the tool block in a system turn it was never shown. "
    "Held-out evaluation plays the game as the preset knows it (`rf.evaluate`, the example's environment), so "
    "it measures what each trainer did to the same player."),
    ("- Not equal by design: ours trains as the example configs say, with their defaults: the guessing game's "
    "`advantage: step_groups` (GiGPO-style credit per game state), and groups whose rewards are all equal "
    "dropped from the update (`filter_zero_variance`); TRL's GRPOTrainer has neither."),
]


def kept_machine_line() -> str:
    """The machine line of the run whose section --report rewrites (its load at start), else now's."""
    written = RESULTS_DIR / f"{NAME}.md"
    lines = written.read_text().splitlines() if written.exists() else []
    return next((line for line in lines if line.startswith("Machine: ")), machine_line())


def kept_end_load() -> str:
    """The load average at the end of the run whose section --report rewrites (as its JSON kept it)."""
    written = RESULTS_DIR / f"{NAME}.json"
    kept = json.loads(written.read_text()).get("load_at_end") if written.exists() else None
    return kept or ", ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    args = parse_args(sys.argv[1:])
    if args.worker:
        from bench._race import worker_main

        trainer, task, seed = args.worker
        worker_main(trainer, task, int(seed), args.cap_s, args.every, args.out)
        return
    try:
        import trl
    except ImportError:
        print("TRL is not installed (pip install -e '.[bench]'): nothing to race against; skipped")
        return
    machine = kept_machine_line() if args.report else machine_line()
    if not args.report:
        records: dict[str, list[dict[str, Any]]] = {task: [] for task in args.tasks}
        threads = [threading.Thread(target=run_task, args=(task, args, records[task])) for task in args.tasks]
        for thread in threads:
            thread.start()
            if not args.parallel_tasks:
                thread.join()
        for thread in threads:
            thread.join()
    records_all = kept_records(args.tasks, args.seeds)
    load = kept_end_load() if args.report else ", ".join(f"{value:.2f}" for value in os.getloadavg())
    notes = [f"- TRL {trl.__version__}; each run its own process, one thread (OMP_NUM_THREADS=1); load average at the end {load}."]
    notes += HELD_EQUAL
    notes += trl_behaviour(records_all)
    notes += [BOUNDS]
    notes += where_time_goes(records_all)
    shown = [arg for arg in script_args() if arg != "--report"]  # --report rewrites the section of a run made so
    text = markdown(records_all, shown, machine, notes)
    write_result(NAME, {"machine": machine, "load_at_end": load, "runs": records_all, "trl_version": trl.__version__}, text)
    print(text)


if __name__ == "__main__":
    main()
