"""What `launch` does in the kernel before anything starts on the cluster: check the config and
give the driver paths that hold wherever it runs.

A mistake in what the config names (a reward function, a tools file, a dataset) is raised here, in
the notebook cell, rather than inside the driver after it took its CPUs. The paths the config names
(`config_paths`) become absolute, so the driver finds them whatever its working directory; those
inside the shipped project folder become relative again there (cluster/shipping.py).
"""

from __future__ import annotations

from pathlib import Path

from rlfactory_nb.config import RunConfig, config_paths
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.models import presets
from rlfactory_nb.models.files import model_folder
from rlfactory_nb.runtime import check_names


def check_named(cfg: RunConfig, objects: RunObjects, resume: bool = False) -> None:
    """Resolve what the config names (`rlfactory_nb.runtime.check_names`) unless `objects` replace it."""
    check_names(cfg, objects, resume)


def absolute_paths(cfg: RunConfig) -> RunConfig:
    """`cfg` with the run folder, the files it reads that exist here, and local model folders (the
    policy's, the judge's) named by absolute paths (model weights never travel with the project folder: storage every node mounts)."""
    overrides = {}
    for named in config_paths(cfg):
        if named.kind == "output" or (named.kind == "input" and named.path.exists()):
            overrides[named.key] = named.value(named.path.resolve())
        elif named.kind == "model" and (folder := _model_folder(named.value(named.path))) is not None:
            overrides[named.key] = str(folder)
    return cfg.replace(overrides)


def _model_folder(name: str) -> Path | None:
    """The absolute folder a model name (model.name, reward.judge.model) resolves to here; None for a
    preset (each node has its own) or a hub id."""
    folder = model_folder(name, log=lambda _: None)
    return folder.resolve() if isinstance(folder, Path) and name not in presets.PRESETS else None
