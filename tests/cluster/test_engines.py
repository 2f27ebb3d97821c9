"""Engines on the cluster driven from the kernel (`cluster.engine`): a real local Ray (the session's
cluster, conftest.py), the tiny-calculator preset, the example's tools running in the kernel."""

import gc
import time

import pytest

import rlfactory_nb as rf
from rlfactory_nb.cluster.engines import EngineActorDied, InsufficientResources
from rlfactory_nb.engines import SamplingParams

pytestmark = pytest.mark.slow
GREEDY = SamplingParams(temperature=0, max_new_tokens=16)


@pytest.fixture(scope="module")
def cfg():
    return rf.example("calculator").config({"rollout.max_new_tokens": 24, "rollout.max_turns": 3})


@pytest.fixture
async def tools(cfg):
    """The example's MCP tool servers, in this process (the kernel), on the test's loop."""
    tools = await rf.build_tools(cfg).start()
    yield tools
    await tools.stop()


def wait_until(condition, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.2)


async def test_a_preset_engine_samples_what_the_local_engine_samples(cluster, tiny_policy, tools, cfg):
    """Slow: as the first test of tests/cluster its setup starts the package's local Ray; then an engine actor
    starts."""
    engine = cluster.engine("tiny-calculator")
    assert engine.name in cluster.engines() and engine.name in cluster.view().static_html()
    prompt = tiny_policy.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 12*34?"}], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    local = await tiny_policy.engine("hf").generate(prompt, GREEDY)
    remote = await engine.generate(prompt, GREEDY)  # token ids travel, the tokenizer stays here
    assert remote.token_ids == local.token_ids and remote.logprobs == pytest.approx(local.logprobs, abs=1e-4)

    stepper = rf.RolloutStepper(rf.Agent.from_config(cfg, tiny_policy, tools, engine=engine), "What is 123*456?")
    await stepper.run_to_end()  # tool calls run here in the kernel, generation on the actor
    traj = stepper.trajectory
    assert traj.num_turns >= 1 and len(traj.loss_mask) == len(traj.response_ids) == len(traj.logprobs)
    await engine.close()
    wait_until(lambda: engine.name not in cluster.engines())


async def test_a_kernel_policy_serves_evaluate_and_the_reward_lab(cluster, tiny_policy, tools, cfg):
    engine = cluster.engine(tiny_policy, seed=3)
    rows = rf.example("calculator").dataset("eval", 2)
    report = await rf.evaluate(engine, rows, cfg, label="on the cluster")
    assert len(report.rows) == 2 and report.label == "on the cluster"
    agent = rf.Agent.from_config(cfg, tiny_policy, tools, engine=engine)
    lab = await rf.RewardLab(agent, rows, rewards={"em": rf.rewards.exact_match}, group_size=2).sample(n_prompts=1)
    assert len(lab.groups[0]) == 2
    assert engine.alive  # evaluate leaves an engine it was given open
    name = engine.name
    del engine, agent, lab  # dropping the handle frees the actor
    gc.collect()
    wait_until(lambda: name not in cluster.engines())


def test_resources_the_cluster_lacks_are_refused_at_once(cluster):
    started = time.monotonic()
    with pytest.raises(InsufficientResources, match=r"asks for 1 GPU\(s\) but the cluster has 0 .*2 CPUs, 0 GPUs"):
        cluster.engine("tiny-calculator", num_gpus=1)
    with pytest.raises(InsufficientResources, match=r"asks for 64 CPU\(s\) but the cluster has 2"):
        cluster.engine("tiny-calculator", num_cpus=64)
    assert time.monotonic() - started < 5 and not cluster.engines()


async def test_an_engine_that_dies_mid_rollout_fails_the_step_by_name(cluster, tiny_policy, tools, cfg):
    import ray

    engine = cluster.engine("tiny-calculator")
    stepper = rf.RolloutStepper(rf.Agent.from_config(cfg, tiny_policy, tools, engine=engine), "What is 7*8?")
    ray.kill(engine.actors[0], no_restart=True)
    with pytest.raises(EngineActorDied, match=f"engine actor {engine.name}.*died.*cluster.engine"):
        await stepper.next_turn()
    again = cluster.engine("tiny-calculator")  # a new one works
    stepper = rf.RolloutStepper(rf.Agent.from_config(cfg, tiny_policy, tools, engine=again), "What is 7*8?")
    assert await stepper.next_turn() is not None
    await again.close()
