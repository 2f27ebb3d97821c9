"""bench/learning_options.py: its arms differ by one option each, and its section from fake runs."""

from bench import learning_options


def test_arms_differ_from_the_baseline_by_one_option_each():
    args = learning_options.parse_args(["--quick", "--rounds", "4"])
    configs = {
        name: learning_options.arm_config(name, o, args) for name, o in learning_options.arms(4).items()
    }
    baseline, masked, refilled = configs.values()
    assert not baseline.grpo.mask_truncated and baseline.grpo.dynamic_sampling is None
    assert masked.grpo.mask_truncated and masked.replace({"grpo.mask_truncated": False}).grpo == baseline.grpo
    assert refilled.grpo.dynamic_sampling.max_rounds == 4
    assert refilled.replace({"grpo.dynamic_sampling": None}).grpo == baseline.grpo
    assert len({cfg.run_dir for cfg in configs.values()}) == 3 and baseline.grpo.steps == 3


def test_section_from_three_arms():
    rows = [
        {"step": 0, "time": 0.0, "eval/sampled_reward/mean": 0.2, "eval/greedy_reward/mean": 0.0},
        {
            "step": 1,
            "time": 90.0,
            "rollout/trajectories": 128,
            "rollout/truncated": 32,
            "groups/trained": 10,
            "sampling/rounds": 2,
            "sampling/prompts_drawn": 32,
            "eval/sampled_reward/mean": 0.4,
            "eval/greedy_reward/mean": 0.5,
        },
    ]
    results = [learning_options.summarize(name, rows) for name in ("baseline", "mask_truncated", "ds")]
    args = learning_options.parse_args(["--quick"])
    text = learning_options.markdown(results, args, ["--quick"], "Machine: test.")
    assert text.startswith("## ") and "python bench/learning_options.py --quick" in text
    assert (
        "| mask_truncated | 0.200 -> 0.400 | 0.000 -> 0.500 | 25.0% | 10.0 | 2.00 | 32.0 | 1.5 min |" in text
    )
