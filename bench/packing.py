"""Padded vs packed (padding-free) micro-batches on a ragged multi-turn batch: s/step, peak memory, padding.

    python bench/packing.py [--quick] [--rows 16] [--budget 4096]

What a step is: one GRPO policy update (forward, backward, one AdamW step) on a fixed batch of
`--rows` trajectories whose lengths are lognormal (median 300 tokens, sigma 1; the longest set to
4,000, the tail a tool-heavy agent batch has), each a prompt of a fifth of its tokens and a response
whose middle third is a tool's output (loss mask 0): two assistant turns around it. The model is
Qwen3-architecture with the real 151,936-token vocabulary and random weights (hidden 128, 2 layers,
tied embeddings, as bench/memory.py), float32 on CPU, chunked log-probs on.

Arms, all on the same batch (`ARMS`): padded rows of `micro_batch_size` 4 (today's path, padded to
each micro-batch's longest row), padded by the token budget (rows sorted by length, rows x longest
row <= budget), and packed (`grpo.padding_free`, rows of <= budget real tokens). Each arm runs in a
fresh process of its own (its peak RSS is its own), one after another. TRL's padding_free arm runs
when TRL is installed; it is not here, so the row says so.

What the CPU measures and what it does not: the chunked output layer's cost is proportional to the
*sampled* tokens in every arm (only they reach it), so packing saves the decoder body's and
attention's work on the padding. On CPU, sdpa gets packing as a dense block-diagonal mask over the
whole row (attention work ~ T^2 per row); flash-attention 2's varlen kernels on a GPU pay only
sum(L_i^2). The GPU figures are for bench/gpu_check.sh (issue #28).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import current_rss_mib, machine_line, markdown_table, peak_rss_mib, section, write_result

NAME = "packing"
MEDIAN_TOKENS, SIGMA, LONGEST, SHORTEST = 300, 1.0, 4000, 16


@dataclass(frozen=True)
class Shape:
    vocab: int
    hidden: int
    layers: int
    rows: int
    budget: int
    """grpo.max_tokens_per_micro_batch of the budget arms"""
    longest: int = LONGEST
    median: int = MEDIAN_TOKENS


FULL = Shape(vocab=151_936, hidden=128, layers=2, rows=16, budget=4096)
QUICK = Shape(vocab=512, hidden=32, layers=1, rows=6, budget=256, longest=200, median=40)

ARMS = {
    "padded": ("padded, 4 rows a micro-batch (today's path)", {"grpo.micro_batch_size": 4}),
    "padded_budget": (
        "padded, token budget (rows x longest row <= budget)",
        {"grpo.max_tokens_per_micro_batch": "budget"},
    ),
    "packed": (
        "packed (grpo.padding_free, <= budget real tokens a row)",
        {"grpo.max_tokens_per_micro_batch": "budget", "grpo.padding_free": True},
    ),
}


def lengths(shape: Shape, seed: int = 0) -> list[int]:
    """Lognormal trajectory lengths (median `shape.median`), clipped, the longest set to `longest`.

    >>> lengths(QUICK)[:3], max(lengths(QUICK))
    ([200, 30, 16], 200)
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    draws = torch.randn(shape.rows, generator=generator) * SIGMA + math.log(shape.median)
    values = [int(min(max(round(math.exp(float(d))), SHORTEST), shape.longest)) for d in draws]
    values[max(range(len(values)), key=values.__getitem__)] = shape.longest
    return values


