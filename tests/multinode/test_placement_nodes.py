"""Placement on a real Ray of three nodes (`ray.cluster_utils.Cluster`, conftest.py): PACK, SPREAD
and custom resources put actors where asked, and groups that cannot be placed fail naming them.
The pure parts (plans, errors, the record) are tests/cluster/test_placement.py."""

import time

import pytest

from rlfactory_nb.cluster.placement import locate, reserve
from rlfactory_nb.config_cluster import ClusterConfig
from rlfactory_nb.errors import InsufficientResources


@pytest.fixture
def three_nodes(nodes):
    """The package's three nodes (conftest.py): Ray, and the id of each worker node by its resource."""
    import ray

    return ray, {name: nodes.node_id(name) for name in ("node2", "node3")}


def all_free(ray, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while ray.available_resources().get("CPU", 0) < ray.cluster_resources()["CPU"] and time.monotonic() < deadline:
        time.sleep(0.5)


def place(ray, cluster: ClusterConfig, timeout_s: float | None = None):
    """Reserve `cluster`'s groups and start a Probe per worker and engine in them: (reservation, placement)."""

    class Probe:  # defined here, so Ray ships it by value (the workers cannot import a test module)
        """A stand-in for a policy worker or an engine actor: placement needs only something that runs."""

        def ping(self) -> bool:
            return True

    reservation = reserve(ray, cluster, timeout_s)
    actors = {
        f"policy worker {rank}": reservation.worker_options(rank) for rank in range(cluster.num_workers)
    }
    actors |= {
        f"engine actor {index}": reservation.engine_options(index) for index in range(cluster.num_engines)
    }
    handles = {role: ray.remote(Probe).options(**options).remote() for role, options in actors.items()}
    return reservation, handles, locate(ray, handles, reservation.plans)


def close(ray, reservation, handles) -> None:
    for handle in handles.values():
        ray.kill(handle)
    reservation.remove()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_custom_resources_pin_roles_pack_keeps_workers_together_and_spread_splits_engines(three_nodes):
    ray, ids = three_nodes
    all_free(ray)
    pinned = ClusterConfig(num_workers=2, num_engines=2, cpus_per_worker=0.5, worker_resources={"node3": 0.1})
    reservation, handles, placement = place(ray, pinned)
    try:
        nodes = {row.role: row.node_id for row in placement.actors}
        assert nodes["policy worker 0"] == nodes["policy worker 1"] == ids["node3"], str(placement)
        assert nodes["engine actor 0"] != nodes["engine actor 1"], str(placement)  # SPREAD
        assert (
            placement.node_of("policy worker 1").endswith(" node3") and placement.actors[0].role == "trainer"
        )
        assert placement.groups == [
            "policy workers: PACK, 2 x 0.5 CPU, 0.1 node3",
            "engine actors: SPREAD, 2 x 0.5 CPU",
        ]
    finally:
        close(ray, reservation, handles)

    packed = ClusterConfig(num_workers=2, num_engines=2, cpus_per_worker=0.5, engine_resources={"node3": 0.1})
    reservation, handles, placement = place(ray, packed)
    try:
        nodes = {row.role: row.node_id for row in placement.actors}
        assert nodes["policy worker 0"] == nodes["policy worker 1"], str(placement)  # PACK, unpinned
        assert nodes["engine actor 0"] == nodes["engine actor 1"] == ids["node3"], str(placement)
        assert ray.get([handle.ping.remote() for handle in handles.values()]) == [True] * 4
    finally:
        close(ray, reservation, handles)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_groups_that_cannot_be_placed_fail_naming_them_instead_of_waiting_forever(three_nodes):
    ray, _ = three_nodes
    all_free(ray)  # what earlier tests held is freed a moment after their actors end
    with pytest.raises(
        InsufficientResources, match=r"no node can hold a bundle of engine actors \(1 CPU, 1 node9\)"
    ):
        reserve(ray, ClusterConfig(engine_resources={"node9": 1}))
    # each bundle fits node3, but not both at once: PACK waits for room that never comes
    crowded = ClusterConfig(num_workers=2, cpus_per_worker=1.2, worker_resources={"node3": 0.1})
    with pytest.raises(InsufficientResources) as error:
        reserve(ray, crowded, timeout_s=3)
    message = str(error.value)
    assert "(policy workers: PACK, 2 x 1.2 CPU, 0.1 node3; engine actors: SPREAD, 1 x 1.2 CPU)" in message, (
        message
    )
    assert ": policy workers not placed within 3 s: the room they need is taken" in message, message
    assert " 1 node2 (1 free)" in message and " 1 node3 (1 free)" in message, message  # per node
    assert ray.util.placement_group_table() and all(
        group["state"] == "REMOVED" for group in ray.util.placement_group_table().values()
    )
