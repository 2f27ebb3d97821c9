"""Placement across Ray nodes (rlfactory_nb/cluster/placement.py): the groups a config asks for, the
errors when they cannot be placed, the record of where actors went, and, on a real Ray of three
nodes (`ray.cluster_utils.Cluster`), that PACK, SPREAD and custom resources put actors where asked."""

import pytest

from rlfactory_nb.cluster import Cluster
from rlfactory_nb.cluster.placement import (
    ActorPlace,
    Node,
    Placement,
    locate,
    placement_error,
    plan_groups,
    reserve,
    unplaceable,
)
from rlfactory_nb.config import ClusterConfig, RunConfig
from rlfactory_nb.errors import ConfigError, InsufficientResources

# ------------------------------------------------------------------ pure: plans, errors, the record


def test_workers_pack_and_engines_spread_each_bundle_with_its_roles_custom_resources():
    cluster = ClusterConfig(num_gpus=16, worker_resources={"trainer": 1}, engine_resources={"rollout": 0.5})
    workers, engines = plan_groups(cluster)
    assert (workers.role, workers.strategy, engines.role, engines.strategy) == (
        "policy workers", "PACK", "engine actors", "SPREAD",
    )  # fmt: skip
    assert workers.bundles == [{"CPU": 1.0, "GPU": 1.0, "trainer": 1}] * 8
    assert engines.bundles == [{"CPU": 1.0, "GPU": 1.0, "rollout": 0.5}] * 8


def test_on_cpus_a_bundle_asks_for_no_gpu_and_colocation_shares_nothing():
    workers, engines = plan_groups(
        ClusterConfig(num_workers=2, num_engines=3, cpus_per_worker=0.5, colocate=True)
    )
    assert workers.bundles == [{"CPU": 0.5}] * 2 and engines.bundles == [{"CPU": 0.5}] * 3


def test_colocated_gpu_pairs_share_one_whole_gpu_bundle_with_both_roles_resources():
    cluster = ClusterConfig(
        num_gpus=2, colocate=True, worker_resources={"n": 0.5}, engine_resources={"n": 0.25}
    )
    (pairs,) = plan_groups(cluster)
    assert pairs.strategy == "PACK" and pairs.bundles == [{"CPU": 2.0, "GPU": 1.0, "n": 0.75}] * 2
    with pytest.raises(ValueError, match=r"num_workers \(2\) equal to cluster.num_engines \(1\)"):
        plan_groups(ClusterConfig(num_workers=2, num_engines=1, gpus_per_worker=0.5, colocate=True))


def test_groups_no_node_could_hold_are_refused_naming_the_bundle_and_the_nodes():
    nodes = [
        Node("a1b2c3d4e5", "10.0.0.2", {"CPU": 32, "GPU": 8, "node2": 1, "node:10.0.0.2": 1}),
        Node(
            "f6a7b8c9d0", "10.0.0.3", {"CPU": 32, "GPU": 8, "node3": 1}, free={"CPU": 4, "GPU": 0, "node3": 1}
        ),
    ]
    plans = plan_groups(ClusterConfig(num_gpus=16, engine_resources={"node9": 1}))
    reason = unplaceable(plans, nodes)
    assert reason == "no node can hold a bundle of engine actors (1 CPU, 1 GPU, 1 node9)"
    assert (
        unplaceable(plan_groups(ClusterConfig(num_gpus=16, worker_resources={"node3": 0.1})), nodes) is None
    )
    assert "ask for 8 node3 in all, the cluster has 1" in unplaceable(
        plan_groups(ClusterConfig(num_gpus=16, worker_resources={"node3": 1})), nodes
    )
    assert "ask for 18 GPU in all, the cluster has 16" in unplaceable(
        plan_groups(ClusterConfig(num_gpus=18)), nodes
    )
    message = str(placement_error(plans, nodes, reason))
    for part in (
        "policy workers: PACK, 8 x 1 CPU, 1 GPU; engine actors: SPREAD, 8 x 1 CPU, 1 GPU, 1 node9",
        reason,
        "10.0.0.2 (a1b2c3d4): 32 CPU, 8 GPU, 1 node2;",  # Ray's own `node:<ip>` resource left out
        "10.0.0.3 (f6a7b8c9): 32 CPU (4 free), 8 GPU (0 free), 1 node3 (1 free)",
        "cluster.engine_resources",
    ):
        assert part in message, message


