"""Job faults on a real local Ray: the kernel that launched a job dies (the job keeps running and
`TrainingJob.attach` reconnects), and `job.stop()` returns within a bounded time, whether the driver
stops cooperatively or is wedged in a step. Also: Ray's dashboard listens on 127.0.0.1 only.

Slow: one Ray for the module (10-40 s to start on 2 cores), tiny runs of the calculator preset.
"""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from rlfactory_nb.cluster import Cluster, TrainingJob, launch
from rlfactory_nb.config import RunConfig

from .conftest import FAULT_REWARDS, ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
KERNEL = Path(__file__).with_name("kernel.py")


@pytest.fixture(scope="module")
def cluster(tiny_policy):
    """A local Ray with its dashboard; the preset is built first (a job would otherwise build it)."""
    cluster = Cluster.connect(dashboard=True)
    yield cluster
    cluster.shutdown()


def tiny_config(tmp_path, name, steps, **overrides):
    return RunConfig.from_yaml(
        ROOT / "examples/calculator/config.yaml",
        overrides={
            "name": name, "output_dir": str(tmp_path), "tools.config": str(ROOT / "examples/calculator/tools.yaml"),
            "grpo.steps": steps, "grpo.prompts_per_step": 2, "grpo.group_size": 2, "grpo.eval_every": 0,
            "grpo.checkpoint_every": 0, "rollout.max_new_tokens": 24, **overrides,
        },
    )


def wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")


def test_the_dashboard_listens_on_localhost_only(cluster):
    url = urlparse(cluster.dashboard_url)
    assert url.hostname == "127.0.0.1"
    listening = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    addresses = {fields[1].split(":")[0] for fields in listening if fields[3] == "0A" and int(fields[1].split(":")[1], 16) == url.port}
    assert addresses == {"0100007F"}, "the dashboard port is open on an address other than 127.0.0.1"


def test_a_job_outlives_the_kernel_that_launched_it_then_stops_with_a_checkpoint(cluster, tmp_path):
    """Slow: a kernel process joins the module's Ray and launches a job, which trains steps before it is
    stopped."""
    import ray

    cfg = tiny_config(tmp_path, "orphan", 500)
    kernel = subprocess.Popen(
        [sys.executable, str(KERNEL), ray.get_runtime_context().gcs_address, json.dumps(cfg.to_dict())],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        assert kernel.stdout.readline().strip() == "launched orphan"
    finally:
        kernel.send_signal(signal.SIGKILL)
        kernel.wait(timeout=10)

    job = TrainingJob.attach("orphan", cluster, output_dir=tmp_path, timeout_s=300)  # the driver may be loading its model
    assert job._actor is not None, "attach found the live driver"
    wait_for(lambda: len(job.metrics()) >= 2, 300, "two steps after the kernel died")
    started = time.monotonic()
    assert job.stop(timeout_s=120) == "stopped"
    assert time.monotonic() - started < 125
    step = job.info()["step"]
    assert 2 <= step < 500 and job.checkpoints[-1].name == f"step_{step:06d}"
    assert [row["step"] for row in job.metrics()] == list(range(1, step + 1))
    with pytest.raises(FileExistsError, match="resume=True"):
        launch(tiny_config(tmp_path, "orphan", 500), cluster)


def test_attach_to_a_driver_that_does_not_answer_is_a_bounded_driver_timeout(cluster, tmp_path):
    """Before: attach waited a fixed 30 s, then raised ray's own GetTimeoutError, outside the error
    tree (under load, `make test` failed the test above that way). A driver busy past `timeout_s`
    (here: one whose status call sleeps) is now a DriverTimeout that says what to do."""
    import ray

    from rlfactory_nb.cluster.ray_cluster import JOB_PREFIX, NAMESPACE
    from rlfactory_nb.errors import DriverTimeout, JobTimeout

    @ray.remote(num_cpus=0)
    class BusyDriver:
        def status(self) -> dict:
            time.sleep(120)
            return {"state": "running"}

    busy = BusyDriver.options(name=JOB_PREFIX + "busy", namespace=NAMESPACE).remote()
    try:
        started = time.monotonic()
        with pytest.raises(DriverTimeout, match=r"did not answer within 2 s.*longer timeout_s") as raised:
            TrainingJob.attach("busy", cluster, output_dir=tmp_path, timeout_s=2)
        assert time.monotonic() - started < 10
        assert isinstance(raised.value, JobTimeout) and isinstance(raised.value, TimeoutError)
    finally:
        ray.kill(busy, no_restart=True)


def test_attach_to_a_driver_that_dies_starting_is_a_job_failed_with_its_cause(cluster, tmp_path):
    """Before: ray's own ActorDiedError, outside the error tree (a driver whose config its node could
    not read died in __init__ while attach waited for its status)."""
    import ray

    from rlfactory_nb.cluster.ray_cluster import JOB_PREFIX, NAMESPACE
    from rlfactory_nb.errors import JobFailed

    @ray.remote(num_cpus=0, max_restarts=0)
    class FailingDriver:
        def __init__(self):
            time.sleep(3)  # attach finds it while it starts
            raise ValueError("grpo.bogus: unknown key")

        def status(self) -> dict:
            return {"state": "running"}

    failing = FailingDriver.options(name=JOB_PREFIX + "failing", namespace=NAMESPACE).remote()
    try:
        with pytest.raises(JobFailed, match=r"(?s)job 'failing': its driver died: .*grpo\.bogus: unknown key"):
            TrainingJob.attach("failing", cluster, output_dir=tmp_path, timeout_s=60)
    finally:
        ray.kill(failing, no_restart=True)


def test_stop_of_a_driver_wedged_in_a_step_returns_in_bounded_time(cluster, tmp_path):
    """Slow: a job starts on Ray (a driver actor with its model and tools) before it wedges and is stopped."""
    cfg = tiny_config(tmp_path, "wedged", 5, **{"reward.function": f"{FAULT_REWARDS}:hangs", "reward.timeout_s": 3600})
    job = launch(cfg, cluster, linger_s=60)
    wait_for(lambda: job.status == "running", 300, "the driver to start its first step")
    time.sleep(2)  # the first step is now waiting on the hanging reward
    started = time.monotonic()
    assert job.stop(timeout_s=5) == "killed"
    assert time.monotonic() - started < 30
    assert TrainingJob.attach("wedged", output_dir=tmp_path).status == "killed"
    assert "wedged" not in cluster.jobs()
