"""This node, as the model files see it: its name (errors say where a file is missing) and whether
it may build a preset.

Nodes of a cluster never build a preset: the environment variable NO_PRESET_BUILD, set in a job's
runtime_env, turns a missing or partial preset into an error that names the file and the node,
rather than a six-minute rebuild of weights that are not the kernel's. `models.files` (which folder a
name means) and `models.presets` (building one) both ask; neither imports the other for it.
"""

from __future__ import annotations

import os
import socket

from rlfactory_nb.errors import ModelFilesError  # noqa: F401  (re-exported where callers import it)

NO_PRESET_BUILD = "RLFACTORY_NB_NO_PRESET_BUILD"
"""set (to 1) in a job's runtime_env: a preset missing on a node is an error there, never a build"""


def node_name() -> str:
    """This machine, as an error names it."""
    return socket.gethostname()


def forbid_preset_builds() -> bool:
    """True on a node where a missing preset must be an error (a job's driver and workers)."""
    return os.environ.get(NO_PRESET_BUILD, "") not in ("", "0")
