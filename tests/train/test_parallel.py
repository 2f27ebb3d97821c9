"""FSDP resumes from a plain checkpoint and trains exactly like one process.

A checkpoint stores the optimizer state in torch's plain layout whatever the strategy
(`rlfactory_nb.train.parallel`). Two real processes in a gloo group load one written by a single
process, shard it, run the next update (with uneven slices: one rank pads with a zero-weight
micro-batch) and must reach the single process's weights; the state they save must be plain again.
"""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlfactory_nb.engines.weight_sync import free_port

WORKER = Path(__file__).with_name("fsdp_resume_worker.py")


def run(*args: object) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WORKER), *map(str, args)])


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_fsdp_resumes_a_plain_checkpoint_and_matches_one_process(tmp_path):
    assert run("reference", tmp_path).wait(timeout=100) == 0
    port = free_port("127.0.0.1")
    ranks = [run("fsdp", tmp_path, rank, 2, port) for rank in range(2)]
    assert [rank.wait(timeout=100) for rank in ranks] == [0, 0]

    expected = torch.load(tmp_path / "second_reference.pt")
    first = torch.load(tmp_path / "first.pt")
    result = torch.load(tmp_path / "second_fsdp.pt")
    moved = False
    for name, tensor in expected.items():
        assert torch.allclose(result["weights"][name], tensor, atol=1e-5), name
        moved |= not torch.allclose(first["weights"][name], tensor, atol=1e-4)
    assert moved, "the second update did not change the weights"
    # saved in the plain layout again: parameters by index, two AdamW steps taken
    assert sorted(result["optimizer"]["state"]) == sorted(first["optimizer"]["state"])
    assert all(int(state["step"]) == 2 for state in result["optimizer"]["state"].values())
