"""The training driver: a detached, named Ray actor that runs one trainer for a TrainingJob: GRPO's
`Trainer`, or another with its interface, chosen by the job's kind (cluster/job_kinds.py).

Detached so the run survives the kernel that launched it (a kernel restart, a closed laptop lid on
a remote cluster); named (`rlfactory-nb:<run name>`) so `TrainingJob.attach` finds it again. It is
an async actor: training runs as a task on the actor's event loop (the heavy work already happens
in threads), so `status`, `stop` and reads are answered while a step is running.

`snapshot` hands the kernel a copy of the weights being trained (`job.engine()`), taken between two
policy updates: the driver holds a lock over each update (`GuardedBackend`), so a copy is never half
of one step and half of the next, and training waits only while the copy is made.

Stopping is cooperative: `stop` sets the event `Trainer.run` checks between steps; the step in
flight finishes, a checkpoint of it is written, and the driver records "stopped". Everything the
driver prints goes to runs/<name>/job.log, and its state to runs/<name>/job.json.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlfactory_nb.cluster.job_kinds import job_kind
from rlfactory_nb.cluster.shipping import unstage
from rlfactory_nb.cluster.tool_cache import SharedToolCache
from rlfactory_nb.config import RunConfig
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.errors import ModelMismatch
from rlfactory_nb.models.files import ModelDigest, local_model_digest, node_name
from rlfactory_nb.train.run_folder import LOG_FILE, TOOL_RECORD, RunFolder
from rlfactory_nb.train.run_storage import RunUpload, copy_sqlite

if TYPE_CHECKING:  # annotations only: the driver's module loads before torch is needed
    import torch

    from rlfactory_nb.engines.base import Engine
    from rlfactory_nb.train.backends import Backend
    from rlfactory_nb.train.batch import TrainBatch
    from rlfactory_nb.train.loop import Trainer


class TrainingDriver:
    def __init__(
        self,
        config: dict[str, Any],
        resume: bool,
        num_threads: int,
        linger_s: float,
        objects: bytes | None = None,
        staged: dict[str, str] | None = None,
        expected_model: dict[str, str] | None = None,
        kind: str = "grpo",
    ):
        """Ray starts the driver in the shipped project folder (cluster/shipping.py), so the config's
        relative paths mean the launcher's files; `staged` maps the keys of files shipped from
        outside it. `objects`: the kernel's reward, tools and rows, pickled (data/objects.py).
        `expected_model`: the kernel's digest of `model.name` (models/files.py), checked before step 1.
        `kind`: what it trains (cluster/job_kinds.py)."""
        self.cfg = unstage(RunConfig.from_dict(config), staged or {})
        self.kind = job_kind(kind)
        self.expected_model = ModelDigest.from_dict(expected_model) if expected_model else None
        self.folder = RunFolder(self.cfg.run_dir)
        """the run's record, where the kernel reads it: job.json is written there directly"""
        self.local, self.upload = self.folder, None
        """where the trainer writes: the run folder itself, or for a run on storage (a URI) a folder
        on this node whose files `upload` copies there after each step (train/run_storage.py)"""
        if self.folder.remote:
            self.upload = RunUpload.staged(self.cfg.name, self.folder.store, keep_last=self.cfg.grpo.keep_last)
            self.local = RunFolder(self.upload.local)
            if resume:  # the log goes on where the last driver left it
                self.local.path.mkdir(parents=True, exist_ok=True)
                (self.local.path / LOG_FILE).write_bytes(_previous_log(self.folder))
        self._uploading: asyncio.Task | None = None
        self._record_path: Path | None = None
        """the tools' sqlite record (settings.cache_path), copied into a run on storage as TOOL_RECORD"""
        self.objects = objects
        self.resume = resume
        self.linger_s = linger_s
        self.num_threads = num_threads
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._trainer: Trainer | None = None
        self._weights_ready = asyncio.Event()
        """set once the trainer holds its model (or the run ended before it could)"""
        self._capture_output()
        self._start_itself()

    def _start_itself(self) -> None:
        """Queue `start` from here rather than rely on the launcher's call: Ray holds a call to an
        actor that is not up yet in the *caller*, so a kernel that dies right after `launch` would
        take it along and leave the job pending forever. `start` is idempotent."""
        import ray

        ray.get_runtime_context().current_actor.start.remote()

    def _capture_output(self) -> None:
        self.local.path.mkdir(parents=True, exist_ok=True)
        log = open(self.local.path / LOG_FILE, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 (lives with the actor)
        sys.stdout = sys.stderr = log
        handler = logging.StreamHandler(log)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(handler)

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        import torch

        torch.set_num_threads(max(1, self.num_threads))
        steps = self.kind.steps(self.cfg)
        self.folder.write_status(
            state="starting",
            step=0,
            steps=steps,
            pid=os.getpid(),
            error=None,
            run_dir=str(self.folder.path),
            model=self.cfg.model.name,
            node=node_name(),
            working_dir=os.getcwd(),
        )
        objects = RunObjects.loads(self.objects) if self.objects is not None else None
        self._tool_cache = SharedToolCache(self.cfg.name)
        trainer = self._trainer = self.kind.trainer(self.cfg, objects, self.local.path, self._tool_cache)
        try:
            state, error = await self._train(trainer), None
        except Exception:  # noqa: BLE001  (recorded for the kernel, which re-raises it in job.wait)
            state, error = "failed", traceback.format_exc()
            print(error, flush=True)
        finally:
            self._trainer = None  # no weights to snapshot from here on: job.engine() reads the checkpoint
            self._weights_ready.set()
            await trainer.close()
            await self._tool_cache.flush()  # every result recorded before the last copy
        print(f"driver: {state} at step {trainer.step}", flush=True)
        # the end state is written once everything is on storage: a kernel that sees "finished" reads it all
        lost = await self._upload_last()
        if lost is not None:
            state, error = "failed", lost
        self.folder.write_status(state=state, step=trainer.step, **({"error": error} if error else {}))
        await self._linger()

    async def _train(self, trainer: Trainer) -> str:
        """Start and run the trainer; returns the end state ("finished" or "stopped")."""
        self._check_model()
        if self.upload is not None:
            print(f"driver: run stored at {self.folder.path}; training in {self.local.path} on node {node_name()}", flush=True)
            if self.resume:
                step = await asyncio.to_thread(self.upload.pull)
                found = f"checkpoint step {step}" if step else "no checkpoint"
                print(f"driver: resuming from {found} of {self.folder.path}", flush=True)
        await trainer.start(resume=self.resume)
        trainer.backend = GuardedBackend(trainer.backend)
        self._weights_ready.set()
        self._record_path = _record_path(trainer)
        if self._record_path is not None:
            copied = f"; copied to {self.folder.path}/{TOOL_RECORD}" if self.upload is not None else ""
            print(f"driver: tool results recorded to {self._record_path}{copied}", flush=True)
        placement = trainer.backend.placement
        self.folder.write_status(
            state="running", step=trainer.step, placement=placement.to_dict() if placement is not None else None
        )
        self._upload_soon()  # the run's objects (code/) and config on storage before step 1 ends
        result = await trainer.run(on_step=self._on_step, stop_event=self._stop)
        if self._stop.is_set() and result.step < self.kind.steps(self.cfg):
            await self._checkpoint_stopped(trainer)
            return "stopped"
        return "finished"

    def _upload_soon(self) -> None:
        """Start copying the step's files to the run's storage, unless a copy is still under way (the
        next step's, or the last, catches up); training does not wait for it."""
        if self.upload is None or (self._uploading is not None and not self._uploading.done()):
            return
        self._uploading = asyncio.get_running_loop().create_task(asyncio.to_thread(self._copy_up))
        self._uploading.add_done_callback(_report_upload)

    async def _upload_last(self) -> str | None:
        """Everything to storage once the run ended; what failed, when it did (the run is then failed)."""
        if self.upload is None:
            return None
        if self._uploading is not None:
            await asyncio.gather(self._uploading, return_exceptions=True)
        try:
            await asyncio.to_thread(self._copy_up)
            print(f"driver: run folder copied to {self.folder.path}", flush=True)
            self.upload.discard()  # all of it is on storage now: the node's copy goes
            self.local = self.folder  # and the reads while lingering come from there
        except Exception as error:  # noqa: BLE001  (recorded: the files stay in the local folder)
            traceback.print_exc()
            text = f"could not copy the run to {self.folder.path}: {type(error).__name__}: {error}; the files are in {self.local.path} on node {node_name()}"
            print(f"driver: {text}", flush=True)
            return text
        return None

    def _check_model(self) -> None:
        """Record the digest of the model this node resolves `model.name` to; a model other than the
        kernel's (other weights or another tokenizer) fails the job here, before step 1."""
        digest = local_model_digest(self.cfg.model.name)  # never builds a preset here
        self.folder.write_status(model_digest=digest.to_dict() if digest else None)
        print(
            f"driver: model {self.cfg.model.name} on node {node_name()}: {digest or 'a hub id, not cached'}",
            flush=True,
        )
        if digest is None or self.expected_model is None:
            return
        halves = digest.differs_from(self.expected_model)
        if halves:
            raise ModelMismatch(
                f"model {self.cfg.model.name!r} on node {node_name()} is not the one the kernel loaded: its "
                f"{' and '.join(halves)} differ (kernel: {self.expected_model}; here: {digest}). Install the same "
                "package version on every node, or put the model folder on storage they all mount"
            )

    async def _checkpoint_stopped(self, trainer: Trainer) -> None:
        latest = trainer.last_checkpoint
        if trainer.step > 0 and (latest is None or not str(latest).endswith(f"{trainer.step:06d}")):
            await trainer.save_checkpoint()

    def _copy_up(self) -> None:
        """One upload of the run's changed files, with a snapshot of the tool record first."""
        record = self._record_path
        if record is not None and record.is_file():
            copy_sqlite(record, self.local.path / TOOL_RECORD)
        self.upload.push()

    def _on_step(self, row: dict[str, Any]) -> None:
        self.folder.write_status(step=int(row["step"]), reward=row.get("reward/mean"))
        self._upload_soon()

    async def _linger(self) -> None:
        """Stay answerable for a while after the end, then free the CPUs the actor holds."""
        await asyncio.sleep(self.linger_s)
        import ray

        ray.kill(ray.get_runtime_context().current_actor, no_restart=True)

    async def status(self) -> dict[str, Any]:
        status = self.folder.status()
        if self._stop.is_set() and status.get("state") in ("starting", "running"):
            status["state"] = "stopping"
        return status

    async def stop(self) -> None:
        self._stop.set()
        if self.folder.status().get("state") in ("starting", "running"):
            self.folder.write_status(state="stopping")

    async def metrics(self) -> list[dict[str, Any]]:
        return self.local.metrics()

    async def trajectory_records(self, k: int) -> list[dict[str, Any]]:
        return self.local.trajectory_records(k)

    async def logs(self, tail_chars: int) -> str:
        return self.local.logs(tail_chars)

    async def checkpoints(self) -> list[str]:
        """Those the kernel can open: the run folder's (on storage: the ones uploaded, by URI)."""
        return [str(path) for path in self.folder.checkpoints()]

    async def run_config(self) -> dict[str, Any]:
        return self.cfg.to_dict()

    async def snapshot(self) -> dict[str, Any] | None:
        """The current weights as an engine loads them, put in the object store, with what an engine
        actor builds around them; None once the run has ended (its last checkpoint is the record).
        Waits for a policy update in flight to finish, then holds the next one for the copy."""
        import ray

        # deferred: torch loads in the driver actor only
        from rlfactory_nb.cluster.engine_actor import run_engine_start
        from rlfactory_nb.engines.build import cpu_state

        await self._weights_ready.wait()
        trainer = self._trainer
        if trainer is None:
            return None
        guard: GuardedBackend = trainer.backend
        async with guard.lock:
            started = time.perf_counter()
            model = await guard.checkpoint_model()
            weights = ray.put(trainer.setup.engine_weights(cpu_state(model)))
            copy_s = time.perf_counter() - started
            version = max(guard.version, trainer.step)
        start = run_engine_start(self.cfg, trainer.policy, trainer.setup.precision.compute, 0, version)
        print(f"driver: weights of step {version} copied for a kernel's engine in {copy_s:.3f} s", flush=True)
        return {
            "weights": [weights],  # in a list, so Ray hands the kernel the reference, not the tensors
            "version": version,
            "source": start.source,  # a Snapshot: the weights travel beside it
            "kind": self.cfg.model.engine,
            "engine_args": start.options,
            "copy_s": copy_s,
        }


def _previous_log(folder: RunFolder) -> bytes:
    """The stored job.log a resumed driver appends to (its last 64 MiB); a note when it is unreadable
    (a link or FIFO planted in its place is refused, storage.py)."""
    try:
        return folder.store.tail(LOG_FILE, 64 * 1024 * 1024)
    except OSError as error:
        return f"driver: the previous {LOG_FILE} was not copied: {error}\n".encode()


def _record_path(trainer: Trainer) -> Path | None:
    tools = trainer.runtime.tools if trainer.runtime is not None else None
    path = tools.settings.cache_path if tools is not None else None
    return Path(path).resolve() if path else None


def _report_upload(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        traceback.print_exception(task.exception())
        print(
            f"driver: copying to the run's storage failed ({task.exception()}); retried after the next step",
            flush=True,
        )


class GuardedBackend:
    """The trainer's backend with a lock over each policy update, and the step of the last one
    (`version`), so `TrainingDriver.snapshot` copies whole steps; the rest of the `Backend`
    contract is the backend's own."""

    def __init__(self, backend: Backend):
        self._backend = backend
        self.policy = backend.policy
        self.placement = getattr(backend, "placement", None)
        """where the backend's actors run (cluster/placement.py); None for the local backend"""
        self.judge = backend.judge
        self.lock = asyncio.Lock()
        self.version = 0

    @property
    def engine(self) -> Engine:
        return self._backend.engine

    async def update(self, batch: TrainBatch, step: int) -> dict[str, float]:
        async with self.lock:
            metrics = await self._backend.update(batch, step)
            self.version = step
        return metrics

    async def sync_weights(self, version: int | None = None) -> None:
        await self._backend.sync_weights(version)

    async def checkpoint_model(self) -> torch.nn.Module:
        return await self._backend.checkpoint_model()

    async def optimizer_state(self) -> dict[str, Any]:
        return await self._backend.optimizer_state()

    def actors(self) -> dict[str, Any]:
        return self._backend.actors()

    async def close(self) -> None:
        await self._backend.close()
