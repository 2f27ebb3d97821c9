"""A job spread over Ray nodes that share no run folder (issue #31), on one machine: Ray's own
`ray.cluster_utils.Cluster`, a head (the kernel's) and two worker nodes told apart by a custom
resource. The driver is pinned to node2, the policy worker and the engine to node3; the run lives at
a file:// URI in a folder no process is told about otherwise.

After launch the launch folder and the driver's copy of it are deleted; the job trains 2 steps; a
new process attaches; the kernel steps through a rollout and evaluates the last checkpoint by URI;
a resume is cut by killing node3 mid-step (the step fails naming the node) and finishes on a new
node3.

Slow (about 2 minutes): the job starts three times; the three nodes are conftest.py's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rlfactory_nb as rf
from rlfactory_nb._async import run_sync
from rlfactory_nb.cluster import TrainingJob, launch
from rlfactory_nb.config import RunConfig
from rlfactory_nb.errors import JobFailed

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
LONG = 1000
"""the resumed run's length: node3 is killed once it has 3 steps, long before the end"""


@rf.tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression."""
    from rlfactory_nb.tools.servers.calculator import evaluate

    return evaluate(expression)


def wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout_s} s")
        time.sleep(1)


def config(uri: str, steps: int) -> RunConfig:
    return RunConfig.from_yaml(
        ROOT / "examples/calculator/config.yaml",
        overrides={
            "name": "spread", "output_dir": uri, "tools.config": None, "grpo.steps": steps,
            "grpo.prompts_per_step": 2, "grpo.group_size": 2, "grpo.eval_every": 0, "grpo.checkpoint_every": 1, "grpo.keep_last": 2,
            "rollout.max_new_tokens": 24, "cluster.backend": "ray", "cluster.driver_resources": {"node2": 1},
            "cluster.worker_resources": {"node3": 0.5}, "cluster.engine_resources": {"node3": 0.5},
        },
    )  # fmt: skip


def last_step(checkpoints: list) -> int:
    return int(str(checkpoints[-1]).rsplit("_", 1)[-1]) if checkpoints else 0


def attach_elsewhere(address: str, uri: str) -> dict:
    """What a new process (another kernel) reads of the job, through Ray and the run's URI alone."""
    script = (
        "import json, sys, rlfactory_nb as rf\n"
        "from rlfactory_nb.cluster import TrainingJob\n"
        f"job = TrainingJob.attach('spread', rf.Cluster.connect({address!r}), output_dir={uri!r})\n"
        "print(json.dumps({'status': job.status, 'steps': [r['step'] for r in job.metrics()],"
        " 'checkpoints': [str(c) for c in job.checkpoints], 'model': job.config().model.name}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=300, cwd="/")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_job_over_three_nodes_with_its_run_on_storage(nodes, tmp_path, monkeypatch):
    cluster = nodes.cluster
    uri = f"file://{tmp_path}/storage/runs"
    launch_dir = tmp_path / "project"
    launch_dir.mkdir()
    (launch_dir / "notes.txt").write_text("the launcher's folder, deleted once the job is launched")
    monkeypatch.chdir(launch_dir)

    job = launch(config(uri, 2), cluster, tools=[calculator], working_dir=launch_dir, linger_s=20, num_cpus=1)
    shutil.rmtree(launch_dir)
    wait_for(lambda: job.status in ("running", "finished", "failed"), 300, "the driver did not start")
    info = job.info()
    shutil.rmtree(info["working_dir"], ignore_errors=True)  # the driver's copy of the project, on node2
    assert job.wait(timeout_s=400) == "finished", job.logs()

    placed = {row["role"]: row["node_resources"] for row in info["placement"]["actors"]}
    assert "node2" in placed["trainer"] and "node3" in placed["policy worker 0 of 1"] and "node3" in placed["engine actor 0"]
    assert [row["step"] for row in job.metrics()] == [1, 2]
    checkpoints = [f"{uri}/spread/checkpoints/step_000001", f"{uri}/spread/checkpoints/step_000002"]  # keep_last 2
    assert job.checkpoints == checkpoints

    seen = attach_elsewhere(cluster.address, uri)
    assert seen == {"status": "finished", "steps": [1, 2], "checkpoints": checkpoints, "model": "tiny-calculator"}

    stepper = job.stepper()  # the run's tools (kept with the run) on an engine of its last checkpoint
    run_sync(stepper.next_turn())
    assert stepper.trajectory.turns and stepper.trajectory.turns[0].policy_version == 2
    run_sync(stepper.agent.engine.close())
    report = rf.evaluate_sync(job.checkpoints[-1], "synthetic:calculator-heldout", config(uri, 2), limit=2, tools=[calculator])
    assert len(report.trajectories) == 2

    (tmp_path / "kernel").mkdir()
    monkeypatch.chdir(tmp_path / "kernel")  # a kernel in another folder: nothing of the first launch's is left
    resumed = launch(config(uri, LONG), cluster, resume=True, linger_s=20, num_cpus=1)
    # A step's metrics row is written before its checkpoint (loop.py), so wait for the checkpoint.
    wait_for(lambda: last_step(resumed.checkpoints) >= 3, 400, "the resumed job did not checkpoint step 3")
    nodes.kill("node3")  # the worker and the engine go with it, mid-step
    with pytest.raises(JobFailed, match=r"step \d+ failed during .*(policy worker 0 of 1|engine actor 0) on node 127\.0\.0\.1 node3"):
        resumed.wait(timeout_s=300)
    kept = TrainingJob.attach("spread", output_dir=uri).checkpoints
    last = last_step(kept)
    assert 3 <= last < LONG and len(kept) == 2  # grpo.keep_last applies on storage too

    nodes.replace("node3")
    again = launch(config(uri, last + 1), cluster, resume=True, linger_s=20, num_cpus=1)
    assert again.wait(timeout_s=400) == "finished", again.logs()
    assert [row["step"] for row in again.metrics()] == list(range(1, last + 2))
    assert again.checkpoints[-1] == f"{uri}/spread/checkpoints/step_{last + 1:06d}"
