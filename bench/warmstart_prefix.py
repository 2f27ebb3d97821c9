"""Warm-start step cost: full padded sequences vs the shared-prefix loss, on the same batches.

    python bench/warmstart_prefix.py [--steps 10] [--threads 2]

Both losses are identical (tests/presets/test_warmstart.py); this measures the time of a training
step (forward + backward + AdamW) for each, alternating, so machine noise hits both alike.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import Qwen3ForCausalLM

from rlfactory_nb.presets import calculator, tiny_config
from rlfactory_nb.presets.tokenizer import build_tokenizer
from rlfactory_nb.presets.warmstart import (
    WarmStartConfig,
    make_examples,
    prefix_shared_loss,
    shared_prefix_length,
)


def full_sequence_loss(model, batch, pad_id):
    length = max(len(ids) for ids, _ in batch)
    ids = torch.full((len(batch), length), pad_id)
    labels = torch.full((len(batch), length), -100)
    for row, (seq, mask) in enumerate(batch):
        ids[row, : len(seq)] = torch.tensor(seq)
        labels[row, : len(seq)] = torch.where(torch.tensor(mask, dtype=torch.bool), torch.tensor(seq), -100)
    return model(input_ids=ids, labels=labels).loss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tokenizer = build_tokenizer()
    examples = make_examples(tokenizer, WarmStartConfig(examples=256), [calculator.CALCULATOR_TOOL], tool_share=0.4)
    prefix = shared_prefix_length(examples)
    model = Qwen3ForCausalLM(tiny_config())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    timings = {"full": [], "shared_prefix": []}
    for step in range(args.steps + 1):
        batch = examples[(step * args.batch_size) % 200 :][: args.batch_size]
        for name in timings:
            started = time.perf_counter()
            if name == "full":
                loss = full_sequence_loss(model, batch, tokenizer.pad_token_id)
            else:
                loss = prefix_shared_loss(model, batch, prefix, tokenizer.pad_token_id)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step:  # the first step warms allocators and kernels
                timings[name].append(time.perf_counter() - started)
    full, shared = (statistics.median(timings[k]) for k in ("full", "shared_prefix"))
    print(f"batch {args.batch_size}, shared prefix {prefix} tokens, {args.threads} thread(s), {args.steps} steps each")
    print(f"full sequences: median {full:.3f} s/step; shared prefix: median {shared:.3f} s/step; ratio {full / shared:.2f}x")


if __name__ == "__main__":
    main()
