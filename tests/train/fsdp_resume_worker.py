"""A process of the FSDP resume test (tests/train/test_parallel.py); run as a script.

reference OUT                 one process: two updates; saves the state after the first
                              (weights + optimizer, as a checkpoint stores them) and the weights
                              after the second
fsdp OUT RANK WORLD PORT      a rank of an FSDP group: resumes from the saved first state, runs
                              the second update sharded; rank 0 saves the weights
"""

import os
import sys
from datetime import timedelta
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for tiny_models
from tiny_models import random_qwen3

from rlfactory_nb.train import parallel
from rlfactory_nb.train.batch import build_batch
from rlfactory_nb.train.update import UpdateSettings, policy_update
from rlfactory_nb.types import Trajectory

SETTINGS = UpdateSettings(loss="grpo", mini_batch_size=5, micro_batch_size=2)


def batch(seed: int):
    generator = torch.Generator().manual_seed(seed)
    trajectories = []
    for row in range(5):  # 5 rows over 2 ranks: slices of 3 and 2, micro-batches of 2 and 1 -> 2 each
        response = torch.randint(0, 200, (6 + row,), generator=generator).tolist()
        mask = [1, 1, 0, 0] + [1] * (2 + row)
        trajectory = Trajectory(
            prompt_ids=[5, 6], response_ids=response, loss_mask=mask, logprobs=[-3.0] * sum(mask)
        )
        trajectories.append(trajectory)
    return build_batch(trajectories, [1.0, -0.5, 0.25, -0.75, 0.4], pad_id=0)


def optimizer_for(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-2)


def reference(out: Path) -> None:
    model = random_qwen3(seed=3)
    optimizer = optimizer_for(model)
    policy_update(model, optimizer, batch(1), SETTINGS, step=1)
    torch.save({"weights": model.state_dict(), "optimizer": optimizer.state_dict()}, out / "first.pt")
    policy_update(model, optimizer, batch(2), SETTINGS, step=2)
    torch.save(model.state_dict(), out / "second_reference.pt")


def fsdp(out: Path, rank: int, world: int, port: int) -> None:
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=timedelta(minutes=2),
    )
    first = torch.load(out / "first.pt")
    model = random_qwen3(seed=0)
    model.load_state_dict(first["weights"])
    model = parallel.wrap(model, "fsdp", world, torch.device("cpu"), SETTINGS.precision)
    optimizer = optimizer_for(model)
    parallel.load_optimizer_state(model, optimizer, first["optimizer"])
    policy_update(model, optimizer, batch(2), SETTINGS, step=2, rank=rank, world_size=world)
    state = parallel.full_state_dict(model)
    saved = parallel.optimizer_state(model, optimizer)
    if rank == 0:
        torch.save({"weights": state, "optimizer": saved}, out / "second_fsdp.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.set_num_threads(1)
    mode, out = sys.argv[1], Path(sys.argv[2])
    if mode == "reference":
        reference(out)
    else:
        fsdp(out, *map(int, sys.argv[3:6]))
        # Its results are saved and the group destroyed: leave without interpreter teardown, where a
        # thread torch.distributed left behind once aborted rank 0 ("terminate called without an
        # active exception", exit -6) in a loaded 2-core fresh-clone suite (2026-12-02).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
