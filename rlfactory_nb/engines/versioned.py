"""The policy version rule, written once: which weights a Generation says sampled it.

A weights version is the number of trainer steps the weights hold. An engine serving versioned
weights stamps each Generation with the version it held *when the request was sent* (a weight update
arriving mid-request does not relabel it), and each weight update names the version it brings, or,
naming none, is the next one. An engine nobody versions (None) stays unversioned.

`StampedEngine` applies the rule over any engine: the engine actors wrap theirs in it, and the
trainer's `rlfactory_nb.train.versioned_engine.VersionedEngine` builds on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch

from rlfactory_nb.engines.base import Engine, Generation, SamplingParams


def next_version(current: int | None, named: int | None) -> int | None:
    """The version after a weight update: the one it names, else the one after `current`.

    >>> next_version(3, None), next_version(3, 7), next_version(None, None)
    (4, 7, None)
    """
    if named is not None:
        return named
    return None if current is None else current + 1


def stamp(generation: Generation, version: int | None) -> Generation:
    """`generation` labelled with `version`, the one held when its request was sent."""
    return dataclasses.replace(generation, policy_version=version)


class StampedEngine:
    """The engine contract over `engine`, with `version` stamped on every Generation."""

    def __init__(self, engine: Engine, version: int | None = 0):
        self.engine = engine
        self.version = version
        """the version the engine's weights stand for"""

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        return self.engine.stop_token_ids

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        version = self.version  # read before the request: the rule's "when it was sent"
        return stamp(await self.engine.generate(prompt_ids, sampling), version)

    async def score(self, token_ids: list[int]) -> list[float]:
        return await self.engine.score(token_ids)

    async def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int | None = None) -> None:
        await self.engine.update_weights(state_dict, version)
        self.advance(version)

    def advance(self, version: int | None = None) -> None:
        """Weights `version` (None: the next) now serve: after an update made other than by
        `update_weights` (a broadcast the engine received itself)."""
        self.version = next_version(self.version, version)

    async def sleep(self) -> None:
        await self.engine.sleep()

    async def wake_up(self) -> None:
        await self.engine.wake_up()

    async def close(self) -> None:
        await self.engine.close()
