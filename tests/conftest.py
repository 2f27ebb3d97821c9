"""Fixtures shared across the suite: the embedded tiny model (built once per cache folder) and the
OpenAI-compatible stub server the judge tests talk to. Also how `make test` spreads the suite over
pytest-xdist workers (`xdist_group_of`)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

# vLLM imports setuptools (through torch.utils.cpp_extension) in the middle of the suite, when some
# earlier test has already imported the standard library's distutils; setuptools' distutils shim then
# asserts and every later vLLM test errors (seen in a whole-suite run, never in one file). Use the
# standard library's distutils throughout (Python 3.11 has it).
os.environ.setdefault("SETUPTOOLS_USE_DISTUTILS", "stdlib")

JUDGE_STUB = Path(__file__).parent / "rewards" / "openai_stub_server.py"
SHARED_GROUPS = {"tests/notebooks/": "notebooks", "tests/cluster/": "ray", "tests/multinode/": "multinode"}
"""folders whose tests share one expensive session- or package-scoped fixture, each kept on one worker"""


def xdist_group_of(nodeid: str) -> str:
    """The worker group of a test (`make test` runs pytest-xdist): each group goes whole to one worker,
    so a fixture shared inside a group is built once, not once per worker.

    - "notebooks": tests/notebooks (Jupyter kernels, papermill, the browser): the session's one
      papermill run of the four notebooks (tests/notebooks/conftest.py) serves all its readers;
    - "ray": tests/cluster: its one package-scoped local Ray (tests/cluster/conftest.py);
    - "multinode": tests/multinode: its one Ray of three nodes (tests/multinode/conftest.py);
    - otherwise the test's module, as `--dist loadscope` groups: module-scoped fixtures (a vLLM
      engine, MCP servers, tests/faults/test_jobs.py's Ray with a dashboard) are built once.

    A test that starts and stops its own Ray (the `cluster__backend="ray"` training tests) may run
    beside another worker's: each worker is its own process, and a local Ray is private to it."""
    module = nodeid.split("::")[0]  # relative to the repository root
    return next((group for folder, group in SHARED_GROUPS.items() if module.startswith(folder)), module)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadgroup` by `xdist_group_of`. xdist's own loadgroup reads `xdist_group` marks by
    renaming each test (item._nodeid), which pytest 9 no longer reads: every test was its own group."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group_of(nodeid)

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker, order the groups so that the longest start first (the scheduler hands them
    out in collection order, with --no-loadscope-reorder): the shared groups, then modules with a
    `slow` test, then the rest. A serial run keeps pytest's order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    slow = {xdist_group_of(item.nodeid) for item in items if item.get_closest_marker("slow")}
    shared = list(SHARED_GROUPS.values())

    def rank(item: pytest.Item) -> int:
        group = xdist_group_of(item.nodeid)
        return shared.index(group) if group in shared else len(shared) + (group not in slow)

    items.sort(key=rank)


@pytest.fixture(scope="session")
def tiny_policy():
    """The tiny-calculator preset (shipped built; built and cached only when its recipe changed)."""
    from rlfactory_nb.models.policy import Policy

    return Policy.load("tiny-calculator")


@pytest.fixture(scope="module")
def shared_ray():
    """One local Ray for a module's in-process `cluster.backend: ray` runs, which find it started
    (`cluster/workers.start_ray`) instead of each starting and stopping their own: a start and stop
    costs about 24 CPU-seconds and 16 s here. Each run removes its actors and reservation when it
    closes. Its 6 logical CPUs fit the largest of those runs."""
    ray = pytest.importorskip("ray")
    from rlfactory_nb.cluster.ray_cluster import start_local

    os.environ.setdefault("RAY_raylet_start_wait_time_s", "120")
    start_local(num_cpus=6, object_store_memory=512 * 2**20, include_dashboard=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def judge_server():
    """tests/rewards/openai_stub_server.py on 127.0.0.1; each request's behaviour is scripted by its
    model name (see that file)."""
    process = subprocess.Popen([sys.executable, str(JUDGE_STUB)], stdout=subprocess.PIPE, text=True)
    port = int(process.stdout.readline())
    yield f"http://127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=5)
