"""Smoke test of bench/master_weights.py on its --quick model: every variant runs in its own process
and the figures say what issue #20 is about (a bfloat16 master loses a lr 1e-6 step, a float32 one
keeps it)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import master_weights


@pytest.mark.timeout(300)
def test_quick_run_reports_every_variant_and_only_the_bf16_master_loses_the_step(tmp_path, monkeypatch):
    monkeypatch.setattr(master_weights, "LOG_DIR", tmp_path)  # not runs/bench-master-weights: runs may overlap
    data = master_weights.drive(rounds=1, quick=True)
    variants = data["variants"]
    assert set(variants) == set(master_weights.VARIANTS)
    for name in ("fp32", "autocast", "master"):
        assert variants[name]["changed_fraction"] > 0.99, name
    assert variants["bf16"]["changed_fraction"] < 0.1
    # The master's bfloat16 working copy moves only where the step crosses a bfloat16 rounding step.
    assert variants["master"]["compute_copy_changed_fraction"] < 0.1
    for figures in variants.values():
        assert figures["median_step_s"] > 0 and figures["peak_rss_mib"] >= figures["ready_rss_mib"] > 0
    text = master_weights.markdown(data, ["--quick"], "Machine: test")
    assert text.startswith("## ") and "autocast bf16 over fp32 parameters (ours)" in text
