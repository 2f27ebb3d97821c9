"""A real local Ray: connect with machine limits, launch a short job, watch, attach again. Stopping,
and a kernel that dies while its job runs, are fault cases: tests/faults/test_jobs.py.

Slow (Ray start is 10-40 s on 2 cores): the session's cluster (conftest.py), tiny runs of the calculator preset.
"""

import sqlite3
import time
from pathlib import Path

import pytest

from rlfactory_nb.cluster import Cluster, JobExistsError, TrainingJob, launch
from rlfactory_nb.config import RunConfig
from rlfactory_nb.errors import JobFailed

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def tiny_config(tmp_path, name, steps):
    return RunConfig.from_yaml(
        ROOT / "examples/calculator/config.yaml",
        overrides={
            "name": name, "output_dir": str(tmp_path), "tools.config": str(ROOT / "examples/calculator/tools.yaml"),
            "grpo.steps": steps, "grpo.prompts_per_step": 2, "grpo.group_size": 2, "grpo.eval_every": 0,
            "grpo.checkpoint_every": 0, "rollout.max_new_tokens": 24,
        },
    )


def test_connect_fits_the_machine(cluster):
    resources = cluster.resources()
    assert resources.cpus >= 1 and len(resources.nodes) == 1 and resources.nodes[0].alive
    assert 0.2 < resources.object_store_gb <= 8
    assert Cluster.connect().address  # connecting again reuses the running cluster


def test_launch_returns_at_once_then_trains_checkpoints_and_reattaches(cluster, tmp_path):
    started = time.monotonic()
    job = launch(tiny_config(tmp_path, "short", 2), cluster, linger_s=60)
    assert time.monotonic() - started < 5 and job.status in ("pending", "starting", "running")
    assert "short" in cluster.jobs()
    with pytest.raises(JobExistsError):
        launch(tiny_config(tmp_path, "short", 2), cluster)
    assert job.wait(timeout_s=300) == "finished"
    assert [row["step"] for row in job.metrics()] == [1, 2]
    assert [path.name for path in job.checkpoints] == ["step_000002"]
    assert len(job.latest_trajectories(3)) == 3 and "train short" in job.logs()
    again = TrainingJob.attach("short", cluster, output_dir=tmp_path)
    assert again.status == "finished" and again._actor is not None
    offline = TrainingJob.attach("short", output_dir=tmp_path)
    assert offline.metrics() == job.metrics()



def test_a_tool_server_missing_on_the_drivers_node_fails_the_job_at_start_naming_both(cluster, tmp_path):
    """Tool servers start where the rollouts run (the driver's node), from the shipped files; one whose
    program that node lacks is an error before step 1 naming the server and the node."""
    tools = tmp_path / "tools.yaml"
    tools.write_text("servers:\n  - name: search\n    command: rlfactory-nb-no-such-search-server\n")
    cfg = tiny_config(tmp_path, "no-server", 1).replace({"tools.config": str(tools)})
    job = launch(cfg, cluster, linger_s=5)
    with pytest.raises(JobFailed, match=r"(?s)tool servers failed to start on node \S+ .*search"):
        job.wait(timeout_s=300)
    assert job.metrics() == [] and job.info()["step"] == 0


def test_a_run_on_storage_keeps_its_tool_record_there(cluster, tmp_path):
    """output_dir a URI: the run's files and a copy of the tools' sqlite record (written by the job's
    one tool cache actor) are at the URI; the job reads back from there."""
    tools = tmp_path / "tools.yaml"
    example = (ROOT / "examples/calculator/tools.yaml").read_text()
    tools.write_text(example.replace("settings:\n", f"settings:\n  cache_path: {tmp_path / 'record.sqlite'}\n"))
    uri = f"file://{tmp_path}/store"
    cfg = tiny_config(tmp_path, "recorded", 2).replace({"tools.config": str(tools), "output_dir": uri, "rollout.max_new_tokens": 96})
    job = launch(cfg, cluster, linger_s=5)
    assert job.wait(timeout_s=300) == "finished" and job.run_dir == f"{uri}/recorded"
    assert [row["step"] for row in job.metrics()] == [1, 2] and job.checkpoints == [f"{uri}/recorded/checkpoints/step_000002"]
    record = tmp_path / "store" / "recorded" / "tool_record.sqlite"
    with sqlite3.connect(record) as db:
        calls = db.execute("SELECT COUNT(*) FROM tool_results").fetchone()[0]
    made = sum(row.get("tools/calls", 0) for row in job.metrics())
    assert 0 < calls <= made, (calls, made)
