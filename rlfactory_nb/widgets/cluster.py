"""ClusterView (`cluster.view()`): nodes, CPUs, GPUs, memory, the training jobs running, and which of
their actors runs on which node (each job's `Placement`, rlfactory_nb/cluster/placement.py)."""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets

from rlfactory_nb.cluster.placement import Placement
from rlfactory_nb.cluster.ray_cluster import Cluster
from rlfactory_nb.widgets._base import StaticFallback, error_area, run_callback
from rlfactory_nb.widgets.registry import register_view


def resources_html(cluster: Any) -> str:
    resources = cluster.resources()
    placements = cluster.placements()
    actors = actors_by_node(placements)
    head = (
        "<tr><th>node</th><th>alive</th><th>CPUs</th><th>GPUs</th><th>memory GB</th><th>object store GB</th>"
        "<th>actors</th></tr>"
    )
    rows = "".join(
        f"<tr><td>{html.escape(n.address)}</td><td>{'yes' if n.alive else 'no'}</td><td>{n.cpus:g}</td>"
        f"<td>{n.gpus:g}</td><td>{n.memory_gb:.1f}</td><td>{n.object_store_gb:.2f}</td>"
        f"<td>{html.escape(', '.join(actors.get(n.node_id, [])))}</td></tr>"
        for n in resources.nodes
    )
    engines = cluster.engines()
    dashboard = f" &middot; Ray dashboard {html.escape(cluster.dashboard_url)}" if cluster.dashboard_url else ""
    return (
        f"<div><b>{html.escape(repr(cluster))}</b>: {resources.cpus:g} CPUs ({resources.available_cpus:g} free), "
        f"{resources.gpus:g} GPUs ({resources.available_gpus:g} free){dashboard}</div>"
        f"<table class='rf-table'>{head}{rows}</table>"
        f"<div>training jobs: {jobs_html(placements) if placements else 'none running'}</div>"
        f"<div>engines: {html.escape(', '.join(engines)) if engines else 'none running'}</div>"
    )


def actors_by_node(placements: dict[str, Placement | None]) -> dict[str, list[str]]:
    """Node id -> "job: role" for every running job's trainer and actors."""
    actors: dict[str, list[str]] = {}
    for job, placement in placements.items():
        for node_id, roles in (placement.by_node() if placement else {}).items():
            actors.setdefault(node_id, []).extend(f"{job}: {role}" for role in roles)
    return actors


def jobs_html(placements: dict[str, Placement | None]) -> str:
    """Each job's name and its placement groups (or that it has not placed its actors yet)."""
    return "; ".join(
        html.escape(f"{job} ({'; '.join(placement.groups) if placement else 'placement not known yet'})")
        for job, placement in placements.items()
    )


@register_view(Cluster)
class ClusterView(StaticFallback, widgets.VBox):
    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.summary = widgets.HTML()
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh")
        self.errors = error_area()
        self.refresh_button.on_click(lambda _: run_callback(self.errors, self.refresh))
        super().__init__([self.summary, self.refresh_button, self.errors])
        self.add_class("rf-cluster-view")
        self.refresh()

    def static_html(self) -> str:
        return self.summary.value

    def refresh(self) -> None:
        self.summary.value = resources_html(self.cluster)
