"""The user's files travel with a job: Ray's `runtime_env` for the training driver.

On a cluster whose nodes do not share the kernel's disk (or one reached with `ray://`), the driver
finds nothing the config names unless it is shipped. `launch` ships:

- the project folder the kernel works in (`working_dir`, default the working directory) as the
  driver's working directory, without `.git`, virtual environments, caches, the run folder and
  model weights (and what `.gitignore` leaves out: Ray honours it). Paths of the config inside it
  become relative, so they mean the same file on the driver's node; a path inside `output_dir`
  (an earlier run that `sft.data` trains on) keeps its absolute path, where the driver writes and
  reads run folders;
- files the config names outside that folder (the tools file, a `file.py:function` reward, dataset
  files and `save_to_disk` folders) as one staged package in `py_modules`; the driver maps their
  paths to where Ray unpacked it;
- modules named by `module:function` (the reward, the tools file's `functions:`) that a fresh
  interpreter on a worker could not import (found only through the kernel's `sys.path`): their file
  or package folder, in `py_modules`. One that has no file to ship fails in the cell, named. An
  installed package (rlfactory_nb itself, editable or not) stays where it is: a copy would arrive
  without the preset weights that `*.safetensors` excludes.

Model weights never travel this way: a preset comes with the package installed on every node, and a
local model folder is named by its absolute path (storage every node mounts). The runtime_env sets
model_files.NO_PRESET_BUILD, so a node missing them fails naming the file and the node instead of
building a preset, and the driver checks the kernel's digest of the model (cluster/driver.py).

Size limit: SHIP_LIMIT_MB (100 MiB) for the project folder and for the staged files, each; past
it `launch` fails in the cell naming the largest files. Put large datasets on storage every node
mounts and name them by that path with `ship_files=False`, or pass rows (`train_data=`).

Symlinks are followed, because Ray's packaging follows them when it zips a folder (and the staging
copy does too): the size check walks the same way and counts what a link reaches, at its apparent
size (a sparse file zips to its full length). A link back to a folder above it would be followed
forever, so a loop fails in the cell, naming the link. The staged package is a temporary folder;
`upload` removes it once Ray has its copy.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rlfactory_nb.config import RunConfig, config_paths
from rlfactory_nb.errors import ShippingError
from rlfactory_nb.models.files import NO_PRESET_BUILD
from rlfactory_nb.tools.config import load_tools_config

SHIP_LIMIT_MB = 100
EXCLUDES = [
    ".git", ".venv", ".venv-openenv", "venv", "__pycache__", ".ipynb_checkpoints", ".pytest_cache", "*.safetensors", "*.bin", "*.pt",
    # ...except the presets rlfactory_nb ships built (5 MB): a job launched from a checkout of this
    # repository imports rlfactory_nb from its working_dir copy (first on PYTHONPATH), and would
    # otherwise find the preset without its weights
    "!/rlfactory_nb/models/presets/built/*/*",
    "!/models/presets/built/*/*",  # the same presets in a copy of the package itself (py_modules)
]
STAGED_PREFIX = "rlfactory_nb_files_"


def runtime_env(cfg: RunConfig, working_dir: str | Path, ship_files: bool = True) -> tuple[dict[str, Any], RunConfig, dict[str, str]]:
    """(runtime_env, the config as the driver should read it, staged files: config key -> name in
    the staged package). See the module docstring."""
    folder = Path(working_dir).resolve()
    excludes = list(EXCLUDES)
    output = Path(cfg.output_dir).resolve()
    if output.is_relative_to(folder) and output != folder:
        excludes.append("/" + str(output.relative_to(folder)))
    _check_size([folder], excludes, f"the project folder {folder}")
    overrides: dict[str, Any] = {}
    outside: dict[str, Path] = {}
    for named in config_paths(cfg):
        if named.kind != "input" or not named.path.exists():
            continue  # the run folder is excluded above; model weights never ship (module docstring)
        path = named.path.resolve()
        if output != folder and path.is_relative_to(output):
            continue  # a run folder (`sft.data: runs/<name>`): not shipped (excluded above), read where runs are
        if path.is_relative_to(folder):
            overrides[named.key] = named.value(path.relative_to(folder))
        elif ship_files:
            outside[named.key] = path
    env: dict[str, Any] = {"working_dir": str(folder), "excludes": excludes, "env_vars": {NO_PRESET_BUILD: "1"}}
    py_modules = [str(path) for path in _modules_to_ship(cfg, folder)]
    staged: dict[str, str] = {}
    if outside:
        _check_size(list(outside.values()), [], "the files the config names outside the project folder")
        package, staged = _stage(outside)
        py_modules.append(str(package))
    if py_modules:
        env["py_modules"] = py_modules
    return env, cfg.replace(overrides) if overrides else cfg, staged


def unstage(cfg: RunConfig, staged: dict[str, str]) -> RunConfig:
    """On the driver: config keys that named staged files, pointed at where Ray unpacked them."""
    if not staged:
        return cfg
    package = next(iter(staged.values())).split("/")[0]
    root = Path(importlib.import_module(package).__file__).parent
    named = {path.key: path for path in config_paths(cfg)}
    return cfg.replace({key: named[key].value(root / name.split("/", 1)[1]) for key, name in staged.items()})


def named_modules(cfg: RunConfig) -> list[str]:
    """Modules the config names as `module:function` (reward, the tools file's `functions:`)."""
    names = []
    where = cfg.reward.function.rpartition(":")[0]
    if where and not where.endswith(".py"):
        names.append(where)
    if cfg.tools.config is not None:
        for function in load_tools_config(cfg.tools.config).functions:
            if isinstance(function.target, str):
                names.append(function.target.partition(":")[0])
    return names


def _modules_to_ship(cfg: RunConfig, folder: Path) -> list[Path]:
    """Files or package folders of named modules a worker could not import by itself."""
    shipped = []
    for name in named_modules(cfg):
        top = name.split(".")[0]
        if _importable_by_workers(top) or importlib.machinery.PathFinder.find_spec(top, [str(folder)]):
            continue
        try:
            spec = importlib.util.find_spec(top)
        except ValueError:  # a module made in memory (no spec): nothing on disk to ship
            spec = None
        if spec is None or spec.origin in (None, "built-in", "frozen"):
            raise ShippingError(
                f"module {name!r} (named in the run config) cannot be imported by the cluster's workers, and "
                "there is no file to ship: make it a file in the project folder, or pass the function itself "
                "(launch(..., reward=fn) or tools=[fn])"
            )
        path = Path(spec.origin)
        shipped.append(path.parent if spec.submodule_search_locations else path)
    return shipped


@functools.cache
def _importable_by_workers(top: str) -> bool:
    """Whether a fresh interpreter, as a worker process starts (without the kernel's `sys.path`
    additions), imports `top`. Its own finders decide, so an editable install counts: the installed
    rlfactory_nb then stays put, presets and all, instead of travelling as a copy."""
    neutral = tempfile.gettempdir()
    probe = f"import importlib.util, sys; sys.path.pop(0); print(importlib.util.find_spec({top!r}) is not None)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=neutral, check=True, timeout=60)
    return out.stdout.strip() == "True"


def _stage(files: dict[str, Path]) -> tuple[Path, dict[str, str]]:
    """Copy `files` into one importable package folder; returns it and key -> package/relative name."""
    digest = hashlib.sha256("\n".join(f"{k}={p}" for k, p in sorted(files.items())).encode()).hexdigest()[:12]
    package = Path(tempfile.mkdtemp()) / f"{STAGED_PREFIX}{digest}"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    staged = {}
    for index, (key, path) in enumerate(sorted(files.items())):
        # a numbered folder each, the file keeping its own name: what a run records names it as the
        # kernel's config does (data/objects.py compares file names on resume)
        name = f"{index}/{path.name}"
        (package / str(index)).mkdir()
        (shutil.copytree if path.is_dir() else shutil.copy2)(path, package / name)
        staged[key] = f"{package.name}/{name}"
    return package, staged


def _check_size(paths: list[Path], excludes: list[str], what: str) -> None:
    sizes = []
    for root in paths:
        files = [root] if root.is_file() else _files(root, excludes)
        sizes += [(file.stat().st_size, file) for file in files]
    total = sum(size for size, _ in sizes)
    if total > SHIP_LIMIT_MB * 2**20:
        largest = ", ".join(f"{file} ({size / 2**20:.0f} MiB)" for size, file in sorted(sizes, reverse=True)[:3])
        raise ShippingError(
            f"{what} is {total / 2**20:.0f} MiB, over the {SHIP_LIMIT_MB} MiB a job ships (largest: {largest}). "
            "Launch from a smaller folder (launch(..., working_dir=...)), list the big files in .gitignore, or "
            "put large datasets on storage every node mounts and launch with ship_files=False"
        )


def _files(root: Path, excludes: list[str]) -> list[Path]:
    """The files under `root` that would ship, following symlinks as Ray's zip does; raises
    ShippingError at a link that leads back to a folder it is inside (it would never end)."""
    names = {pattern for pattern in excludes if "*" not in pattern and not pattern.startswith("/")}
    anchored = {root / pattern[1:] for pattern in excludes if pattern.startswith("/")}
    suffixes = tuple(pattern[1:] for pattern in excludes if pattern.startswith("*"))
    found = []
    pending = [(root, frozenset[tuple[int, int]]())]
    while pending:
        directory, above = pending.pop()
        identity = _identity(directory)
        if identity in above:
            raise ShippingError(
                f"{directory} is a symlink loop (it leads back to a folder above it): shipping follows "
                "symlinks, so remove the link or exclude it in .gitignore"
            )
        with os.scandir(directory) as entries:
            for entry in entries:
                path = Path(entry.path)
                if entry.is_dir():  # follows a link, as Ray's packaging does
                    if entry.name not in names and path not in anchored:
                        pending.append((path, above | {identity}))
                elif entry.is_file() and not entry.name.endswith(suffixes):
                    found.append(path)  # a dangling link is neither: Ray skips it too
    return found


def _identity(directory: Path) -> tuple[int, int]:
    status = directory.stat()
    return status.st_dev, status.st_ino


def upload(env: dict[str, Any]) -> dict[str, Any]:
    """`env` with its local working_dir and py_modules uploaded to the cluster and replaced by their
    gcs:// URIs. Ray uploads local folders itself only for a job's own `ray.init(runtime_env=...)`;
    an actor's runtime_env must name URIs, so this does the same upload for the driver actor (with
    Ray's own functions, honouring .gitignore and the excludes)."""
    if not env:
        return env
    import ray
    from ray._private.runtime_env.py_modules import upload_py_modules_if_needed
    from ray._private.runtime_env.working_dir import upload_working_dir_if_needed

    try:
        scratch = ray._private.worker.global_worker.node.get_runtime_env_dir_path()
        uploaded = upload_py_modules_if_needed(dict(env), include_gitignore=True, scratch_dir=scratch)
        return upload_working_dir_if_needed(uploaded, include_gitignore=True, scratch_dir=scratch)
    finally:
        remove_staged(env)


def remove_staged(env: dict[str, Any]) -> None:
    """Delete the temporary folders `_stage` made for `env`'s py_modules (only those)."""
    for module in env.get("py_modules", []):
        package = Path(module)
        if package.name.startswith(STAGED_PREFIX) and package.parent.parent == Path(tempfile.gettempdir()):
            shutil.rmtree(package.parent, ignore_errors=True)
