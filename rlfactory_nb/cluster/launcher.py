"""`launch(cfg, cluster)`: start a training run on the cluster and return its TrainingJob at once.
`launch(cfg, cluster, kind="sft")` starts supervised fine-tuning the same way (cluster/job_kinds.py).

`launch` checks what the config names (reward function, tools file, datasets: cluster/preflight.py)
and the objects from the kernel (`reward=`, `tools=`, `train_data=`, `eval_data=`: data/objects.py),
ships the user's files with the job (cluster/shipping.py), starts the driver actor
(cluster/driver.py) and hands back the handle (cluster/jobs.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlfactory_nb.cluster.driver import TrainingDriver
from rlfactory_nb.cluster.job_kinds import job_kind
from rlfactory_nb.cluster.jobs import ACTOR_TIMEOUT_S, TrainingJob
from rlfactory_nb.cluster.preflight import absolute_paths
from rlfactory_nb.cluster.quiet import quiet_ray_logs
from rlfactory_nb.cluster.ray_cluster import JOB_PREFIX, NAMESPACE, Cluster
from rlfactory_nb.cluster.shipment import shipment_summary
from rlfactory_nb.cluster.shipping import runtime_env, upload
from rlfactory_nb.config import RunConfig
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.errors import JobExistsError, RunFolderExistsError
from rlfactory_nb.models.files import local_model_digest
from rlfactory_nb.rewards.values import RewardFunction
from rlfactory_nb.tools.extra import ExtraTools
from rlfactory_nb.train.run_folder import TERMINAL_STATES, RunFolder


def launch(
    cfg: RunConfig,
    cluster: Cluster | None = None,
    *,
    reward: RewardFunction | Mapping[str, RewardFunction] | None = None,
    tools: ExtraTools | None = None,
    train_data: Any = None,
    eval_data: Any = None,
    agent: Any = None,
    resume: bool = False,
    trust_run_objects: bool = False,
    replace: bool = False,
    num_cpus: float | None = None,
    linger_s: float = 600.0,
    working_dir: str | Path | None = None,
    ship_files: bool = True,
    env: Any = None,
    kind: str = "grpo",
) -> TrainingJob:
    """Start training `cfg` on `cluster` (default: `Cluster.connect(cfg.cluster.address)`); returns at once.

    reward / tools / train_data / eval_data: objects from the kernel used instead of what `cfg` names
    (a reward function or a dict of them, `@rf.tool` functions or a ToolSet, rows or a
    datasets.Dataset); they travel by value and stay in runs/<name>/code/, so a resume needs them
    only to change them. resume: continue runs/<name> from its latest checkpoint (its kept objects
    only when signed by this user, or with trust_run_objects; the config's reward and tools win
    when it names others, data/objects.py). replace: delete
    runs/<name> first. num_cpus: CPUs the driver reserves (default cfg.cluster.cpus_per_worker; also
    its torch threads). linger_s: how long the driver stays answerable after the run ends.
    working_dir: the project folder shipped with the job (default: the working directory);
    ship_files: also ship files the config names outside it (see cluster/shipping.py).
    env: an Environment class or factory, one instance per trajectory, made where the rollouts run
    (it travels by value like the reward; `rollout.env` names one from the config).
    kind: "grpo", or "sft" for supervised fine-tuning (`rf.sft`'s run, docs/sft.md) on `train_data`
    (conversation rows or rf.Trajectory objects) or `sft.data`; it takes no other objects.
    """
    job = job_kind(kind)
    objects = job.objects(  # agent: an rf.AgentProgram
        reward=reward, tools=tools, train_data=train_data, eval_data=eval_data, env=env, agent=agent
    )
    payload = None if objects.empty else objects.dumps()  # what cannot travel fails here, named
    job.check(cfg, objects, resume)  # before Ray is imported: a typo fails in a second
    import ray

    cfg = absolute_paths(cfg)
    folder = RunFolder(cfg.run_dir)
    if folder.remote:
        folder.store.probe()  # unreachable, read-only or no credentials: said here, not at step 1's checkpoint
    expected = local_model_digest(cfg.model.name)  # what the kernel inspects; the driver must train it
    cluster = cluster or Cluster.connect(cfg.cluster.address, object_store_memory_gb=cfg.cluster.object_store_memory_gb)
    env, driver_cfg, staged = runtime_env(cfg, working_dir or Path.cwd(), ship_files)
    _retire_previous(cfg.name, folder)
    _prepare_folder(folder, resume, replace)
    if payload is not None:
        if not folder.remote:  # on storage the driver writes them, with the rest of the run
            objects.save(folder.path, payload, cfg)
    elif resume:
        kept = RunObjects.resumed(folder.path, cfg, trust_run_objects)
        payload = None if kept.empty else kept.dumps()
    folder.write_status(
        state="pending",
        kind=kind,
        step=0,
        steps=job.steps(cfg),
        error=None,
        run_dir=str(folder.path),
        model=cfg.model.name,
    )
    cpus = num_cpus if num_cpus is not None else cfg.cluster.cpus_per_worker
    with quiet_ray_logs():  # Ray's "Creating a file package ... Pushing ..." lines, shown only if it fails
        uploaded = upload(env)
    actor = (
        ray.remote(TrainingDriver)
        .options(
            name=JOB_PREFIX + cfg.name,
            namespace=NAMESPACE,
            lifetime="detached",
            num_cpus=cpus,
            max_restarts=0,
            runtime_env=uploaded,
            resources=dict(cfg.cluster.driver_resources) or None,
        )
        .remote(
            driver_cfg.to_dict(),
            resume,
            max(1, int(cpus)),
            linger_s,
            payload,
            staged,
            expected.to_dict() if expected is not None else None,
            kind,
        )
    )
    return TrainingJob(cfg.name, folder.path, actor, cluster, shipped=shipment_summary(env, staged))


def _retire_previous(name: str, folder: RunFolder) -> None:
    """A finished driver of the same name lingers; a running one is an error. A driver that does not
    answer is still starting (its runtime_env is being set up) when its run folder says it has not
    ended; otherwise it is a leftover, retired."""
    import ray

    try:
        previous = ray.get_actor(JOB_PREFIX + name, namespace=NAMESPACE)
    except ValueError:
        return
    try:
        state = ray.get(previous.status.remote(), timeout=ACTOR_TIMEOUT_S).get("state")
    except Exception:  # noqa: BLE001  (an unresponsive leftover is retired below)
        state = folder.status().get("state", "unknown")
    if state not in TERMINAL_STATES and state != "unknown":
        raise JobExistsError(
            f"a job named {name!r} is {state} on this cluster: TrainingJob.attach({name!r}, cluster) to watch it, "
            "job.stop() to end it, or launch under another name"
        )
    ray.kill(previous, no_restart=True)


def _prepare_folder(folder: RunFolder, resume: bool, replace: bool) -> None:
    if replace and folder.exists():
        folder.store.remove("")
    if not resume and (folder.metrics() or folder.checkpoints()):
        raise RunFolderExistsError(
            f"{folder.path} already holds a run: launch(..., resume=True) to continue it, replace=True to start "
            "over, or choose another name"
        )
