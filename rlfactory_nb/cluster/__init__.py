"""Ray at the edge: connecting a kernel to a cluster, and training jobs that run on it.

The names below are imported on first use. Ray imports this package in every actor process it
starts for a class defined here, so an eager import of `jobs` (torch, transformers, the presets:
about 9 s of CPU) was paid by actors that need none of it, such as the tool cache's.
"""

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(["JobFailed", "TrainingJob"], "jobs"),
    **dict.fromkeys(["JobExistsError", "launch"], "launcher"),
    **dict.fromkeys(["Cluster", "ClusterResources", "NodeInfo"], "ray_cluster"),
}

__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - the lazy table is the single list of public names


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rlfactory_nb.cluster' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"rlfactory_nb.cluster.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