def bench_batch(shape: Shape) -> Any:
    """The ragged batch: prompt a fifth, tool output the middle third of each response (mask 0)."""
    import torch

    from rlfactory_nb.train.batch import build_batch
    from rlfactory_nb.types import Trajectory

    generator = torch.Generator().manual_seed(1)
    trajectories = []
    for total in lengths(shape):
        prompt = min(total - 1, 3 + total // 5)
        ids = torch.randint(1, shape.vocab - 1, (total,), generator=generator).tolist()
        response = total - prompt
        mask = [1] * response
        mask[response // 3 : 2 * response // 3] = [0] * (2 * response // 3 - response // 3)
        old = [-math.log(shape.vocab)] * sum(mask)  # a random model's log-prob, within a few hundredths
        trajectories.append(Trajectory(ids[:prompt], ids[prompt:], mask, old))
    advantages = [1.0 if row % 2 else -1.0 for row in range(shape.rows)]
    return build_batch(trajectories, advantages, pad_id=0)


def config(shape: Shape, arm: str) -> Any:
    from rlfactory_nb.config import RunConfig

    base = {
        "name": "bench-packing",
        "model": {"name": "random-qwen3", "dtype": "float32", "device": "cpu"},
        "grpo": {
            "loss": "dapo",
            "lr": 1e-5,
            "mini_batch_size": shape.rows,
            "logprob_chunk_tokens": 1024,
        },
    }
    overrides = {k: shape.budget if v == "budget" else v for k, v in ARMS[arm][1].items()}
    return RunConfig.from_dict(base, overrides)


def worker(arm: str, shape: Shape, steps: int) -> dict[str, Any]:
    import torch

    from bench.memory import random_qwen3
    from rlfactory_nb.train.trainable import TrainingSetup
    from rlfactory_nb.train.update import UpdateSettings, make_optimizer, policy_update

    torch.set_num_threads(1)
    cfg = config(shape, arm)
    cpu = torch.device("cpu")
    heads = 2
    body = random_qwen3(shape.vocab, shape.hidden, shape.layers, heads, 1, 3 * shape.hidden)
    model = TrainingSetup.from_config(cfg, cpu).prepare(body)
    settings, optimizer, batch = (
        UpdateSettings.from_config(cfg, cpu),
        make_optimizer(model, cfg),
        bench_batch(shape),
    )
    ready = current_rss_mib()
    seconds, cpu_seconds, metrics = [], [], {}
    for step in range(steps):
        started, cpu_started = time.perf_counter(), time.process_time()
        metrics = policy_update(model, optimizer, batch, settings, step + 1)
        seconds.append(time.perf_counter() - started)
        cpu_seconds.append(time.process_time() - cpu_started)
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "ready_rss_mib": ready,
        "peak_rss_mib": peak_rss_mib(),
        "padding_tokens": metrics["train/padding_tokens"],
        "real_tokens": int(batch.attention_mask.sum()),
        "sampled_tokens": int(batch.loss_mask.sum()),
        "loss": metrics["train/loss"],
    }


def run_arm(arm: str, quick: bool, steps: int, timeout_s: float) -> dict[str, Any]:
    command = [sys.executable, __file__, "--worker", arm, "--steps", str(steps)] + (
        ["--quick"] if quick else []
    )
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        return {"status": f"failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}"}
    return {"status": "ok", **json.loads(done.stdout.strip().splitlines()[-1])}


def summary_rows(shape: Shape, results: dict[str, dict[str, Any]]) -> list[list[str]]:
    padded = results.get("padded", {})
    rows = []
    for arm, entry in results.items():
        if entry["status"] != "ok":
            rows.append([ARMS[arm][0], entry["status"], "-", "-", "-", "-", "-"])
            continue
        cpu = min(entry["cpu_seconds"])
        base_cpu = min(padded["cpu_seconds"]) if padded.get("status") == "ok" else None
        base_peak = padded.get("peak_rss_mib") if padded.get("status") == "ok" else None
        rows.append(
            [
                ARMS[arm][0],
                f"{min(entry['seconds']):.1f}",
                f"{cpu:.1f}",
                f"{cpu / base_cpu:.2f}x" if base_cpu else "-",
                f"{entry['peak_rss_mib']:,.0f}",
                f"{entry['peak_rss_mib'] / base_peak:.2f}x" if base_peak else "-",
                f"{entry['padding_tokens']:,.0f}",
            ]
        )
    return rows


def markdown(
    shape: Shape, results: dict[str, dict[str, Any]], argv: list[str], machine: str, trl: str
) -> str:
    header = [
        "arm",
        "s/step (wall)",
        "CPU s/step",
        "CPU vs padded",
        "peak RSS (MiB)",
        "peak vs padded",
        "padding tokens/step",
    ]
    sample = next((entry for entry in results.values() if entry["status"] == "ok"), {})
    sizes = lengths(shape)
    notes = [
        (
            f"- One update (forward, backward, AdamW) of a random Qwen3-architecture model: vocabulary "
            f"{shape.vocab:,}, hidden {shape.hidden}, {shape.layers} layers; {shape.rows} trajectories, "
            f"lognormal lengths (median {shape.median}, sigma {SIGMA}, longest {shape.longest:,}): "
            f"{', '.join(map(str, sorted(sizes)))}; {sample.get('real_tokens', 0):,} real tokens, "
            f"{sample.get('sampled_tokens', 0):,} sampled. Budget {shape.budget:,} tokens; DAPO; float32 "
            "on CPU, one thread, chunked log-probs (1,024); each arm a fresh process, best of its steps."
        ),
        (
            "- The output layer (the vocabulary) sees only sampled tokens in every arm, so packing saves "
            "the decoder body's and attention's work on padding; on CPU sdpa takes packing as a dense "
            "block-diagonal mask (attention ~ T^2 per row), where GPU flash-attention 2 varlen pays only "
            "the sum of each sequence's L^2."
        ),
        (
            "- Wall time follows the machine's load (the load average above); CPU s/step (the worker's "
            "user + system time) is the figure to compare across arms."
        ),
        f"- TRL: {trl}.",
        goals(results),
    ]
    title = "Padding-free micro-batches: padded vs packed on a ragged multi-turn batch"
    return section(
        title, "bench/packing.py", argv, machine, markdown_table(header, summary_rows(shape, results)), notes
    )


def goals(results: dict[str, dict[str, Any]]) -> str:
    """The issue's targets that this run measures: packed CPU s/step <= 0.6x padded, no padding."""
    padded, packed = results.get("padded", {}), results.get("packed", {})
    if padded.get("status") != "ok" or packed.get("status") != "ok":
        return "- Goals: not measured (an arm has no figure)."
    ratio = min(packed["cpu_seconds"]) / min(padded["cpu_seconds"])
    speed = f"packed CPU s/step {ratio:.2f}x padded (goal <= 0.6x: {'met' if ratio <= 0.6 else 'not met'})"
    left = packed["padding_tokens"]
    padding = f"padding tokens {left:,.0f} (goal 0: {'not met' if left else 'met'})"
    return f"- Goals: {speed}; {padding}; peak vs TRL's: not measured here (no TRL)."


def trl_status() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"TRL {version('trl')} is installed, but its padding_free arm is not built yet (issue #28)"
    except PackageNotFoundError:
        return (
            "not installed on this machine (pip install -e '.[bench]'), so its padding_free arm is left out"
        )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small vocabulary and short rows")
    parser.add_argument("--steps", type=int, default=2, help="update steps per arm (best is kept)")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds before an arm is stopped")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    shape = QUICK if args.quick else FULL
    if args.worker:
        print(json.dumps(worker(args.worker, shape, args.steps)))
        return
    machine = machine_line()
    results = {}
    for arm in ARMS:
        results[arm] = run_arm(arm, args.quick, args.steps, args.timeout)
        print(f"  {arm:<14} {json.dumps(results[arm])}", flush=True)
    text = markdown(shape, results, argv, machine, trl_status())
    write_result(NAME, {"shape": shape.__dict__, "lengths": lengths(shape), "arms": results}, text)
    print(text)


if __name__ == "__main__":
    main()
