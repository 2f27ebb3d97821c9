"""Training on a local Ray: two policy workers (DDP or FSDP over gloo) and hf engine actors."""

import time

import pytest
import torch

from rlfactory_nb.engines.base import SamplingParams
from rlfactory_nb.train.batch import token_logprobs
from rlfactory_nb.train.loop import Trainer
from rlfactory_nb.train.update import UpdateSettings, make_optimizer, policy_update

from .conftest import tiny_random_qwen3
from .test_loop import hand_batch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def model_with(state):
    model = tiny_random_qwen3()
    model.load_state_dict(state)
    return model


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
async def test_data_parallel_workers_update_like_one_process_and_the_engine_follows(
    shared_ray, make_cfg, strategy
):
    """Slow: on the module's Ray, two policy workers and an engine actor."""
    started = time.perf_counter()
    cfg = make_cfg(
        cluster__strategy=strategy,
        grpo__steps=2,
        grpo__mini_batch_size=6,
        grpo__micro_batch_size=2,
        cluster__num_workers=2,
        cluster__num_engines=1,
        cluster__cpus_per_worker=0.5,
        cluster__object_store_memory_gb=0.3,
    )
    trainer = await Trainer(cfg).start()
    try:
        initial = {k: v.clone() for k, v in trainer.policy.model.state_dict().items()}
        placement = trainer.backend.placement  # where each actor runs (cluster/placement.py)
        roles = ["trainer", "policy worker 0 of 2", "policy worker 1 of 2", "engine actor 0"]
        assert [place.role for place in placement.actors] == roles and len(placement.by_node()) == 1
        rows = [await trainer.step_once() for _ in range(2)]
        assert sum(row.get("train/optimizer_steps", 0) for row in rows) > 0
        first, second = await trainer.backend.worker_states()
        if strategy == "ddp":  # full copies stay equal; under FSDP rank 0 alone gathers the weights
            for name, tensor in first.items():
                assert torch.equal(tensor, second[name]), f"workers disagree on {name}"
        assert any(not torch.equal(first[name], initial[name]) for name in first), "no update happened"

        # the engine actor generates with the trained weights: its logprobs equal a trainer forward pass
        prompt = trainer.policy.tokenizer.encode("What is 12*7?")
        generation = await trainer.backend.engine.generate(prompt, SamplingParams(max_new_tokens=8, seed=1))
        ids = torch.tensor([prompt + generation.token_ids])
        with torch.no_grad():
            expected = token_logprobs(model_with(first)(input_ids=ids).logits, ids)[0, len(prompt) :]
        assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=1e-4)
        assert generation.policy_version == trainer.engine.sent_version  # the actor knows its weights

        # one data-parallel update equals the same update in one process (gradient weighting is exact)
        optimizer_state = await trainer.backend.optimizer_state()
        await trainer.backend.update(hand_batch(), step=99)
        after = (await trainer.backend.worker_states())[0]
        local = model_with(first)
        optimizer = make_optimizer(local, cfg)
        optimizer.load_state_dict(optimizer_state)
        policy_update(local, optimizer, hand_batch(), UpdateSettings.from_config(cfg), step=99)
        for name, tensor in local.state_dict().items():
            assert torch.allclose(tensor, after[name], atol=1e-5), name
    finally:
        await trainer.close()
    assert time.perf_counter() - started < 90


async def test_broadcast_weight_sync_reaches_every_engine_and_colocated_engines_wake(shared_ray, make_cfg):
    """weight_sync=broadcast: worker 0 sends over a gloo group to two engine actors, which sleep
    during the update (colocate) and must generate from the new weights after the sync."""
    cfg = make_cfg(
        grpo__steps=1,
        cluster__backend="ray",
        cluster__num_workers=1,
        cluster__num_engines=2,
        cluster__weight_sync="broadcast",
        cluster__colocate=True,
        cluster__cpus_per_worker=0.5,
        cluster__object_store_memory_gb=0.3,
    )
    trainer = await Trainer(cfg).start()
    try:
        initial = model_with(trainer.policy.model.state_dict())
        for _ in range(2):  # the group is opened on the first sync and reused on the second
            await trainer.step_once()
        trained = model_with((await trainer.backend.worker_states())[0])
        prompt = trainer.policy.tokenizer.encode("What is 12*7?")
        sampling = SamplingParams(max_new_tokens=8, seed=1)
        for actor in trainer.backend.engine.actors:
            generation = await actor.generate.remote(prompt, sampling)
            ids = torch.tensor([prompt + generation.token_ids])
            with torch.no_grad():
                expected = token_logprobs(trained(input_ids=ids).logits, ids)[0, len(prompt) :]
                stale = token_logprobs(initial(input_ids=ids).logits, ids)[0, len(prompt) :]
            engine_logprobs = torch.tensor(generation.logprobs)
            assert generation.policy_version == trainer.engine.sent_version
            assert torch.allclose(engine_logprobs, expected, atol=1e-4)
            assert not torch.allclose(engine_logprobs, stale, atol=1e-3), "the engine kept old weights"
    finally:
        await trainer.close()


