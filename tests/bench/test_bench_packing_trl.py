"""The packing benchmark's TRL arm (bench/packing.py): the goal it adds (packed peak <= 0.5x TRL's), and
a quick run in which TRL's GRPOTrainer trains the same loss as ours and pays the padding its layout
implies (every row as wide as the longest prompt plus the longest completion)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import packing

HAS_TRL = importlib.util.find_spec("trl") is not None


def _entry(cpu_seconds, peak, padding):
    return {
        "status": "ok",
        "seconds": [cpu_seconds],
        "cpu_seconds": [cpu_seconds],
        "ready_rss_mib": 400.0,
        "peak_rss_mib": peak,
        "padding_tokens": padding,
    }


def test_goals_judge_the_packed_peak_against_trl_and_say_when_trl_is_missing():
    results = {
        "padded": _entry(10.0, 3000.0, 900),
        "packed": _entry(5.0, 1000.0, 0),
        packing.TRL_ARM: _entry(20.0, 4000.0, 2000),
    }
    verdicts = packing.goals(results)
    assert "packed CPU s/step 0.50x padded (goal <= 0.6x: met)" in verdicts
    assert "padding tokens 0 (goal 0: met)" in verdicts
    assert "packed peak 0.25x TRL's (goal <= 0.5x: met)" in verdicts
    results[packing.TRL_ARM] = {"status": "not installed (pip install -e '.[bench]')"}
    assert "packed peak vs TRL's: not measured" in packing.goals(results)
    text = packing.markdown(packing.QUICK, results, [], "Machine: test.", "- TRL: a note.")
    assert "| not installed (pip install -e '.[bench]') |" in text and "| 0.33x |" in text


@pytest.mark.slow
@pytest.mark.skipif(not HAS_TRL, reason="the TRL arm needs the bench extra (pip install -e '.[bench]')")
def test_trl_trains_our_loss_and_pays_the_padding_of_its_layout():
    ours = packing.run_arm("padded", quick=True, steps=1, timeout_s=300)
    trl = packing.run_arm(packing.TRL_ARM, quick=True, steps=1, timeout_s=300)
    assert ours["status"] == trl["status"] == "ok", trl["status"]
    assert trl["loss"] == pytest.approx(ours["loss"], rel=1e-5)
    trajectories, _ = packing.rollouts(packing.QUICK)
    width = max(len(t.prompt_ids) for t in trajectories) + max(len(t.response_ids) for t in trajectories)
    assert trl["padding_tokens"] == len(trajectories) * width - sum(packing.lengths(packing.QUICK))
    assert trl["micro_batches"] == packing.QUICK.rows and trl["sampled_tokens"] == ours["sampled_tokens"]
