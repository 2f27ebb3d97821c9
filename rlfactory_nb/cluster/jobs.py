"""`TrainingJob`: a training run on the cluster, while the kernel stays free.

`launch` (cluster/launcher.py) starts the driver actor and returns a TrainingJob at once. The job is a
handle: every property is read when asked, from the actor while it lives and from `runs/<name>/`
(train/run_folder.py) otherwise, so a finished run opens without Ray and
`TrainingJob.attach(name, cluster)` reconnects after a kernel restart.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlfactory_nb._views import view_of
from rlfactory_nb.cluster.engines import start_engine
from rlfactory_nb.cluster.ray_cluster import JOB_PREFIX, NAMESPACE, Cluster
from rlfactory_nb.cluster.tool_cache import SharedToolCache
from rlfactory_nb.config import RunConfig, load_yaml
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.data.rows import Row
from rlfactory_nb.errors import (
    ClusterError,
    DriverTimeout,
    JobFailed,
    JobTimeout,
    PathNotFoundError,
)
from rlfactory_nb.models.checkpoint import RUN_CONFIG, parse_step
from rlfactory_nb.models.files import model_folder
from rlfactory_nb.runtime import Runtime
from rlfactory_nb.signing import CONFIG_SIGNATURE_FILE, check_config_signature, names_code
from rlfactory_nb.storage import Storage, is_uri, join
from rlfactory_nb.train.run_folder import TERMINAL_STATES, Checkpoints, RunFolder
from rlfactory_nb.types import Message, Trajectory

if TYPE_CHECKING:
    import pandas as pd

ACTOR_TIMEOUT_S = 5.0
"""how long a read waits for the driver before answering from disk (a starting actor is busy)"""
ATTACH_TIMEOUT_S = 60.0
"""how long `TrainingJob.attach` waits for a live driver to say where its run folder is (a busy
cluster or a starting driver answers late); past it, a DriverTimeout says to try again or wait longer"""
SNAPSHOT_TIMEOUT_S = 600.0
"""how long `job.engine()` waits for the driver's copy of the weights (it waits for a starting run to
load its model, and for the policy update in flight to end)"""


def _location(text: str | Path) -> str | Path:
    """A run folder or checkpoint named by the driver: a URI stays a str, a path becomes a Path."""
    return text if is_uri(text) else Path(text)


def _live_driver(name: str, timeout_s: float) -> tuple[Any, dict[str, Any]] | None:
    """The driver actor of job `name` and its status, or None when it has none; DriverTimeout when it
    does not answer within `timeout_s`, JobFailed when it died (its start failed: the cause is Ray's
    error, the driver's traceback included)."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError

    try:
        actor = ray.get_actor(JOB_PREFIX + name, namespace=NAMESPACE)
        return actor, ray.get(actor.status.remote(), timeout=timeout_s)
    except ValueError:  # no actor of that name
        return None
    except RayActorError as error:
        raise JobFailed(f"job {name!r}: its driver died: {error}") from error
    except GetTimeoutError as error:
        raise DriverTimeout(
            f"job {name!r}: its driver did not answer within {timeout_s:g} s; the cluster is busy or "
            f"the driver is still starting. Attach again, or pass a longer timeout_s "
            f"(TrainingJob.attach({name!r}, cluster, timeout_s=300))"
        ) from error


class TrainingJob:
    """A handle on one run; see the module docstring."""

    def __init__(
        self,
        name: str,
        run_dir: str | Path,
        actor: Any = None,
        cluster: Cluster | None = None,
        shipped: str | None = None,
    ):
        self.name = name
        self.folder = RunFolder(run_dir)
        self.cluster = cluster
        self._actor = actor
        self.shipped = shipped
        """what `launch` shipped, in one line (cluster/shipment.py); None for an attached job"""

    @classmethod
    def attach(
        cls,
        name: str,
        cluster: Cluster | None = None,
        output_dir: str | Path = "runs",
        timeout_s: float = ATTACH_TIMEOUT_S,
    ) -> TrainingJob:
        """The job `name`: its live driver when `cluster` has one, else the run folder (`output_dir`:
        a local folder or a storage URI). A live driver is asked where its run folder is, for at most
        `timeout_s` seconds: one that does not answer in time (a busy cluster, a driver still
        starting) is a DriverTimeout, which says to try again or pass a longer `timeout_s`."""
        run_dir = join(output_dir if is_uri(output_dir) else Path(output_dir).resolve(), name)
        live = _live_driver(name, timeout_s) if cluster is not None else None
        actor = None
        if live is not None:
            actor, status = live
            run_dir = _location(status.get("run_dir") or run_dir)
        if actor is None and not RunFolder(run_dir).exists():
            raise PathNotFoundError(
                f"no job named {name!r}: no driver on the cluster and no run folder {run_dir} "
                "(pass output_dir= if the run was written elsewhere)"
            )
        return cls(name, run_dir, actor, cluster)

    # ------------------------------------------------------------------ reading

    @property
    def run_dir(self) -> Path | str:
        """The run folder: a local Path, or a URI (str) for a run on storage."""
        return self.folder.path

    def info(self) -> dict[str, Any]:
        """The driver's state record: state, kind, step, steps, reward, error."""
        live = self._ask("status")
        return live if live is not None else self.folder.status()

    @property
    def kind(self) -> str:
        """What the job trains: "grpo", or "sft" (`launch(..., kind="sft")`); a run from before kinds: grpo."""
        return str(self.info().get("kind", "grpo"))

    @property
    def status(self) -> str:
        return str(self.info().get("state", "unknown"))

    @property
    def done(self) -> bool:
        return self.status in TERMINAL_STATES

    def metrics(self) -> list[dict[str, Any]]:
        """Every metrics row so far (one per step; see train/metrics.py for the keys)."""
        live = self._ask("metrics")
        return live if live is not None else self.folder.metrics()

    def metrics_frame(self) -> pd.DataFrame:
        """`metrics()` as a pandas DataFrame indexed by step, one column per metric key (NaN where a
        step has no such value, e.g. held-out evals between `grpo.eval_every` steps)."""
        import pandas as pd

        rows = self.metrics()
        return pd.DataFrame(rows).set_index("step") if rows else pd.DataFrame(index=pd.Index([], name="step"))

    def latest_trajectories(self, k: int = 8) -> list[Trajectory]:
        live = self._ask("trajectory_records", k)
        records = live if live is not None else self.folder.trajectory_records(k)
        return [Trajectory.from_dict(record) for record in records]

    def logs(self, tail_chars: int = 20_000) -> str:
        live = self._ask("logs", tail_chars)
        return live if live is not None else self.folder.logs(tail_chars)

    @property
    def checkpoints(self) -> Checkpoints:
        """Complete checkpoints, oldest first: Hugging Face folders, or their URIs for a run on storage
        (`rf.evaluate`, `rf.Policy.load` and `cluster.engine` take either; a URI is fetched into the node's cache, again when it changes)."""
        live = self._ask("checkpoints")
        return Checkpoints((_location(p) for p in live), self.folder.path) if live is not None else self.folder.checkpoints()

    def tokenizer(self) -> Any:
        """The run's tokenizer, to decode token strips of its trajectories."""
        from transformers import AutoTokenizer

        checkpoints = self.checkpoints
        if checkpoints:
            return AutoTokenizer.from_pretrained(str(model_folder(checkpoints[-1])), trust_remote_code=False)
        model = self.folder.status().get("model") or "tiny-calculator"
        return AutoTokenizer.from_pretrained(str(model_folder(model)), trust_remote_code=False)

    # ------------------------------------------------------------------ control

    def stop(self, timeout_s: float = 300.0) -> str:
        """Finish the step in flight, checkpoint it, and stop; after `timeout_s` the driver is killed."""
        if self._actor is None or self.done:
            return self.status
        self._ask("stop")
        try:
            return self.wait(timeout_s, raise_on_failure=False)
        except TimeoutError:
            import ray

            ray.kill(self._actor, no_restart=True)
            self._actor = None
            self.folder.write_status(state="killed", error=f"did not stop within {timeout_s:g} s; killed")
            return "killed"

    def wait(self, timeout_s: float | None = None, poll_s: float = 1.0, raise_on_failure: bool = True) -> str:
        """Block until the job ends; returns its final state. Raises JobFailed when it failed."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            info = self.info()
            state = info.get("state")
            if state in TERMINAL_STATES:
                if state == "failed" and raise_on_failure:
                    raise JobFailed(f"job {self.name!r} failed:\n{info.get('error')}")
                return str(state)
            if self._actor is None and state not in ("pending", "starting", "running", "stopping"):
                raise ClusterError(f"job {self.name!r} has no driver and its last state is {state!r}")
            if deadline is not None and time.monotonic() > deadline:
                raise JobTimeout(f"job {self.name!r} still {state} after {timeout_s:g} s")
            time.sleep(poll_s)

    # ------------------------------------------------------------------ the live policy

    def engine(self, kind: str | None = None, num_gpus: float = 0, **options: Any) -> Any:
        """A rollout engine on the cluster with the job's current weights (a `ClusterEngine` whose
        `version` is the step they come from); a finished job's: its last checkpoint.

        It is a snapshot copied at the request, not the job's own engine: training pauses only for
        the copy (docs/decisions.md has the figure) and the engine keeps these weights while the job
        moves on; ask again for newer ones. `kind`: the job's engine kind unless given; `options` as
        for `cluster.engine`."""

        self._need_ray("job.engine()")
        snapshot = self._snapshot() if self._actor is not None and not self.done else None
        if snapshot is not None:
            kind = kind or snapshot["kind"]
            engine_args = snapshot["engine_args"] if kind == snapshot["kind"] else {}
            return start_engine(
                snapshot["source"],
                kind,
                num_gpus=num_gpus,
                weights=snapshot["weights"][0],
                version=snapshot["version"],
                label=f"{self.name}-step{snapshot['version']}",
                **{**engine_args, **options},
            )
        checkpoints = self.checkpoints
        if not checkpoints:
            raise ClusterError(
                f"job {self.name!r} is {self.status} and left no checkpoint: there are no weights to serve "
                "(grpo.checkpoint_every and the final step write checkpoints)"
            )
        latest = checkpoints[-1]
        step = parse_step(str(latest).rstrip("/").rsplit("/", 1)[-1]) or 0
        return start_engine(
            str(latest),
            kind or "hf",
            num_gpus=num_gpus,
            version=step,
            label=f"{self.name}-step{step}",
            **options,
        )

    def stepper(
        self,
        prompt: str | Sequence[Message] | Row | None = None,
        trust_run_objects: bool = False,
        **options: Any,
    ) -> Any:
        """A RolloutStepper on `job.engine(**options)`, with the run's tools, parser and limits;
        `prompt` (text, messages or a dataset row) defaults to the run's first training row. Each turn
        shows the policy version (step) that sampled it. trust_run_objects: use the run folder's
        objects, and the config its last checkpoint kept, even without this user's signature
        (signing.py): both name code the stepper runs."""
        cfg = self.config(trust_run_objects)
        objects = RunObjects.load(self.run_dir, trust_run_objects)
        shared = SharedToolCache(cfg.name) if not self.done else None  # a live job's tool cache, joined
        runtime = Runtime.from_config(cfg, objects, engine=self.engine(**options), shared_cache=shared)
        return runtime.start_sync().stepper(prompt)

    def config(self, trust_run_objects: bool = False) -> RunConfig:
        """The run's config: the driver's while it lives, else the one saved with the last checkpoint,
        refused (UntrustedRunObjects) unless it carries this user's signature or `trust_run_objects`:
        a run built from it runs the code it names (signing.py)."""
        live = self._ask("run_config")
        if live is not None:
            return RunConfig.from_dict(live)
        checkpoints = self.checkpoints
        store = Storage.at(checkpoints[-1]) if checkpoints else None
        text = store.read_text(RUN_CONFIG) if store is not None else None
        if store is None or text is None:
            raise PathNotFoundError(
                f"job {self.name!r}: no live driver and no checkpoint with {RUN_CONFIG} to read its config from"
            )
        where = f"{checkpoints[-1]}/{RUN_CONFIG}"
        cfg = RunConfig.from_dict(load_yaml(text, where) or {})
        if not trust_run_objects:
            check_config_signature(text, store.read_text(CONFIG_SIGNATURE_FILE), where, names_code(cfg))
        return cfg

    def _snapshot(self) -> dict[str, Any] | None:
        """The driver's copy of the current weights, or None when the run has ended meanwhile."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            return ray.get(self._actor.snapshot.remote(), timeout=SNAPSHOT_TIMEOUT_S)
        except RayActorError:
            self._actor = None
            return None
        except GetTimeoutError as error:
            raise JobTimeout(
                f"job {self.name!r}: its driver did not hand over the weights within {SNAPSHOT_TIMEOUT_S:g} s "
                f"(state {self.status}; job.logs() says what it is doing)"
            ) from error

    def _need_ray(self, what: str) -> None:
        import ray

        if not ray.is_initialized():
            raise ClusterError(
                f"{what} runs an engine on a cluster, and this kernel is connected to none: "
                f"TrainingJob.attach({self.name!r}, rf.Cluster.connect(...))"
            )

    def dashboard(self, refresh_s: float = 2.0) -> Any:
        """Live curves and the latest rollouts, refreshing in the background until the job ends (a
        TrainingDashboard widget)."""
        return view_of(self, refresh_s=refresh_s)

    def _ask(self, method: str, *args: Any) -> Any:
        """Call the driver, or None when there is none (gone, or too busy starting to answer)."""
        if self._actor is None:
            return None
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            return ray.get(getattr(self._actor, method).remote(*args), timeout=ACTOR_TIMEOUT_S)
        except GetTimeoutError:
            return None
        except RayActorError:
            self._actor = None  # the driver is gone for good; the folder is the record now
            return None

    def __repr__(self) -> str:
        info = self.info()
        kind = "SFT " if info.get("kind") == "sft" else ""
        step = f"{kind}step {info.get('step', 0)}/{info.get('steps', '?')}"
        shipped = f", {self.shipped}" if self.shipped else ""
        return f"TrainingJob({self.name!r}, {info.get('state')}, {step}, {self.run_dir}{shipped})"
