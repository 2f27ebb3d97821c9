"""Cluster: the one place a notebook kernel connects to Ray.

`Cluster.connect()` with no address starts a private local Ray sized for this machine: every CPU it
may use, an object store of a tenth of RAM (Ray's default of 30% starves small machines), every
server of it (GCS, raylet, agents, workers, dashboard) listening on 127.0.0.1 only (`start_local`),
and `address="local"` so a stale cluster file in /tmp can never make it join someone else's cluster. `"auto"` joins a cluster started with `ray start` on this
machine and `"ray://host:10001"` a remote one through Ray Client.

Token authentication: clusters started with `ray start` require a token by default. Pass
`token=` (the string) or `token_path=`, or keep it in `~/.ray/auth_token` or `$RAY_AUTH_TOKEN`;
`connect` sets `RAY_AUTH_MODE=token` when a token is given, and turns Ray's authentication error
into one that says where the token goes. Ray's own log lines while connecting stay out of the cell
unless connecting fails (cluster/quiet.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlfactory_nb._views import view_of
from rlfactory_nb.cluster.names import NAMESPACE
from rlfactory_nb.cluster.placement import Placement
from rlfactory_nb.cluster.quiet import quiet_ray_logs
from rlfactory_nb.errors import PathNotFoundError

log = logging.getLogger(__name__)
JOB_PREFIX = "rlfactory-nb:"
"""named training-driver actors are called JOB_PREFIX + run name"""
_GIB = 2**30


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    address: str
    alive: bool
    cpus: float
    gpus: float
    memory_gb: float
    object_store_gb: float


@dataclass(frozen=True)
class ClusterResources:
    """Totals and what is free right now, plus each node."""

    nodes: list[NodeInfo]
    cpus: float
    gpus: float
    memory_gb: float
    object_store_gb: float
    available_cpus: float
    available_gpus: float


def machine_limits() -> tuple[int, int]:
    """(CPUs this process may use, object store bytes) for a local cluster on this machine."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    object_store = int(min(max(total * 0.1, 256 * 2**20), 8 * _GIB))
    return cpus, object_store


class Cluster:
    """A connection to Ray; create with `Cluster.connect`."""

    def __init__(self, address: str, dashboard_url: str | None, local: bool):
        self.address = address
        self.dashboard_url = dashboard_url
        self.local = local
        """True when this kernel started the cluster (it ends with the kernel)"""

    @classmethod
    def connect(
        cls,
        address: str | None = None,
        *,
        num_cpus: int | None = None,
        object_store_memory_gb: float | None = None,
        dashboard: bool = True,
        token: str | None = None,
        token_path: str | Path | None = None,
    ) -> Cluster:
        """Start a local Ray (address None or "local") or join one ("auto", "ray://host:10001"); see
        the module docstring. Connecting again in the same kernel returns the existing connection."""
        import ray

        if ray.is_initialized():
            return cls._current()
        address = None if address == "local" else address
        _set_token(token, token_path)
        try:
            with quiet_ray_logs():  # Ray's token notices and start-up line; shown if connecting fails
                if address is None:
                    cpus, object_store = machine_limits()
                    context = start_local(
                        num_cpus=num_cpus or cpus,
                        object_store_memory=int(object_store_memory_gb * _GIB) if object_store_memory_gb else object_store,
                        include_dashboard=dashboard,
                        namespace=NAMESPACE,
                        log_to_driver=False,  # job output goes to runs/<name>/job.log, not into cells
                    )
                else:
                    context = join(address, namespace=NAMESPACE, log_to_driver=False)
        except Exception as error:
            raise _explain(error, address) from error
        url = getattr(context, "dashboard_url", None) or None
        return cls(address or "local", f"http://{url}" if url and not url.startswith("http") else url, address is None)

    @classmethod
    def _current(cls) -> Cluster:
        import ray

        context = ray.get_runtime_context()
        address = getattr(context, "gcs_address", "") or "connected"
        return cls(address, None, False)

    def resources(self) -> ClusterResources:
        import ray

        nodes = [_node(node) for node in ray.nodes()]
        alive = [node for node in nodes if node.alive]
        free = ray.available_resources()
        return ClusterResources(
            nodes=nodes,
            cpus=sum(n.cpus for n in alive),
            gpus=sum(n.gpus for n in alive),
            memory_gb=sum(n.memory_gb for n in alive),
            object_store_gb=sum(n.object_store_gb for n in alive),
            available_cpus=free.get("CPU", 0.0),
            available_gpus=free.get("GPU", 0.0),
        )

    def jobs(self) -> list[str]:
        """Names of the training jobs (driver actors) alive on the cluster."""
        from ray.util import list_named_actors

        names = list_named_actors(all_namespaces=True)
        return sorted(
            entry["name"][len(JOB_PREFIX) :]
            for entry in names
            if entry.get("namespace") == NAMESPACE and entry["name"].startswith(JOB_PREFIX)
        )

    def placements(self, timeout_s: float = 5.0) -> dict[str, Placement | None]:
        """Where each running job's trainer and actors run (`Placement`, cluster/placement.py), by job
        name, as its driver's status record says; None for a job that has not placed them yet, did
        not answer within `timeout_s`, or does not record them."""
        import ray

        placements: dict[str, Placement | None] = {}
        for name in self.jobs():
            status: Any = None
            with contextlib.suppress(Exception):  # a driver gone or busy: no placement to show
                driver = ray.get_actor(JOB_PREFIX + name, namespace=NAMESPACE)
                status = ray.get(driver.status.remote(), timeout=timeout_s)
            record = status.get("placement") if isinstance(status, dict) else None
            placements[name] = Placement.from_dict(record)
        return placements

    def engine(self, model: Any, kind: str = "hf", num_gpus: float = 0, **options: Any) -> Any:
        """A rollout engine on the cluster (a `ClusterEngine`: cluster/engines.py) serving `model`: a
        Policy of this kernel, a Hugging Face folder the cluster can read, or a preset name. Use it
        wherever a local engine goes (`rf.Agent(..., engine=)`, `rf.evaluate(engine, ...)`). Options:
        num_cpus (default 1), seed, and the engine's own (HFEngine, VLLMEngine). Freed when the
        handle is dropped or closed, or the cluster shuts down."""
        # deferred: engines load torch, a Cluster does not
        from rlfactory_nb.cluster.engines import start_engine

        return start_engine(model, kind, num_gpus=num_gpus, **options)

    def engines(self) -> list[str]:
        """Names of the engine actors alive on the cluster (from `engine` and `job.engine`)."""
        # deferred: engines load torch, a Cluster does not
        from rlfactory_nb.cluster.engines import engine_names

        return engine_names()

    def view(self) -> Any:
        """A notebook widget (ClusterView): nodes, resources, and the jobs running."""

        return view_of(self)

    def shutdown(self) -> None:
        """Disconnect; a local cluster started by this kernel stops, with its jobs."""
        import ray

        ray.shutdown()

    def __repr__(self) -> str:
        where = "local" if self.local else self.address
        dashboard = f", dashboard {self.dashboard_url}" if self.dashboard_url else ""
        return f"Cluster({where}{dashboard})"


