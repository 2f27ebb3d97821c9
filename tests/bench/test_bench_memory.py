"""The memory benchmark (bench/memory.py) and the GPU check (bench/gpu_check.sh): their pure parts, the
watchdog that turns a worker that does not fit into a result, a --quick run of every variant, and the
GPU check's CPU smoke run with mcp, Ray and vLLM made unimportable (the GPU machine has none of them)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import _common, memory

HAS_TRL = importlib.util.find_spec("trl") is not None


OURS = ("today", "chunked", "checkpointing", "token_budget", "padding_free", "lora")
"""our variants, in order: each adds one feature to the one before"""


def test_each_variant_adds_one_feature_to_the_one_before():
    ours = [v for v in memory.variants(memory.FULL) if v.name != "trl"]
    assert [v.name for v in ours] == list(OURS)
    assert ours[0].overrides == {}
    for before, after in itertools.pairwise(ours):
        assert len(after.overrides) == len(before.overrides) + 1
        assert before.overrides.items() <= after.overrides.items()
    every = ours[-1].overrides
    assert (
        every["grpo.logprob_chunk_tokens"] == memory.FULL.chunk_tokens
        and every["model.gradient_checkpointing"]
    )
    assert every["grpo.max_tokens_per_micro_batch"] == 2048 and every["model.lora"]["rank"] == 16


def test_today_is_the_full_logits_path_with_one_micro_batch():
    cfg = memory.base_config(memory.QUICK, {})
    assert cfg.grpo.logprob_chunk_tokens is None and cfg.grpo.max_tokens_per_micro_batch is None
    assert not cfg.model.gradient_checkpointing and cfg.model.lora is None
    assert cfg.grpo.micro_batch_size == cfg.grpo.mini_batch_size == memory.QUICK.rows


def test_the_batch_trains_the_last_tokens_of_every_row():
    shape = memory.QUICK
    batch = memory.bench_batch(shape)
    assert tuple(batch.input_ids.shape) == (shape.rows, shape.tokens)
    assert batch.loss_mask.sum(dim=1).tolist() == [shape.trained] * shape.rows
    assert not batch.loss_mask[:, : shape.tokens - shape.trained].any()
    assert int(batch.input_ids.max()) < shape.vocab
    assert (batch.advantages > 0).any() and (batch.advantages < 0).any()


def _outcome(name, seconds, peak, state=None, status="ok"):
    return memory.Outcome(
        name, status, [seconds], [seconds], ready_rss_mib=500.0, peak_rss_mib=peak, state=state
    )


def test_summary_judges_the_goals_and_reports_a_variant_that_did_not_fit():
    full_state = {"grad_bytes": 400, "optimizer_bytes": 800, "trained_params": 100}
    lora_state = {"grad_bytes": 4, "optimizer_bytes": 8, "trained_params": 1}
    outcomes = {
        "today": [_outcome("today", 0, 30_000.0, status="did not fit in 24 GiB")],
        "chunked": [_outcome("chunked", 60.0, 4000.0, full_state)],
        "token_budget": [_outcome("token_budget", 70.0, 2000.0, full_state)],
        "lora": [_outcome("lora", 50.0, 1000.0, lora_state)],
        "trl": [_outcome("trl", 90.0, 4000.0, lora_state)],
    }
    data = memory.summarize(outcomes, memory.QUICK, rounds=1, limit_gib=24)
    goals = data["goals"]
    assert goals["peak_vs_today"] is None  # today has no figure: no ratio, not a made-up one
    assert goals["peak_vs_trl"] == pytest.approx(0.25)
    assert goals["lora_state_vs_full"] == pytest.approx(0.01)
    labels = {v.name: v.label for v in memory.variants(memory.QUICK)}
    text = memory.markdown(data, labels, ["--quick"], "Machine: test.")
    assert text.startswith("## ") and "python bench/memory.py --quick" in text
    assert "did not fit in 24 GiB" in text and "killed at 30,000" in text
    assert "vs TRL's 0.25x (goal <= 0.5x: met)" in text
    assert "vs today's: not measured" in text


def test_a_worker_over_the_memory_limit_is_a_result_not_a_crash(tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "LOG_DIR", tmp_path)
    # Python with torch imported passes 0.05 GiB at once: the watchdog must stop it and say so.
    outcome = memory.run_worker("today", True, 1, limit_gib=0.05, reserve_gib=0.0, timeout_s=120)
    assert outcome.status == "did not fit in 0.05 GiB"
    assert outcome.seconds == [] and outcome.peak_rss_mib and outcome.peak_rss_mib > 0.05 * 1024


@pytest.mark.slow
@pytest.mark.skipif(not HAS_TRL, reason="the TRL row needs the bench extra (pip install -e '.[bench]')")
def test_quick_run_measures_every_variant(tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "LOG_DIR", tmp_path / "logs")
    monkeypatch.setattr(_common, "RESULTS_DIR", tmp_path)
    memory.main(["--quick"])
    data = json.loads((tmp_path / "memory.json").read_text())
    assert set(data["variants"]) == {*OURS, "trl"}
    for name, entry in data["variants"].items():
        assert entry["status"] == "ok", (name, entry["status"])
        assert entry["median_step_s"] > 0 and entry["peak_rss_mib"] > entry["ready_rss_mib"] * 0.9
    states = {name: entry["state"] for name, entry in data["variants"].items()}
    # --quick's tiny model has a small embedding, so adapters are a third of it, not the 0.5% of FULL
    assert states["lora"]["trained_params"] < states["token_budget"]["trained_params"] / 2
    assert data["goals"]["lora_state_vs_full"] < 0.5
    assert (tmp_path / "memory.md").read_text().startswith("## Memory of one policy update")


BLOCKED = "raise ImportError('not installed on the GPU machine (blocked by the test)')\n"


@pytest.mark.slow
def test_gpu_check_cpu_smoke_runs_without_mcp_ray_or_vllm(tmp_path):
    """Slow: bench/gpu_check.sh runs its whole CPU smoke (several Python processes that import torch)."""
    blocked = tmp_path / "blocked"
    for name in ("mcp", "ray", "vllm"):
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(BLOCKED)
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=str(blocked), OMP_NUM_THREADS="1")
    out = tmp_path / "out"
    result = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_check.sh"), "--cpu-smoke", "--out", str(out)],
        env=env,
        capture_output=True,
        check=False,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    first_line = result.stdout.splitlines()[0]
    assert first_line.startswith("torch ") and "transformers " in first_line
    records = json.loads((out / "gpu_check.json").read_text())["records"]
    assert [(r["mode"], r["step"]) for r in records] == [
        ("full", 0), ("full", 1), ("lora", 0), ("lora", 1), ("bf16-master", 0),
        ("update-padded", 0), ("update-packed", 0),
    ]  # fmt: skip
    padded, packed = records.pop(-2), records.pop(-1)  # the packing check: one update each
    assert packed["attention"] == "sdpa_packed" and packed["padding_tokens"] == 0 < padded["padding_tokens"]
    assert packed["logprob_gap_max"] < 0.05  # bf16 compute, the same weights
    assert all(r["generated_tokens_per_s"] > 0 and r["peak_gib"] > 0 for r in records)
    changed = {r["mode"]: r["changed_fraction"] for r in records if "changed_fraction" in r}
    # lr 1e-6: a float32 master moves nearly every weight; a bfloat16 master rounds most steps away.
    assert changed["full"] > 0.5 and changed["bf16-master"] < changed["full"] / 5
    assert changed["lora"] > 0.25  # B moves (A's gradient is 0 while B is 0): about half the adapters
