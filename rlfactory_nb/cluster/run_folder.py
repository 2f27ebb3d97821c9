"""Moved to `rlfactory_nb.train.run_folder` (layer 4: the trainer writes through it too). Kept so
that `from rlfactory_nb.cluster.run_folder import RunFolder` still works; new code imports from train."""

from rlfactory_nb.train.run_folder import JOB_FILE, LOG_FILE, TERMINAL_STATES, RunFolder

__all__ = ["JOB_FILE", "LOG_FILE", "TERMINAL_STATES", "RunFolder"]