def start_local(**options: Any) -> Any:
    """`ray.init` of a private single-node Ray whose servers all listen on 127.0.0.1 only.

    Ray binds its servers to loopback only when the node's IP is a loopback address, and `ray.init`
    replaces a loopback `_node_ip_address` with the machine's IP unless multi-node clusters are off
    (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, read once when Ray is imported): hence the flag is off
    while the node starts. The dashboard, if any, is on 127.0.0.1 too (`dashboard_host`).

    On a busy machine the raylet can give up waiting for its agent processes (Ray allows them about
    15 s to start, and `ray.init` the node 30 s, neither configurable), so a start that times out is
    retried, twice at most: the agents' imports are then warm in the page cache.

    Ray prestarts idle worker processes when the first driver connects. Our actors never use them:
    a job's actors carry its runtime_env, which an idle worker lacks. Each one costs about 5 CPU-s
    on 2 cores, so they are off; the 2026-12-02 suite started 27 that never ran anything."""
    import ray

    options["_system_config"] = {"prestart_worker_first_driver": False, **options.get("_system_config", {})}
    for attempt in range(3):
        try:
            with _single_node():
                return ray.init(address="local", _node_ip_address="127.0.0.1", dashboard_host="127.0.0.1", **options)
        except Exception as error:  # Ray raises a bare Exception for this
            if "timed out during startup" not in str(error) or attempt == 2:
                raise
            log.warning("the local Ray node timed out during startup (a busy machine?); starting it again")
            ray.shutdown()
    raise AssertionError("unreachable")


def join(address: str, **options: Any) -> Any:
    """`ray.init` joining the cluster at `address`. A loopback address is a cluster `start_local`
    started (from another process: a kernel, a test): joining it needs the same single-node flag,
    else Ray looks for its node at the machine's IP and waits forever."""
    import ray

    host = address.removeprefix("ray://").rsplit(":", 1)[0].strip("[]")
    joining_loopback = host in ("127.0.0.1", "localhost", "::1")
    with _single_node() if joining_loopback else contextlib.nullcontext():
        return ray.init(address=address, **options)


@contextlib.contextmanager
def _single_node() -> Iterator[None]:
    from ray._private import ray_constants

    multi_node = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = multi_node


def _node(node: dict[str, Any]) -> NodeInfo:
    resources = node.get("Resources", {})
    return NodeInfo(
        node_id=node.get("NodeID", ""),
        address=node.get("NodeManagerAddress", ""),
        alive=bool(node.get("Alive", False)),
        cpus=resources.get("CPU", 0.0),
        gpus=resources.get("GPU", 0.0),
        memory_gb=resources.get("memory", 0.0) / _GIB,
        object_store_gb=resources.get("object_store_memory", 0.0) / _GIB,
    )


def _set_token(token: str | None, token_path: str | Path | None) -> None:
    """Hand a token to Ray through the environment it reads (this process and the ones it starts)."""
    if token is not None:
        os.environ["RAY_AUTH_TOKEN"] = token
        os.environ["RAY_AUTH_MODE"] = "token"
    elif token_path is not None:
        path = Path(token_path).expanduser()
        if not path.is_file():
            raise PathNotFoundError(f"Cluster.connect(token_path={str(token_path)!r}): no such file")
        os.environ["RAY_AUTH_TOKEN_PATH"] = str(path)
        os.environ["RAY_AUTH_MODE"] = "token"


def _explain(error: Exception, address: str | None) -> Exception:
    text = str(error)
    if type(error).__name__ == "AuthenticationError" or "authentication" in text.lower() or "token" in text.lower():
        return ConnectionError(
            f"Ray at {address or 'local'} rejected the connection: it requires token authentication. Pass "
            "Cluster.connect(address, token=...) or token_path=..., or put the token in ~/.ray/auth_token "
            f"(on the head node: `ray get-auth-token`). Ray said: {text}"
        )
    if address is not None:
        return ConnectionError(
            f"cannot connect to Ray at {address!r}: {text}. Is a cluster running there (`ray status`)? "
            "Use address=None to start a local one."
        )
    return RuntimeError(f"cannot start a local Ray: {text}")
