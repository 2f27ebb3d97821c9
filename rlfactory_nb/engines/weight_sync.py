"""Weight sync by broadcast: policy worker 0 sends every tensor to all engines in one process group.

The Ray object store route (worker 0 puts its state dict, each engine reads it) copies the weights
through host memory twice per engine; for a multi-GB model on GPUs a broadcast over NCCL moves them
device to device, once. The group is separate from the workers' training group (which engines are
not part of) and is built without torch.distributed's global state, from a TCPStore and a process
group object, so a process can be in both:

    rank 0            policy worker 0 (hosts the TCPStore)
    rank 1..N         one per engine: the hf engine actor itself, or vLLM's model worker process
                      (through `rlfactory_nb.engines.vllm.WeightSyncExtension`)

Every rank must take part in each broadcast in the same order, so the sender ships the list of
`TensorSpec`s (names, shapes, dtypes) through Ray first and the receivers allocate from it. On CPU the
group uses gloo, which makes this path testable without a GPU.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta

import torch

GROUP_TIMEOUT = timedelta(minutes=5)


@dataclass(frozen=True)
class GroupAddress:
    host: str
    port: int
    world_size: int


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # "float32", "bfloat16", ... (torch dtypes do not survive every RPC layer)

    @classmethod
    def of(cls, name: str, tensor: torch.Tensor) -> TensorSpec:
        return cls(name, tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."))


def free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def open_store(host: str, port: int, world_size: int, rank: int) -> torch.distributed.TCPStore:
    """A process group's rendezvous store, hosted by rank 0 and listening on `host` only.

    Given a host, torch's TCPStore still listens on every interface (`::`), so rank 0 binds the
    socket itself and hands it over (`master_listen_fd`)."""
    import torch.distributed as dist

    listen_fd = None
    if rank == 0:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        listen_fd = socket.create_server((host, port), family=family).detach()  # the store closes it
    return dist.TCPStore(
        host, port, world_size, is_master=rank == 0, timeout=GROUP_TIMEOUT, master_listen_fd=listen_fd
    )


def open_group(address: GroupAddress, rank: int, device: torch.device) -> torch.distributed.ProcessGroup:
    """Join the sync group (blocks until all `world_size` ranks have joined)."""
    import torch.distributed as dist

    store = open_store(address.host, address.port, address.world_size, rank)
    if device.type == "cuda":
        return dist.ProcessGroupNCCL(store, rank, address.world_size)
    return dist.ProcessGroupGloo(store, rank, address.world_size, GROUP_TIMEOUT)


def specs_of(state_dict: Mapping[str, torch.Tensor]) -> list[TensorSpec]:
    return [TensorSpec.of(name, tensor) for name, tensor in state_dict.items()]


def send(
    group: torch.distributed.ProcessGroup, state_dict: Mapping[str, torch.Tensor], device: torch.device
) -> None:
    """Rank 0's side: broadcast each tensor in `specs_of(state_dict)` order."""
    for tensor in state_dict.values():
        group.broadcast(tensor.detach().to(device).contiguous(), 0).wait()


def receive(
    group: torch.distributed.ProcessGroup, specs: list[TensorSpec], device: torch.device
) -> Iterator[tuple[str, torch.Tensor]]:
    """An engine's side: (name, tensor) as each broadcast arrives; consume it fully, in order."""
    for spec in specs:
        tensor = torch.empty(spec.shape, dtype=getattr(torch, spec.dtype), device=device)
        group.broadcast(tensor, 0).wait()
        yield spec.name, tensor
