"""One real local Ray for every test in tests/cluster that needs one (Ray starts in 10-40 s on 2 cores)."""

import pytest

from rlfactory_nb.cluster import Cluster


@pytest.fixture(scope="package")
def cluster(tiny_policy):
    """A local Ray of 2 CPUs, stopped when tests/cluster ends (later tests start their own, with other
    options: a dashboard, fewer CPUs); the preset is built first (on a fresh machine a job would
    otherwise spend its whole time limit building it inside the driver actor)."""
    cluster = Cluster.connect(num_cpus=2, dashboard=False)
    yield cluster
    cluster.shutdown()
