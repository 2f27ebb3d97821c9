"""`job.engine()` and `job.stepper()`: a running job's weights, copied between two policy updates,
served by an engine actor the kernel drives; a finished job's last checkpoint. The session's local
Ray (conftest.py), a tiny run of the calculator preset."""

import pytest

import rlfactory_nb as rf
from rlfactory_nb.cluster import launch
from rlfactory_nb.engines import SamplingParams

from .test_ray_jobs import tiny_config

pytestmark = pytest.mark.slow


async def test_a_running_jobs_policy_then_its_last_checkpoint(cluster, tmp_path):
    job = launch(tiny_config(tmp_path, "live", 5000), cluster, num_cpus=1, linger_s=60)  # stopped below; 1 CPU left
    engine = job.engine()  # waits for the driver to load its model, then copies the weights
    assert engine.version is not None and engine.name in cluster.engines()
    assert job.status in ("starting", "running"), "the job ran to the end before the test could look at it"
    prompt = engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    generation = await engine.generate(prompt, SamplingParams(max_new_tokens=8))
    assert generation.policy_version == engine.version
    await engine.close()  # the job holds the cluster's other CPU

    stepper = job.stepper()  # the run's tools and first training row, on a fresh copy
    await stepper.next_turn()
    version = stepper.trajectory.turns[0].policy_version
    assert version is not None and version >= engine.version
    assert f"1: step {version}" in stepper.static_html()
    await stepper.agent.tools.stop()
    await stepper.agent.engine.close()

    assert job.stop(timeout_s=120) in ("stopped", "finished")
    final = job.engine()  # the run has ended: its last checkpoint
    assert final.version == int(job.checkpoints[-1].name.removeprefix("step_")) >= version
    await final.close()


def test_a_job_without_weights_left_says_so(cluster, tmp_path):
    job = rf.TrainingJob(name="empty", run_dir=tmp_path / "empty", actor=None, cluster=cluster)
    (tmp_path / "empty").mkdir()
    with pytest.raises(RuntimeError, match="left no checkpoint: there are no weights to serve"):
        job.engine()
