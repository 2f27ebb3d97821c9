"""`rf.launch(cfg, cluster, agent=program)`: an agent program defined in the kernel travels by value
to the job's driver, which serves it the endpoint over the job's engine (issue 42). Slow: real Ray."""

from pathlib import Path

import pytest

import rlfactory_nb as rf
from rlfactory_nb.cluster import launch
from rlfactory_nb.config import RunConfig

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_a_kernel_program_trains_on_the_cluster(cluster, tmp_path):
    async def one_call(row, llm):  # a closure of the test: only a by-value copy can reach the driver
        reply = await llm.client().chat.completions.create(model=llm.model, messages=row["messages"])
        return reply.choices[0].message.content

    cfg = RunConfig.from_yaml(
        ROOT / "examples/calculator/config.yaml",
        overrides={
            "name": "program", "output_dir": str(tmp_path), "tools.config": None, "grpo.steps": 1,
            "grpo.prompts_per_step": 2, "grpo.group_size": 2, "grpo.eval_every": 0, "grpo.checkpoint_every": 0,
            "rollout.max_new_tokens": 16,
        },
    )
    job = launch(cfg, cluster, agent=rf.AgentProgram(one_call), linger_s=5)
    assert job.wait(timeout_s=300) == "finished", job.logs()
    row = job.metrics()[-1]
    assert row["program/calls"] == 4 and row["program/errors"] == 0
    assert (tmp_path / "program" / "code" / "agent.py").read_text().count("async def one_call") == 1
