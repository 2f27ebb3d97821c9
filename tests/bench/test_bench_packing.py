"""The packing benchmark (bench/packing.py): its ragged batch, its arms, and a quick run in which the
three arms train the same loss and only the packed one pays no padding."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import packing


def test_lengths_are_ragged_with_the_long_tail_the_issue_asks_for():
    sizes = packing.lengths(packing.FULL)
    assert len(sizes) == packing.FULL.rows and max(sizes) == 4000
    assert 150 <= sorted(sizes)[len(sizes) // 2] <= 600 and min(sizes) >= packing.SHORTEST


def test_the_batch_has_two_turns_around_a_tool_output():
    batch = packing.bench_batch(packing.QUICK)
    row = int(batch.attention_mask.sum(dim=-1).argmax())
    sampled = batch.loss_mask[row].int().tolist()
    turns = sum(1 for a, b in zip([0, *sampled], sampled) if b and not a)
    assert turns == 2 and batch.attention_mask.sum() == sum(packing.lengths(packing.QUICK))


def test_the_arms_differ_only_in_how_micro_batches_are_made():
    configs = {arm: packing.config(packing.QUICK, arm).grpo for arm in packing.ARMS}
    assert not configs["padded"].padding_free and configs["padded"].max_tokens_per_micro_batch is None
    assert configs["padded_budget"].max_tokens_per_micro_batch == packing.QUICK.budget
    assert (
        configs["packed"].padding_free
        and configs["packed"].max_tokens_per_micro_batch == packing.QUICK.budget
    )


def test_a_quick_run_trains_the_same_loss_in_every_arm_and_packed_pays_no_padding():
    threads = torch.get_num_threads()
    try:
        results = {arm: packing.worker(arm, packing.QUICK, steps=1) for arm in packing.ARMS}
    finally:
        torch.set_num_threads(threads)
    losses = [entry["loss"] for entry in results.values()]
    assert losses == pytest.approx([losses[0]] * len(losses), rel=1e-5)
    assert results["packed"]["padding_tokens"] == 0
    assert results["padded"]["padding_tokens"] > results["padded_budget"]["padding_tokens"] > 0
    text = packing.markdown(
        packing.QUICK, {a: {"status": "ok", **r} for a, r in results.items()}, [], "m", "t"
    )
    assert text.startswith("## ") and "| packed" in text
