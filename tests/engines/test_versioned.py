"""The one policy version rule: a Generation carries the version held when its request was sent;
an update names its version, or is the next; an unversioned engine stays unversioned."""

from __future__ import annotations

import asyncio

from rlfactory_nb.engines import Generation, SamplingParams, StampedEngine
from rlfactory_nb.engines.versioned import next_version


class HeldEngine:
    """Answers a request only when `release` is set, so an update can land while it is in flight."""

    stop_token_ids = (0,)

    def __init__(self):
        self.release = asyncio.Event()
        self.updates: list[int | None] = []

    async def generate(self, prompt_ids, sampling):
        await self.release.wait()
        return Generation([1], [-0.1], "length", policy_version=99)

    async def update_weights(self, state_dict, version=None):
        self.updates.append(version)


def test_an_update_names_its_version_or_is_the_next():
    assert next_version(3, None) == 4
    assert next_version(3, 7) == 7
    assert next_version(None, None) is None
    assert next_version(None, 2) == 2


async def test_a_generation_is_stamped_with_the_version_its_request_was_sent_under():
    inner = HeldEngine()
    engine = StampedEngine(inner, version=2)
    request = asyncio.create_task(engine.generate([5], SamplingParams()))
    await asyncio.sleep(0)
    await engine.update_weights({}, 5)  # lands while the request is in flight
    inner.release.set()
    assert (await request).policy_version == 2
    assert (await engine.generate([5], SamplingParams())).policy_version == 5
    assert inner.updates == [5]  # the version reaches the engine with the weights


async def test_versions_advance_by_one_without_a_name_and_none_stays_none():
    engine = StampedEngine(HeldEngine(), version=0)
    await engine.update_weights({})
    engine.advance()
    assert engine.version == 2
    unversioned = StampedEngine(HeldEngine(), version=None)
    await unversioned.update_weights({})
    assert unversioned.version is None
