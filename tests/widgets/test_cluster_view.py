"""ClusterView's summary over a stand-in cluster: each node's actors and each job's placement groups,
read from the drivers' status records (`Cluster.placements`), and a job that has none yet."""

from rlfactory_nb.cluster.placement import ActorPlace, Placement
from rlfactory_nb.cluster.ray_cluster import ClusterResources, NodeInfo
from rlfactory_nb.widgets.cluster import resources_html


class StandInCluster:
    dashboard_url = None

    def resources(self) -> ClusterResources:
        nodes = [
            NodeInfo("n2", "10.0.0.2", True, 32, 8, 900, 10),
            NodeInfo("n3", "10.0.0.3", True, 32, 8, 900, 10),
        ]
        return ClusterResources(nodes, 64, 16, 1800, 20, 40, 0)

    def placements(self) -> dict[str, Placement | None]:
        rows = [
            ActorPlace("trainer", "10.0.0.2", "n2", {"node2": 1}),
            ActorPlace("policy worker 0 of 1", "10.0.0.3", "n3", {"node3": 1}),
            ActorPlace("engine actor 0", "10.0.0.3", "n3", {"node3": 1}),
        ]
        groups = ["policy workers: PACK, 1 x 1 CPU, 1 GPU", "engine actors: SPREAD, 1 x 1 CPU, 1 GPU"]
        return {"qwen3-8b": Placement(rows, groups), "starting": None}

    def engines(self) -> list[str]:
        return []

    def __repr__(self) -> str:
        return "Cluster(auto)"


def test_each_node_lists_the_actors_on_it_and_each_job_its_groups():
    text = resources_html(StandInCluster())
    assert "<td>10.0.0.2</td>" in text and "<td>qwen3-8b: trainer</td>" in text
    assert "<td>qwen3-8b: policy worker 0 of 1, qwen3-8b: engine actor 0</td>" in text
    assert (
        "qwen3-8b (policy workers: PACK, 1 x 1 CPU, 1 GPU; engine actors: SPREAD, 1 x 1 CPU, 1 GPU)" in text
    )
    assert "starting (placement not known yet)" in text and "engines: none running" in text
