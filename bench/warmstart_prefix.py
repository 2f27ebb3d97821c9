"""Warm-start step cost: full padded sequences vs the shared-prefix loss, on the same batches.

    python bench/warmstart_prefix.py [--quick] [--steps 10] [--threads N] [--batch-size 32]

Both losses are identical (tests/presets/test_warmstart.py); this measures the time of a training
step (forward + backward + AdamW) for each, alternating, so machine noise hits both alike. The first
step of each warms allocators and kernels and is discarded.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from transformers import Qwen3ForCausalLM

from rlfactory_nb.models.presets import calculator, tiny_config
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.models.presets.warmstart import (
    WarmStartConfig,
    draw_batch,
    prefix_shared_loss,
    shared_prefix_length,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import machine_line, markdown_table, section, write_result

NAME = "warmstart_prefix"


def full_sequence_loss(model, batch, pad_id):
    length = max(len(ids) for ids, _ in batch)
    ids = torch.full((len(batch), length), pad_id)
    labels = torch.full((len(batch), length), -100)
    for row, (seq, mask) in enumerate(batch):
        ids[row, : len(seq)] = torch.tensor(seq)
        labels[row, : len(seq)] = torch.where(torch.tensor(mask, dtype=torch.bool), torch.tensor(seq), -100)
    return model(input_ids=ids, labels=labels).loss


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 measured steps")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    if args.quick:
        args.steps = min(args.steps, 3)
    return args


def measure(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    tokenizer = build_tokenizer()
    examples = draw_batch(
        random.Random(0), tokenizer, WarmStartConfig(batch_size=256), [calculator.CALCULATOR_TOOL], 0.4, set()
    )
    prefix = shared_prefix_length(examples)
    model = Qwen3ForCausalLM(tiny_config())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    timings: dict[str, list[float]] = {"full": [], "shared_prefix": []}
    for step in range(args.steps + 1):
        batch = examples[(step * args.batch_size) % 200 :][: args.batch_size]
        for name, seconds in timings.items():
            started = time.perf_counter()
            if name == "full":
                loss = full_sequence_loss(model, batch, tokenizer.pad_token_id)
            else:
                loss = prefix_shared_loss(model, batch, prefix, tokenizer.pad_token_id)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step:  # the first step warms allocators and kernels
                seconds.append(time.perf_counter() - started)
    full, shared = (statistics.median(timings[k]) for k in ("full", "shared_prefix"))
    return {
        "batch_size": args.batch_size,
        "shared_prefix_tokens": prefix,
        "threads": args.threads,
        "steps": args.steps,
        "full_median_s": full,
        "shared_prefix_median_s": shared,
        "full_over_shared": full / shared,
        "timings_s": timings,
    }


def markdown(data: dict[str, Any], argv: list[str], machine: str) -> str:
    table = markdown_table(
        ["warm-start loss", "median s/step"],
        [
            ["full padded sequences", f"{data['full_median_s']:.3f}"],
            [
                f"shared prefix ({data['shared_prefix_tokens']} tokens once per batch)",
                f"{data['shared_prefix_median_s']:.3f}",
            ],
            ["full / shared prefix", f"{data['full_over_shared']:.2f}x"],
        ],
    )
    bullets = [
        (
            f"- One warm-start training step (forward + backward + AdamW) on the same batches of "
            f"{data['batch_size']} conversations, the two losses alternating so machine noise hits both "
            f"alike; median of {data['steps']} steps each after one warm-up, {data['threads']} thread(s)."
        ),
        (
            "- Both compute the same loss (`tests/presets/test_warmstart.py`). Every warm-start conversation "
            "starts with the same system prompt and tool description; the shared-prefix loss runs it once "
            "and reuses its keys and values for the whole batch instead of once per row, and runs the "
            "output layer only where a loss applies."
        ),
    ]
    title = "Warm-start: shared-prefix loss vs full padded sequences"
    return section(title, "bench/warmstart_prefix.py", argv, machine, table, bullets)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    machine = machine_line()
    data = measure(args)
    print(
        f"batch {data['batch_size']}, shared prefix {data['shared_prefix_tokens']} tokens, "
        f"{data['threads']} thread(s), {data['steps']} steps each"
    )
    print(
        f"full sequences: median {data['full_median_s']:.3f} s/step; shared prefix: median "
        f"{data['shared_prefix_median_s']:.3f} s/step; ratio {data['full_over_shared']:.2f}x"
    )
    write_result(NAME, data, markdown(data, argv, machine))


if __name__ == "__main__":
    main()