async def test_asynchronous_steps_on_ray_train_on_samples_at_most_one_version_old(shared_ray, make_cfg):
    """max_staleness 1 with a broadcast sync: the engine actor generates step s+1 while the worker
    updates step s, takes the weights between its batches, and reports the version it holds."""
    from rlfactory_nb.train.metrics import read_metrics
    from rlfactory_nb.types import load_jsonl

    cfg = make_cfg(
        grpo__steps=3,
        grpo__max_staleness=1,
        grpo__truncate_ratio=2.0,
        grpo__trajectories_per_step=-1,
        cluster__backend="ray",
        cluster__num_workers=1,
        cluster__num_engines=1,
        cluster__weight_sync="broadcast",
        cluster__cpus_per_worker=0.5,
        cluster__object_store_memory_gb=0.3,
    )
    trainer = await Trainer(cfg).start()
    try:
        await trainer.run()
        generation = await trainer.backend.engine.generate([1, 2, 3], SamplingParams(max_new_tokens=2))
        assert generation.policy_version == trainer.engine.sent_version > 0
    finally:
        await trainer.close()
    rows = read_metrics(cfg.run_dir)
    assert [row["step"] for row in rows] == [1, 2, 3]
    assert max(row["async/staleness_max"] for row in rows) == 1
    for step in (1, 2, 3):
        for saved in load_jsonl(cfg.run_dir / "trajectories" / f"step_{step:06d}.jsonl"):
            assert all(step - 2 <= turn.policy_version <= step - 1 for turn in saved.turns)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
async def test_lora_on_two_workers_updates_like_one_process_and_engines_get_merged_weights(
    shared_ray, make_cfg, strategy
):
    """Slow: on the module's Ray, two policy workers and engine actors."""
    from rlfactory_nb.models import lora

    cfg = make_cfg(
        model__lora={"rank": 4, "alpha": 8.0},
        grpo__lr=1e-2,
        grpo__kl_coef=0.1,
        cluster__strategy=strategy,
        cluster__num_workers=2,
        cluster__num_engines=1,
        cluster__cpus_per_worker=0.5,
        cluster__object_store_memory_gb=0.3,
    )
    trainer = await Trainer(cfg).start()
    try:
        before = (await trainer.backend.worker_states())[0]
        assert any(".lora_A." in name for name in before)
        optimizer_state = await trainer.backend.optimizer_state()
        metrics = await trainer.backend.update(hand_batch(), step=1)
        assert metrics["train/kl"] >= 0
        after = (await trainer.backend.worker_states())[0]
        await trainer.backend.sync_weights()
        for name, tensor in after.items():  # the frozen base never moves
            if ".lora_" not in name:
                assert torch.equal(tensor, before[name]), name

        local = trainer.setup.prepare(tiny_random_qwen3())
        local.load_state_dict(before)
        optimizer = make_optimizer(local, cfg)
        optimizer.load_state_dict(optimizer_state)
        policy_update(
            local,
            optimizer,
            hand_batch(),
            UpdateSettings.from_config(cfg),
            step=1,
            reference=trainer.setup.reference(local),
        )
        for name, tensor in local.state_dict().items():
            assert torch.allclose(tensor, after[name], atol=1e-5), name

        merged = model_with(lora.merge_state(after, lora.scaling(cfg.model.lora)))
        prompt = trainer.policy.tokenizer.encode("What is 12*7?")
        generation = await trainer.backend.engine.generate(prompt, SamplingParams(max_new_tokens=8, seed=1))
        ids = torch.tensor([prompt + generation.token_ids])
        with torch.no_grad():
            expected = token_logprobs(merged(input_ids=ids).logits, ids)[0, len(prompt) :]
        assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=1e-4)
    finally:
        await trainer.close()
