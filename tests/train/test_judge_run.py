"""A run that declares `reward.judge` on the local backend: the judge is built in this process and
its requests, tokens and latency are in every step's metrics (the tiny preset judges: noise scores,
real plumbing). The Ray backend's judge actor is tested in tests/cluster/test_judge_engine.py."""

from tiny_models import tiny_run_config

from rlfactory_nb.train.loop import train
from rlfactory_nb.train.metrics import read_metrics


async def test_a_local_run_with_a_declared_judge_meters_it_each_step(tmp_path):
    cfg = tiny_run_config(
        "tiny-calculator", tmp_path / "runs", "rlfactory_nb.rewards.functions:exact_match", name="judged",
        grpo__prompts_per_step=2, grpo__group_size=2, grpo__mini_batch_size=4, grpo__micro_batch_size=4,
        reward__judge={"model": "tiny-calculator", "max_tokens": 8, "use": "logged"}, cluster__backend="local",
    )  # fmt: skip
    result = await train(cfg)
    rows = read_metrics(cfg.run_dir)
    assert result.step == 2 and [row["step"] for row in rows] == [1, 2]
    for row in rows:  # per step, not cumulative: 4 samples each
        assert row["reward/judge/requests"] + row["reward/judge/cached_hits"] == 4
        assert row["reward/judge/tokens"] > 0 and row["reward/judge/seconds_mean"] > 0
