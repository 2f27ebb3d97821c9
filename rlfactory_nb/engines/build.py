"""What a rollout engine is made from, and `build_engine`, the one place an engine is made.

An engine starts from one of three sources (an `EngineSource`):

    InMemory   a model object and its tokenizer in this process (a loaded Policy); an engine that
               loads "objects" (hf) serves that very model, so a trainer holding it needs no sync
    Folder     a Hugging Face folder or hub id, loaded by the engine on its own node
    Snapshot   a model config, tokenizer and dtype, with the weights passed beside it (a job's
               current weights, a kernel's Policy shipped to an actor, an asynchronous run's copy);
               an "objects" engine builds the model from them, a "folder" engine (vLLM) loads
               `path` (for LoRA the base's) and takes the weights by sync

The weights travel beside the source, not in it, so that a Ray actor given an ObjectRef to them
receives the tensors (Ray resolves references that are arguments, not ones inside a record).
Turning a preset name, a checkpoint or a LoRA adapter into a source is `rlfactory_nb.models`'s
business (`rlfactory_nb.models.policy.engine_source`): this layer does not know what a checkpoint is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from rlfactory_nb.engines.base import Engine, create_engine, engine_traits
from rlfactory_nb.errors import ArgumentTypeError


@dataclass(frozen=True)
class InMemory:
    """A model object and its tokenizer in this process."""

    model: torch.nn.Module
    tokenizer: Any


@dataclass(frozen=True)
class Folder:
    """A Hugging Face folder (or hub id) the engine loads itself."""

    path: str


@dataclass(frozen=True)
class Snapshot:
    """What an engine builds around weights that travel beside it."""

    config: Any
    """the transformers model config the weights fit"""
    tokenizer: Any
    dtype: str
    """the dtype the engine computes in ("float32", "bfloat16", ...)"""
    path: str
    """the folder a "folder" engine loads (for LoRA the base's: the merged weights follow by sync)"""


EngineSource = InMemory | Folder | Snapshot
SOURCE_KINDS = (InMemory, Folder, Snapshot)


def build_engine(
    kind: str,
    source: EngineSource,
    weights: Mapping[str, torch.Tensor] | None = None,
    device: torch.device | None = None,
    **options: Any,
) -> Engine:
    """An engine of `kind` (see `engine_kinds()`) made from `source`; `options` go to the engine.

    `weights`: for a Snapshot, what an "objects" engine's model holds (None: the config's fresh
    init, weights to follow); a "folder" engine ignores them (the caller syncs them after start).
    `device`: where an "objects" engine's model goes (None: where it is, or transformers' default)."""
    loads = engine_traits(kind).loads  # an unknown kind fails here, naming the kinds there are
    if not isinstance(source, SOURCE_KINDS):
        names = ", ".join(cls.__name__ for cls in SOURCE_KINDS)
        raise ArgumentTypeError(f"build_engine takes an engine source ({names}), got {type(source).__name__}")
    if loads == "objects":
        if isinstance(source, InMemory):
            return create_engine(kind, (source.model, source.tokenizer), **options)
        if isinstance(source, Snapshot):
            model = build_model(source.config, weights, device or torch.device("cpu"), getattr(torch, source.dtype))
            return create_engine(kind, (model, source.tokenizer), **options)
        if device is not None:
            options.setdefault("device", device)
        return create_engine(kind, source.path, **options)
    if isinstance(source, InMemory):
        raise ArgumentTypeError(
            f"a {kind!r} engine loads a model folder, not a model object: give it a Folder or a Snapshot "
            "(Policy.engine does, writing a LoRA policy's merged weights to a folder first)"
        )
    if isinstance(source, Snapshot):
        # The dtype named explicitly: vLLM's "auto" would downcast a float32 checkpoint to bfloat16
        # on CPU (a 4e-3 logprob gap measured).
        options.setdefault("dtype", source.dtype)
    return create_engine(kind, source.path, **options)


def build_model(
    model_config: Any,
    weights: Mapping[str, torch.Tensor] | None,
    device: torch.device,
    dtype: torch.dtype | None = None,
) -> torch.nn.Module:
    """A transformers model from its config, with `weights` when given, on `device` (in `dtype`)."""
    from transformers import AutoModelForCausalLM  # here: transformers takes seconds to import

    model = AutoModelForCausalLM.from_config(model_config)
    if weights is not None:
        model.load_state_dict(weights)
    return model.to(device=device, dtype=dtype).eval()


def cpu_state(state: torch.nn.Module | Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A module's state dict (or a state dict) detached and on CPU: what is sent to another process
    or written down (tensors already on CPU are not copied)."""
    tensors = state.state_dict() if isinstance(state, torch.nn.Module) else state
    return {name: tensor.detach().cpu() for name, tensor in tensors.items()}


def dtype_name(dtype: torch.dtype) -> str:
    """"float32" for torch.float32: dtypes travel by name (not every RPC layer carries a torch.dtype)."""
    return str(dtype).removeprefix("torch.")
