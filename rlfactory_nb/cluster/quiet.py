"""Ray's own log lines stay out of notebook cells unless something fails.

`ray.init` writes its token-authentication notices and "Started a local Ray instance" to stderr, and
each package a job ships adds "Creating a file package ... Pushing ... Successfully pushed": in a
notebook they are red lines under the cell, though nothing is wrong. Around those calls the records
of Ray's Python loggers (the "ray" logger and its children, which Ray gives a stderr handler of its
own) are held back: dropped when the block succeeds, written out in order before the error when it
raises, so a failure still shows what Ray said. Errors are written at once. What the package itself
has to say goes through its own loggers, and a Cluster's and a TrainingJob's repr.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

RAY_LOGGER = "ray"


class _HeldBack(logging.Handler):
    """Keeps records below ERROR; shows the others at once."""

    def __init__(self, targets: list[logging.Handler]):
        super().__init__()
        self.targets = targets
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            self.show([record])
        else:
            self.records.append(record)

    def show(self, records: list[logging.LogRecord]) -> None:
        for record in records:
            for handler in self.targets:
                if record.levelno >= handler.level:
                    handler.handle(record)


@contextlib.contextmanager
def quiet_ray_logs() -> Iterator[None]:
    """Hold back Ray's log records below ERROR while the block runs (see the module docstring)."""
    import ray  # noqa: F401  (its import gives the "ray" logger the handler this swaps out)

    logger = logging.getLogger(RAY_LOGGER)
    handlers = list(logger.handlers)
    held = _HeldBack(handlers)
    for handler in handlers:
        logger.removeHandler(handler)
    logger.addHandler(held)
    try:
        yield
    except BaseException:
        held.show(held.records)
        raise
    finally:
        logger.removeHandler(held)
        for handler in handlers:
            logger.addHandler(handler)
