"""One Ray of three nodes on this machine for every test here (`ray.cluster_utils.Cluster`; 30-40 s to
start on 2 cores): a head of 1 CPU (the kernel's), node2 of 1 CPU offering {"node2": 1} and node3 of
2 CPUs offering {"node3": 1}, every server on 127.0.0.1. A test may kill and replace node3 (`nodes.replace`;
a test that fails between the two leaves the next test all three, `nodes.restore`);
`node_id` finds a node by its resource, whichever it is now. These tests run in one pytest-xdist
group (tests/conftest.py), on a worker of their own: a process holds one Ray."""

from __future__ import annotations

from typing import Any

import pytest

import rlfactory_nb as rf
from rlfactory_nb.cluster.ray_cluster import _single_node

STORE = 200 * 2**20
CPUS = {"node2": 1, "node3": 2}


class Nodes:
    def __init__(self) -> None:
        from ray.cluster_utils import Cluster as RayNodes

        with _single_node():  # every node's servers on 127.0.0.1
            self.ray_nodes = RayNodes(
                initialize_head=True, connect=False,
                head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False, "object_store_memory": STORE},
            )  # fmt: skip
            self.worker = {name: self._add(name) for name in CPUS}
        self.cluster = rf.Cluster.connect(self.ray_nodes.address)

    def _add(self, name: str) -> Any:
        return self.ray_nodes.add_node(
            num_cpus=CPUS[name], resources={name: 1}, node_ip_address="127.0.0.1", object_store_memory=STORE
        )

    def kill(self, name: str) -> None:
        self.ray_nodes.remove_node(self.worker.pop(name))

    def replace(self, name: str) -> None:
        """A new node offering `name`'s resource (after `kill`)."""
        with _single_node():
            self.worker[name] = self._add(name)

    def restore(self) -> None:
        """Every node back, after a test that killed one failed before replacing it."""
        for name in CPUS:
            if name not in self.worker:
                self.replace(name)

    def node_id(self, name: str) -> str:
        return self.worker[name].node_id

    def shutdown(self) -> None:
        self.cluster.shutdown()
        self.ray_nodes.shutdown()


@pytest.fixture(scope="package")
def package_nodes():
    started = Nodes()
    yield started
    started.shutdown()


@pytest.fixture
def nodes(package_nodes):
    """The package's nodes, all three present whatever the test before did to them."""
    package_nodes.restore()
    return package_nodes
