"""Data-parallel wrapping of the policy on a worker: DDP (a full copy per rank) or FSDP (sharded).

    ddp   every rank holds the whole model, its gradients and AdamW state; gradients are all-reduced
          once per mini-batch. Fastest while the model and its optimizer fit on one device.
    fsdp  torch's FSDP2 (`fully_shard`): parameters, gradients and optimizer state are split over the
          ranks, each decoder layer gathered just in time for its forward and backward. Memory per
          rank falls about as 1/world_size, which is what lets a 4B+ model train on 80 GB cards.

Both reduce gradients as a mean over ranks, so `train/update.py` is the same code for either; this
module hides the three places where they differ: gradient sync during accumulation, reading the full
weights (a collective under FSDP: every rank must call it), and the optimizer state, which a
checkpoint always stores in the plain `torch.optim` layout so that local, DDP and FSDP runs resume
from each other's checkpoints.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Literal

import torch

from rlfactory_nb.engines.build import cpu_state
from rlfactory_nb.engines.logprobs import causal_lm
from rlfactory_nb.models.precision import Precision, fsdp_policy

Strategy = Literal["ddp", "fsdp"]


def wrap(
    module: torch.nn.Module, strategy: Strategy, world_size: int, device: torch.device, precision: Precision
) -> torch.nn.Module:
    """The module to train: `module` itself (one rank), DDP around it, or `module` sharded in place.
    Under FSDP the float32 shards are gathered in the compute dtype and gradients reduced in float32
    (`rlfactory_nb.models.precision`); DDP reduces the float32 gradients autocast leaves."""
    if strategy == "fsdp":
        return _fully_shard(module, precision)
    if world_size == 1:
        return module
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(module, device_ids=[0] if device.type == "cuda" else None)


def shard_reference(module: torch.nn.Module, strategy: Strategy, precision: Precision) -> torch.nn.Module:
    """The frozen reference model, sharded like the policy under FSDP (its forward gathers layers)."""
    return _fully_shard(module, precision) if strategy == "fsdp" else module


def _fully_shard(module: torch.nn.Module, precision: Precision) -> torch.nn.Module:
    """Shard in place: each decoder layer its own unit (one all-gather per layer keeps only a
    layer's full weights alive), the root takes the rest (embeddings, tied output layer, norm)."""
    from torch.distributed.fsdp import fully_shard

    policy = fsdp_policy(precision)
    for layer in _decoder_layers(module):
        fully_shard(layer, mp_policy=policy)
    fully_shard(module, mp_policy=policy)
    return module


def _decoder_layers(module: torch.nn.Module) -> list[torch.nn.Module]:
    """Transformers causal LMs keep their blocks in `model.layers` (Qwen3, Llama, Mistral, ...),
    under peft's wrapper for a LoRA model."""
    inner = getattr(causal_lm(module), "model", None)
    layers = getattr(inner, "layers", None)
    return list(layers) if layers is not None else []


@contextlib.contextmanager
def gradient_sync(model: torch.nn.Module, enabled: bool) -> Iterator[None]:
    """Skip the gradient all-reduce (DDP) or reduce-scatter (FSDP) on all but a mini-batch's last
    micro-batch; the last one reduces the accumulated sum once."""
    if enabled:
        yield
    elif hasattr(model, "no_sync"):  # DDP
        with model.no_sync():
            yield
    elif hasattr(model, "set_requires_gradient_sync"):  # FSDP2
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
    else:  # one process: nothing to sync
        yield


def is_sharded(model: torch.nn.Module) -> bool:
    return hasattr(model, "set_requires_gradient_sync")


def full_state_dict(model: torch.nn.Module, on_cpu: bool = True) -> dict[str, torch.Tensor]:
    """Every weight, whole (on CPU, or left on the device for a broadcast). Under FSDP a collective:
    all ranks call it; with `on_cpu` only rank 0 gets the tensors (the others an empty dict)."""
    if is_sharded(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=on_cpu)
        return get_model_state_dict(model, options=options)
    module = getattr(model, "module", model)  # DDP keeps the model in .module
    return cpu_state(module) if on_cpu else module.state_dict()


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer state in plain torch layout (parameters by index). Under FSDP a collective that
    fills rank 0's result only."""
    if not is_sharded(model):
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    full = get_optimizer_state_dict(model, optimizer, options=options)
    return by_index(full) if full else {}  # ranks other than 0 get nothing


def load_optimizer_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> None:
    """Load a plain-layout optimizer state; under FSDP each rank keeps its own shard of it."""
    if not is_sharded(model):
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    names = [name for name, _ in model.named_parameters()]
    options = StateDictOptions(full_state_dict=True)
    set_optimizer_state_dict(model, optimizer, by_name(state, names), options=options)


def by_index(state: dict[str, Any]) -> dict[str, Any]:
    """Parameters named by FQN (torch.distributed.checkpoint's layout) -> by position (torch.optim's).

    >>> by_index({"state": {"b": {"step": 1}}, "param_groups": [{"lr": 0.1, "params": ["a", "b"]}]})
    {'state': {1: {'step': 1}}, 'param_groups': [{'lr': 0.1, 'params': [0, 1]}]}
    """
    index: dict[str, int] = {}
    groups = []
    for group in state["param_groups"]:
        positions = [index.setdefault(name, len(index)) for name in group["params"]]
        groups.append({**group, "params": positions})
    return {"state": {index[name]: value for name, value in state["state"].items()}, "param_groups": groups}


def by_name(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The inverse of `by_index`, given the parameter names in the optimizer's order.

    >>> by_name({"state": {1: {"step": 1}}, "param_groups": [{"lr": 0.1, "params": [0, 1]}]}, ["a", "b"])
    {'state': {'b': {'step': 1}}, 'param_groups': [{'lr': 0.1, 'params': ['a', 'b']}]}
    """
    groups = [{**group, "params": [names[i] for i in group["params"]]} for group in state["param_groups"]]
    return {"state": {names[i]: value for i, value in state["state"].items()}, "param_groups": groups}
