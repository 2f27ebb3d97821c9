"""The trainer's view of its engines: `VersionedEngine` wraps the backend's engine, stamps each
Generation with the weights version at the moment its request was sent, checks that the engine
really serves those weights, and measures how busy the engines were.

The version is the number of trainer steps whose weights the engines hold. The trainer sets it once
a weight sync has reached every engine, so a request sent during a sync is stamped with the older
version: every token of a Generation was sampled by its stamped version or a newer one. The stamp is
therefore a lower bound, which is the safe side for a staleness bound (asynchronous GRPO never
trains on a sample older than it says).

Engines that know their own weights version (engine actors: `EngineActor.version`) report it in
`Generation.policy_version`; one that reports less than the driver last sent it (an engine that
restarted with its first weights) fails the request with `StaleSamples` rather than let a step train
on samples labelled with weights that did not make them.

Busy time counts the wall time during which at least one request was in flight: the engine's busy
share over a step is `busy_seconds()` difference / the step's wall time.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import torch

from rlfactory_nb.engines.base import Generation, SamplingParams


class StaleSamples(RuntimeError):
    """Samples from weights other than their label says, or outside the staleness bound."""


class VersionedEngine:
    """The engine contract over `engine`, with `version` stamped on every Generation."""

    def __init__(self, engine: Any, version: int = 0):
        self.engine = engine
        self.version = version
        """the version the engines' weights stand for (set after each step)"""
        self.sent_version = version
        """the version of the last weights sent to the engines (steps without an update send none)"""
        self._in_flight = 0
        self._busy = 0.0
        self._busy_since = 0.0

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        return self.engine.stop_token_ids

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        version, sent = self.version, self.sent_version
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
        return dataclasses.replace(generation, policy_version=version)

    async def update_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        await self.engine.update_weights(state_dict)

    async def sleep(self) -> None:
        await self.engine.sleep()

    async def wake_up(self) -> None:
        await self.engine.wake_up()

    async def close(self) -> None:
        await self.engine.close()

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

    def __getattr__(self, name: str) -> Any:
        # Engine-specific attributes (an hf engine's model, a vLLM engine's broadcast hooks) stay reachable.
        return getattr(self.__dict__["engine"], name)
