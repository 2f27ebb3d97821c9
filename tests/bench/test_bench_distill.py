"""bench/distill.py: its arms differ by the distill: section alone, the goals are judged (a GRPO run
that never reached the target counts as a bound), and (slow) each piece runs in quick mode."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import distill


def _args(tmp_path: Path) -> argparse.Namespace:
    return distill.parse_args(["--quick", "--out", str(tmp_path)])


def test_the_arms_differ_from_grpo_alone_by_the_distill_section_only(tmp_path):
    args = _args(tmp_path)
    configs = {arm: distill.base_config(args, arm, 0, distill.STUDENT, **distill.arm_overrides(arm, "tiny-calculator"))
               for arm in distill.ARMS}  # fmt: skip
    grpo, alone, added, sft = (configs[arm] for arm in distill.ARMS)
    assert grpo.distill is None and sft.distill is None and grpo.grpo.filter_zero_variance
    assert alone.distill.only and not added.distill.only
    assert alone.distill.teacher == added.distill.teacher == "tiny-calculator"
    for cfg in (alone, added):  # an all-zero student's groups must reach the teacher
        assert not cfg.grpo.filter_zero_variance
        assert cfg.replace({"grpo.filter_zero_variance": True}).grpo == grpo.grpo
    assert grpo.model.name == "tiny-calculator-weak" and grpo.data.eval_size == 8 and grpo.grpo.steps == 2


def _run(arm: str, seed: int, greedy: list[float], start: int = 0) -> dict:
    curve = [{"step": start + 3 * i, "wall_s": 10.0 * i, "greedy": g, "sampled": g / 2} for i, g in enumerate(greedy)]
    return {"arm": arm, "seed": seed, "seconds": 99, "curve": curve, "train_reward_mean": 0.1,
            "train_reward_max": 0.5, "reverse_kl_first": 8.0 if "distill" in arm else None, "reverse_kl_last": 1.0}


def test_goals_count_a_grpo_run_that_never_reached_the_target_as_a_bound():
    runs = [_run("grpo", 0, [0.0, 0.0, 0.0, 0.0, 0.0]), _run("distill", 0, [0.0, 0.95, 1.0, 1.0, 1.0]),
            _run("distill+grpo", 0, [0.0, 0.5, 0.6, 0.7, 0.8]), _run("sft+grpo", 0, [0.4, 0.9, 1.0], start=6)]  # fmt: skip
    lines = distill.verdicts(runs, 0.9)
    assert lines[0] == "- Seed 0, distill to greedy 0.90: step 3; GRPO alone: step > 12 (ratio < 0.25; goal <= 0.20)."
    assert "distill+grpo to greedy 0.90: step -" in lines[1] and "missed" in lines[1]
    assert lines[2].startswith("- Seed 0, sft+grpo to GRPO alone's final greedy 0.000 (step 12): step 6 (goal <= 6")
    assert distill.goal_summary(runs, 0.9) == [
        ("- Goal 1 (distillation to greedy 0.90 in at most a fifth of GRPO alone's steps): missed (0 of 2 runs). "
        "Goal 2 (SFT-then-GRPO to GRPO alone's final score in at most half its steps): met (1 of 1 seeds).")]
    assert distill.stuck_note(runs) == []  # its train reward had a nonzero max
    stuck = {**runs[0], "train_reward_max": 0.0}
    assert "no step changed the policy" in distill.stuck_note([stuck, runs[1]])[0]
    both = distill.verdicts([_run("grpo", 1, [0.0, 0.0, 0.0, 0.9]), _run("distill", 1, [0.0, 0.0, 0.9])], 0.9)
    assert both == ["- Seed 1, distill to greedy 0.90: step 6; GRPO alone: step 9 (ratio 0.67; goal <= 0.20)."]


def test_the_section_has_a_row_per_run_and_the_goals(tmp_path):
    teacher = {"checkpoint": "x", "curve": [{"step": 2, "wall_s": 1.0, "greedy": 0.97, "sampled": 0.5}], "seconds": 60}
    samples = {"rejection/kept": 90.0, "rejection/sampled": 128.0}
    runs = [_run("grpo", 0, [0.0, 0.0]), _run("distill", 0, [0.0, 0.95])]
    text = distill.markdown(runs, teacher, samples, _args(tmp_path), ["--quick"], "Machine: test.", 12.0)
    assert text.startswith("## ") and "python bench/distill.py --quick" in text
    assert "| distill | 0 | 0.000 (0 s) | 0.950 (10 s) | step 3 (10 s) | 0.100 | 8.00 -> 1.00 | 99 |" in text
    assert "(90 of 128 kept at reward 1)" in text and "min(teacher, 0.9) = 0.900" in text


@pytest.mark.slow
def test_each_piece_runs_in_quick_mode(tmp_path):
    args = _args(tmp_path)
    teacher = distill.train_teacher(args)
    assert Path(teacher["checkpoint"]).is_dir() and [p["step"] for p in teacher["curve"]] == [0, 1]
    samples = distill.teacher_samples(args, teacher["checkpoint"])
    assert samples["rejection/sampled"] == 8.0 and Path(samples["run_dir"]).is_dir()
    for arm in distill.ARMS:
        record = distill.run_arm(args, arm, 0, teacher["checkpoint"], samples["run_dir"])
        first = 1 if arm == "sft+grpo" else 0  # SFT's one step comes first
        assert [p["step"] for p in record["curve"]] == [first, first + 1, first + 2]
        assert all(0.0 <= p["greedy"] <= 1.0 for p in record["curve"])
        assert (record["reverse_kl_first"] is not None) == arm.startswith("distill")
