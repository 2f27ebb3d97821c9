"""Placement across Ray nodes (rlfactory_nb/cluster/placement.py): the groups a config asks for, the
errors when they cannot be placed, the record of where actors went, and, on a real Ray of three
nodes (`ray.cluster_utils.Cluster`), that PACK, SPREAD and custom resources put actors where asked."""

import pytest

from rlfactory_nb.cluster.placement import (
    ActorPlace,
    Node,
    Placement,
    placement_error,
    plan_groups,
    unplaceable,
)
from rlfactory_nb.config import RunConfig
from rlfactory_nb.config_cluster import ClusterConfig
from rlfactory_nb.errors import ConfigError

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
