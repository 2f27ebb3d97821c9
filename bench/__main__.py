"""Run the benchmarks and rewrite BENCHMARKS.md from their sections.

    python -m bench                  # all of them (what `make bench` runs), about 15-25 min on 2 cores,
                                     # plus 45-60 min for time_to_reward (8 training runs)
                                     # and 30-50 min for distill (a teacher and 8 capped runs)
    python -m bench --quick          # the same with fewer steps, a few minutes
    python -m bench engines grpo_step  # a subset; the other sections stay as their last run left them

Each benchmark runs as its own process (`python bench/<name>.py`) with OMP_NUM_THREADS=1, so none
inherits another's threads, allocator state or imports, and a crash in one does not stop the rest.
A benchmark's old section is deleted before it runs, so a failed run leaves a note, never stale
figures that look fresh.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench._common import RESULTS_DIR, ROOT

ORDER = (
    "warmstart_prefix",
    "rollout_overlap",
    "tool_calls",
    "tool_cache",
    "tool_parsers",
    "endpoint",
    "envs_openenv",
    "envs_async",
    "envs_overhead",
    "engines",
    "grpo_step",
    "memory",
    "packing",
    "async_training",
    "learning",
    "learning_options",
    "guess",
    "time_to_reward",
    "distill",
)
"""run order: short, self-contained measurements first; the long learning runs last"""
TIMEOUTS = {"time_to_reward": 4800.0, "distill": 3600.0}
"""benchmarks that need more than `--timeout` (time_to_reward: 8 training runs of up to 6 min each;
distill: a teacher and 8 capped training runs)"""

HEADER = """# Benchmarks

Every figure here was measured by `make bench` (`python -m bench`), which runs each script in
`bench/` as its own process with `OMP_NUM_THREADS=1` and assembles this file from the sections they
write (`bench/results/<name>.md`; the raw figures are in `bench/results/<name>.json`). Each section
gives its exact command and the machine it ran on (cores, RAM, CPU model, load average at start).

Where two things are compared they were measured side by side in the same run: alternating or
interleaved on the same machine under the same load, warm-up discarded. The ratio is the figure to
trust more than the absolute times, and no ratio compares against an old number. To check a figure
on your machine, run its command, or `python -m bench <name>` to refresh its section here
(`python -m bench --quick` runs everything with fewer steps).
"""


MANUAL_NOTE = """# Measured by hand (not rerun by `make bench`)

These take too long for the benchmark budget; each states the command and the run it comes from.
They live in `bench/manual/`."""


@dataclass(frozen=True)
class Outcome:
    """How one benchmark went in this run."""

    name: str
    status: str
    """"ok", "failed (exit N)", "timed out" or "skipped: <why>" """
    seconds: float = 0.0


def run_one(
    name: str, quick: bool, bench_dir: Path, results_dir: Path, timeout_s: float | None = None
) -> Outcome:
    """Run bench/<name>.py in a fresh process; its stdout and stderr pass through to ours."""
    script = bench_dir / f"{name}.py"
    if not script.exists():
        return Outcome(name, f"skipped: {script.name} not found")
    for suffix in (".md", ".json"):
        (results_dir / f"{name}{suffix}").unlink(missing_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # Lets a script say `from bench._common import ...` whichever way it is started.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(bench_dir.parent), env.get("PYTHONPATH")]))
    command = [sys.executable, str(script), *(["--quick"] if quick else [])]
    started = time.perf_counter()
    try:
        code = subprocess.run(
            command, cwd=bench_dir.parent, env=env, timeout=timeout_s, check=False
        ).returncode
    except subprocess.TimeoutExpired:
        return Outcome(name, f"timed out after {timeout_s:.0f} s", time.perf_counter() - started)
    seconds = time.perf_counter() - started
    if code != 0:
        return Outcome(name, f"failed (exit {code})", seconds)
    if not (results_dir / f"{name}.md").exists():
        return Outcome(name, f"failed: exited 0 but wrote no {name}.md", seconds)
    return Outcome(name, "ok", seconds)


def assemble(
    outcomes: Sequence[Outcome],
    results_dir: Path,
    order: Sequence[str] = ORDER,
    command: str = "python -m bench",
) -> str:
    """BENCHMARKS.md: the header, this run's summary, then every section present, in `order`."""
    ran = {outcome.name: outcome for outcome in outcomes}
    lines = [
        "| benchmark | this run | wall time |",
        "|---|---|---:|",
    ]
    for name in order:
        outcome = ran.get(name)
        if outcome is None:
            present = (results_dir / f"{name}.md").exists()
            lines.append(f"| {name} | not rerun{' (section from an earlier run)' if present else ''} | |")
        else:
            wall = f"{outcome.seconds:.0f} s" if outcome.seconds else ""
            lines.append(f"| {name} | {outcome.status} | {wall} |")
    summary = f"Last run: {time.strftime('%Y-%m-%d %H:%M')}, `{command}`.\n\n" + "\n".join(lines)
    sections = [
        (results_dir / f"{name}.md").read_text().strip()
        for name in order
        if (results_dir / f"{name}.md").exists()
    ]
    # Figures too long for `make bench` (e.g. `make demo`'s notebooks), kept with their own command.
    manual = [path.read_text().strip() for path in sorted((results_dir.parent / "manual").glob("*.md"))]
    if manual:
        manual.insert(0, MANUAL_NOTE)
    return "\n\n".join([HEADER.strip(), summary, *sections, *manual]) + "\n"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"benchmarks to run (default: all): {', '.join(ORDER)}")
    parser.add_argument("--quick", action="store_true", help="pass --quick to every benchmark")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds before one benchmark is stopped")
    parser.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in ORDER]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {', '.join(ORDER)}")
    return args


def main(
    argv: Sequence[str] | None = None, bench_dir: Path = ROOT / "bench", results_dir: Path = RESULTS_DIR
) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    names = [name for name in ORDER if not args.names or name in args.names]
    results_dir.mkdir(parents=True, exist_ok=True)
    outcomes = []
    started = time.perf_counter()
    for index, name in enumerate(names, 1):
        print(f"\n=== [{index}/{len(names)}] {name}{' --quick' if args.quick else ''} ===", flush=True)
        outcome = run_one(name, args.quick, bench_dir, results_dir, max(args.timeout, TIMEOUTS.get(name, 0.0)))
        outcomes.append(outcome)
        print(f"=== {name}: {outcome.status} ({outcome.seconds:.0f} s) ===", flush=True)
    command = " ".join(["python -m bench", *(["--quick"] if args.quick else []), *args.names])
    args.output.write_text(assemble(outcomes, results_dir, command=command))
    total = time.perf_counter() - started
    print(f"\nwrote {args.output} after {total / 60:.1f} min")
    for outcome in outcomes:
        print(f"  {outcome.name:<18} {outcome.status:<30} {outcome.seconds:6.0f} s")
    return (
        0
        if all(outcome.status == "ok" or outcome.status.startswith("skipped") for outcome in outcomes)
        else 1
    )


if __name__ == "__main__":
    sys.exit(main())
