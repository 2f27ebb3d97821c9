"""The trainer's view of its engines: `VersionedEngine` wraps the backend's engine, stamps each
Generation with the weights version at the moment its request was sent, checks that the engine
really serves those weights, and measures how busy the engines were.

The version is the number of trainer steps whose weights the engines hold. The trainer sets it once
a weight sync has reached every engine, so a request sent during a sync is stamped with the older
version: every token of a Generation was sampled by its stamped version or a newer one. The stamp is
therefore a lower bound, which is the safe side for a staleness bound (asynchronous GRPO never
trains on a sample older than it says).

Engines that know their own weights version (engine actors: `rlfactory_nb.engines.versioned`) report it in
`Generation.policy_version`; one that reports less than the driver last sent it (an engine that
restarted with its first weights) fails the request with `StaleSamples` rather than let a step train
on samples labelled with weights that did not make them.

Busy time counts the wall time during which at least one request was in flight: the engine's busy
share over a step is `busy_seconds()` difference / the step's wall time.
"""

from __future__ import annotations

import time

from rlfactory_nb.engines.base import Engine, Generation, SamplingParams
from rlfactory_nb.engines.versioned import StampedEngine, stamp
from rlfactory_nb.errors import StaleSamples


class VersionedEngine(StampedEngine):
    """The engine contract over `engine`, with `version` stamped on every Generation (the one
    version rule: `rlfactory_nb.engines.versioned`), checked against what the engine reports."""

    def __init__(self, engine: Engine, version: int = 0):
        super().__init__(engine, version)
        self.sent_version = version
        """the version of the last weights sent to the engines (steps without an update send none)"""
        self._in_flight = 0
        self._busy = 0.0
        self._busy_since = 0.0

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        version, sent = self.version, self.sent_version  # as the request is sent (the version rule)
        self._enter()
        try:
            generation = await self.engine.generate(prompt_ids, sampling)
        finally:
            self._leave()
        reported = generation.policy_version
        if reported is not None and reported < sent:
            raise StaleSamples(
                f"an engine sampled with weights version {reported}, but every engine had received "
                f"version {sent} before the request: it restarted with older weights. The run stops "
                "rather than train on mislabelled samples; resume it from the last checkpoint."
            )
        return stamp(generation, version)

    def busy_seconds(self) -> float:
        """Wall seconds so far with at least one request in flight."""
        return self._busy + (time.perf_counter() - self._busy_since if self._in_flight else 0.0)

    def _enter(self) -> None:
        if self._in_flight == 0:
            self._busy_since = time.perf_counter()
        self._in_flight += 1

    def _leave(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._busy += time.perf_counter() - self._busy_since
