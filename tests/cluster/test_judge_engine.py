"""A judge served by the cluster: `LLMJudge(engine=cluster.engine(...))` on a real engine actor, and
a run that declares `reward.judge` (its engine actor started beside the policy's, killed mid-run:
the step fails naming the judge, and resume works). The tiny preset judges: its scores are noise,
the plumbing is real."""

import os
import re
import signal

import pytest
from tiny_models import tiny_run_config

import rlfactory_nb as rf
from rlfactory_nb.errors import StepFailed
from rlfactory_nb.rewards.samples import make_sample
from rlfactory_nb.train.loop import Trainer, train
from rlfactory_nb.train.metrics import read_metrics

pytestmark = pytest.mark.slow


async def test_a_judge_on_an_engine_actor_scores_with_its_own_template(cluster, tiny_policy):
    engine = cluster.engine("tiny-calculator", label="judge-test")
    judge = rf.LLMJudge(engine=engine, max_tokens=8, score_parser=lambda reply: 0.5)
    samples = [make_sample(f"<answer>{n}</answer>", ground_truth="36", id=str(n)) for n in range(4)]
    scores = [await judge(sample) for sample in samples]
    assert scores == [{"score": 0.5}] * 4 and judge.usage.requests == 4
    assert 0 < judge.usage.completion_tokens <= 4 * 8 and judge.metrics["judge/tokens"] > judge.usage.completion_tokens
    await engine.close()


async def test_a_run_with_a_judge_actor_that_dies_fails_naming_it_and_resumes(cluster, tmp_path):
    """Slow: a Ray run (policy worker, engine actor and the judge's engine actor) on the package's local
    Ray: step 1 scored by the judge, the judge killed, step 2 fails; the resumed run finishes."""
    import ray

    cfg = tiny_run_config(
        "tiny-calculator", tmp_path / "runs", "rlfactory_nb.rewards.functions:exact_match", name="judged",
        grpo__steps=3, grpo__checkpoint_every=1, grpo__prompts_per_step=2, grpo__group_size=2,
        grpo__mini_batch_size=4, grpo__micro_batch_size=4,
        reward__judge={"model": "tiny-calculator", "num_cpus": 0.5, "max_tokens": 8},
        cluster__backend="ray", cluster__cpus_per_worker=0.5, cluster__object_store_memory_gb=0.3,
    )  # fmt: skip
    trainer = Trainer(cfg)
    try:
        await trainer.start()
        judge = trainer.backend.judge
        assert judge.name.startswith("rlfactory-nb-engine:judge-") and next(iter(trainer.reward.functions)) == "judge"
        pid = ray.get(judge.actors[0].__ray_call__.remote(lambda actor: os.getpid()))

        def kill_judge_after_step_1(row):
            if row["step"] == 1:
                os.kill(pid, signal.SIGKILL)

        with pytest.raises(StepFailed) as failed:
            await trainer.run(on_step=kill_judge_after_step_1)
    finally:
        await trainer.close()
    message = str(failed.value)
    assert re.search(rf"step 2 failed during the rewards: judge engine actor {judge.name} on node 127\.0\.0\.1 \(pid {pid}\) died", message), message
    assert "step_000001" in message and "resume" in message
    (first,) = read_metrics(cfg.run_dir)
    assert first["reward/judge/requests"] + first["reward/judge/cached_hits"] == 4 and first["reward/judge/tokens"] > 0
    assert first["reward/judge/seconds_mean"] > 0

    result = await train(cfg, resume=True)
    assert result.step == 3 and [row["step"] for row in read_metrics(cfg.run_dir)] == [1, 2, 3]
    assert judge.name not in cluster.engines() and not [n for n in cluster.engines() if "judge" in n]