def test_the_placement_record_round_trips_through_json_and_names_each_roles_node():
    placement = Placement(
        [
            ActorPlace("trainer", "10.0.0.2", "aaaa1111", {"node2": 1.0}),
            ActorPlace("policy worker 0 of 1", "10.0.0.3", "bbbb2222", {"node3": 1.0}),
            ActorPlace("engine actor 0", "10.0.0.3", "bbbb2222", {"node3": 1.0}),
        ],
        ["policy workers: PACK, 1 x 1 CPU", "engine actors: SPREAD, 1 x 1 CPU"],
    )
    assert Placement.from_dict(placement.to_dict()) == placement
    assert (
        placement.node_of("engine actor 0") == "10.0.0.3 node3"
        and placement.node_of("engine actor 9") is None
    )
    assert placement.by_node() == {
        "aaaa1111": ["trainer"],
        "bbbb2222": ["policy worker 0 of 1", "engine actor 0"],
    }
    lines = str(placement).splitlines()
    assert (
        lines[0]
        == "placement: 3 on 2 node(s); policy workers: PACK, 1 x 1 CPU; engine actors: SPREAD, 1 x 1 CPU"
    )
    assert lines[2] == "  policy worker 0 of 1  10.0.0.3 node3  (bbbb2222)"
    for absent in (None, {}, {"actors": "x"}, {"actors": [{"role": "x"}]}, "text"):
        assert Placement.from_dict(absent) is None


def test_custom_resource_keys_are_checked_naming_the_key():
    with pytest.raises(ConfigError) as error:
        RunConfig.from_dict(
            {"name": "x"}, ["cluster.worker_resources={GPU: 1}", "cluster.engine_resources={n3: 0}"]
        )
    assert "cluster.worker_resources: 'GPU' is Ray's own: set cluster.gpus_per_worker" in str(error.value)
    assert "cluster.engine_resources: 'n3': the amount must be a number >= 0.0001, got 0" in str(error.value)
    cfg = RunConfig.from_dict({"name": "x"}, ["cluster.driver_resources={node2: 1}"])
    assert cfg.cluster.driver_resources == {"node2": 1}


# ------------------------------------------------------------------ a real Ray of three nodes


@pytest.fixture(scope="module")
def three_nodes():
    """A head (1 CPU) and two nodes of 2 CPUs offering {"node2": 1} and {"node3": 1}, one machine. One
    Ray per process: the package's local one (conftest.py) stops first and starts again after."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster as RayNodes

    restart = ray.is_initialized()
    ray.shutdown()
    small = {"object_store_memory": 80 * 2**20}
    nodes = RayNodes(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False, **small}
    )
    ids = {
        name: nodes.add_node(num_cpus=2, resources={name: 1}, **small).node_id for name in ("node2", "node3")
    }
    nodes.wait_for_nodes()
    ray.init(address=nodes.address)
    yield ray, ids
    ray.shutdown()
    nodes.shutdown()
    if restart:
        Cluster.connect(num_cpus=2, dashboard=False)


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
    with pytest.raises(
        InsufficientResources, match=r"no node can hold a bundle of engine actors \(1 CPU, 1 node9\)"
    ):
        reserve(ray, ClusterConfig(engine_resources={"node9": 1}))
    # each bundle fits node3, but not both at once: PACK waits for room that never comes
    crowded = ClusterConfig(num_workers=2, cpus_per_worker=1.5, worker_resources={"node3": 0.1})
    with pytest.raises(InsufficientResources) as error:
        reserve(ray, crowded, timeout_s=3)
    message = str(error.value)
    assert "(policy workers: PACK, 2 x 1.5 CPU, 0.1 node3; engine actors: SPREAD, 1 x 1.5 CPU)" in message, (
        message
    )
    assert ": policy workers not placed within 3 s: the room they need is taken" in message, message
    assert " 1 node2 (1 free)" in message and " 1 node3 (1 free)" in message, message  # per node
    assert ray.util.placement_group_table() and all(
        group["state"] == "REMOVED" for group in ray.util.placement_group_table().values()
    )
