"""What a cluster job trains: GRPO (`launch(cfg)`) or supervised fine-tuning (`launch(cfg, kind="sft")`).

A job kind is the few things that differ between them; everything else (shipping, the driver actor,
the status record, stopping, snapshots, checkpoints, the run folder, `TrainingJob`) is shared:

    objects    what the kernel may pass (`reward=`, `tools=`, `train_data=`, ...), checked in the cell
    check      what the config names, checked in the cell before anything is submitted
    steps      the run's length, for the status record (`job` shows step 3/8)
    trainer    what the driver runs: an object with the `Trainer` interface (train/loop.py)

An SFT job fine-tunes on `train_data=` (conversation rows, or `rf.Trajectory` objects, which travel
as their dicts) or on `sft.data`, a path that is shipped like every path of the config
(cluster/shipping.py). The trainers are imported in the driver only.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlfactory_nb.cluster.preflight import check_named
from rlfactory_nb.config import RunConfig
from rlfactory_nb.config_sft import NO_SFT_DATA
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.data.rows import Row, load_rows, read_records
from rlfactory_nb.errors import ConfigError, DatasetError, RegistryKeyError
from rlfactory_nb.storage import is_uri
from rlfactory_nb.train.run_folder import TRAJECTORIES
from rlfactory_nb.types import Trajectory


@dataclass(frozen=True)
class JobKind:
    name: str
    objects: Callable[..., RunObjects]
    """(reward, tools, train_data, eval_data, env, agent) -> the objects that travel; mistakes named"""
    check: Callable[[RunConfig, RunObjects, bool], None]
    """(cfg, objects, resume): raises ConfigError for what the run could not use"""
    steps: Callable[[RunConfig], int]
    trainer: Callable[[RunConfig, RunObjects | None, Path, Any], Any]
    """(cfg, objects, run_dir, shared tool cache) -> the trainer the driver starts and runs"""


def _grpo_trainer(cfg: RunConfig, objects: RunObjects | None, run_dir: Path, tool_cache: Any) -> Any:
    from rlfactory_nb.train.loop import Trainer  # torch and the trainer load in the driver only

    return Trainer(cfg, objects=objects, run_dir=run_dir, shared_tool_cache=tool_cache)


def _sft_trainer(cfg: RunConfig, objects: RunObjects | None, run_dir: Path, tool_cache: Any) -> Any:
    from rlfactory_nb.train.sft_job import SFTJobTrainer  # as GRPO's: the kernel's launch never trains

    return SFTJobTrainer(cfg, objects, run_dir)


def _sft_objects(train_data: Any = None, **others: Any) -> RunObjects:
    given = [f"{name}=" for name, value in others.items() if value is not None]
    if given:
        raise ConfigError(
            f"launch(kind='sft') fine-tunes on train_data= or sft.data alone; {', '.join(given)} "
            "belong to a GRPO job (launch without kind='sft')"
        )
    return RunObjects(train_data=None if train_data is None else sft_rows(train_data))


def sft_rows(data: Any) -> list[Row]:
    """What an SFT job's `train_data=` travels as: trajectories as their dicts (train/sft_data.py
    reads a dict with `prompt_ids` back as one), anything else as rows (data/rows.py), checked here."""
    items = list(data) if isinstance(data, (list, tuple)) else None
    if items and all(isinstance(item, Trajectory) for item in items):
        return [item.to_dict() for item in items]
    return load_rows(data, what="train_data")


def _check_sft(cfg: RunConfig, objects: RunObjects, resume: bool) -> None:
    """The data an SFT job reads, before anything is submitted: `train_data=`, or `sft.data` naming
    a local file whose first row is a conversation or a trajectory, or a folder (a run's, a
    `save_to_disk` one). A resume may find `train_data` kept in the run folder."""
    if objects.train_data is not None:
        return
    data = cfg.sft.data
    if data is None:
        if resume:
            return
        raise ConfigError([NO_SFT_DATA], "launch(kind='sft')")
    problem = _sft_data_problem(data)
    if problem is not None:
        raise ConfigError([f"sft.data: {problem}"], "launch(kind='sft')")


def _sft_data_problem(data: str) -> str | None:
    if is_uri(data):
        return f"{data!r} is a URI; SFT reads a local path (copy it to storage every node mounts)"
    path = Path(data)
    if not path.exists():
        return f"{data!r} does not exist"
    if path.is_dir() and (path / TRAJECTORIES).is_dir():
        return None  # a run folder: train/sft_data.py reads its saved trajectories
    try:
        first = read_records(path, limit=1)
    except DatasetError as error:
        return str(error)
    if not first:
        return f"{data!r} has no rows"
    where, record = first[0]
    if not isinstance(record, dict) or not ({"messages", "prompt_ids"} & record.keys()):
        return f"{where} is neither a conversation ('messages') nor a trajectory ('prompt_ids')"
    return None


JOB_KINDS = {
    "grpo": JobKind("grpo", RunObjects.of, check_named, lambda cfg: cfg.grpo.steps, _grpo_trainer),
    "sft": JobKind("sft", _sft_objects, _check_sft, lambda cfg: cfg.sft.steps, _sft_trainer),
}


def job_kind(name: str) -> JobKind:
    """The kind named `name`; a RegistryKeyError naming the closest one otherwise."""
    if name in JOB_KINDS:
        return JOB_KINDS[name]
    close = difflib.get_close_matches(str(name), list(JOB_KINDS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise RegistryKeyError(f"kind: unknown job kind {name!r}{hint}; known: {', '.join(JOB_KINDS)}")
