"""What every benchmark script shares: the machine line, result files, timers and side-by-side runs.

A benchmark compares variants measured in the same run (alternating, so machine noise hits each
alike); these helpers keep that discipline in one place and give every BENCHMARKS.md section the
same machine line and layout. Only the standard library (plus psutil when present), so importing
this module costs nothing in the scripts it serves.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no affinity call
        return os.cpu_count() or 1


def machine_line() -> str:
    """One line naming the machine a figure was measured on: cores, RAM, CPU model, load at start.

    >>> line = machine_line()
    >>> line.startswith("Machine: ") and "core" in line and "load average" in line
    True
    """
    ram = _ram_gib()
    ram_text = f"{ram:.0f} GiB RAM" if ram is not None else "RAM unknown"
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    return (
        f"Machine: {_usable_cores()} CPU cores ({_cpu_model()}), {ram_text}, "
        f"Python {platform.python_version()}, OMP_NUM_THREADS={threads}, load average at start {load}."
    )


def write_result(name: str, data: dict[str, Any], markdown: str, results_dir: Path | None = None) -> Path:
    """Write bench/results/<name>.json (the figures) and <name>.md (the BENCHMARKS.md section).

    The markdown must start with `## `: BENCHMARKS.md is assembled from these sections in order.
    Returns the .md path.
    """
    if not markdown.lstrip().startswith("## "):
        raise ValueError(
            f"write_result({name!r}): markdown must start with '## <title>', got {markdown[:40]!r}"
        )
    folder = results_dir or RESULTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    record = {"name": name, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"), **data}
    (folder / f"{name}.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    path = folder / f"{name}.md"
    path.write_text(markdown.strip() + "\n")
    return path


def command_block(script: str, args: Sequence[str] = ()) -> str:
    """The exact command for a section, as an indented Markdown code block."""
    return "    " + " ".join(["OMP_NUM_THREADS=1", "python", script, *args])


def section(
    title: str,
    script: str,
    argv: Sequence[str],
    machine: str,
    table: str,
    bullets: Sequence[str],
    *extra: str,
) -> str:
    """A benchmark's BENCHMARKS.md section: title, exact command, machine, table, notes, extras."""
    return "\n\n".join(
        [f"## {title}", command_block(script, argv), machine, table, "\n".join(bullets), *extra]
    )


def script_args() -> list[str]:
    """The arguments this script was started with, for the command line shown in its section."""
    return sys.argv[1:]


def write_csv(rows: Iterable[dict[str, Any]], path: Path, columns: Sequence[str]) -> None:
    """One CSV row per dict, in `columns` order (what a benchmark keeps next to its plot)."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A Markdown table; the first column left-aligned, the rest right-aligned (they hold figures).

    >>> print(markdown_table(["engine", "tok/s"], [["hf", 12.5]]))
    | engine | tok/s |
    |---|---:|
    | hf | 12.5 |
    """
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


class Timer:
    """A context manager that records elapsed wall seconds in `.seconds`.

    >>> with Timer() as timer:
    ...     pass
    >>> timer.seconds >= 0
    True
    """

    def __enter__(self) -> Self:
        self.seconds = 0.0
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.seconds = time.perf_counter() - self._started


@dataclass
class SideBySide:
    """Timings of variants run alternately; the first `warmup` rounds are discarded.

    >>> runs = SideBySide(["a", "b"], warmup=1)
    >>> for seconds in (9.0, 1.0, 2.0, 3.0):
    ...     runs.add("a", seconds)
    ...     runs.add("b", seconds * 2)
    >>> runs.median("a"), runs.ratio("b", "a")
    (2.0, 2.0)
    """

    names: Sequence[str]
    warmup: int = 1
    samples: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, seconds: float) -> None:
        if name not in self.names:
            raise KeyError(f"unknown variant {name!r}; known: {list(self.names)}")
        self.samples.setdefault(name, []).append(seconds)

    def kept(self, name: str) -> list[float]:
        return self.samples.get(name, [])[self.warmup :]

    def median(self, name: str) -> float:
        kept = self.kept(name)
        if not kept:
            raise ValueError(f"variant {name!r} has no timings after {self.warmup} warm-up round(s)")
        return statistics.median(kept)

    def ratio(self, slower: str, faster: str) -> float:
        """median(slower) / median(faster): how many times longer `slower` takes."""
        return self.median(slower) / self.median(faster)

    def run(self, variants: dict[str, Callable[[], object]], rounds: int) -> None:
        """Call each variant once per round, in order, `rounds + warmup` times, timing each call."""
        for _ in range(rounds + self.warmup):
            for name, call in variants.items():
                with Timer() as timer:
                    call()
                self.add(name, timer.seconds)


def current_rss_mib() -> float:
    """This process's resident memory now, in MiB (/proc/self/statm; the peak where /proc is missing)."""
    try:
        resident_pages = int(Path("/proc/self/statm").read_text().split()[1])
    except OSError:
        return peak_rss_mib()
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    """This process's resident-memory high-water mark in MiB (getrusage ru_maxrss)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux
