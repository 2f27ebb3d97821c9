"""An OpenEnv server's frames are bounded (issue 54, item 7): before, the adapter read any size
(`max_size=None`), and a 96 MiB opening frame was accepted and kept. A plain `websockets` server
stands in for a hostile OpenEnv server here; the real server's tests are tests/envs/test_adapters_openenv.py."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("websockets")

from websockets.asyncio.server import serve

from rlfactory_nb.envs.adapters.openenv import MAX_FRAME_BYTES, openenv_env
from rlfactory_nb.errors import EpisodeError


async def answering_reset_with(observation_chars: int):
    """A server whose reset reply carries an observation of `observation_chars` characters."""

    async def handler(socket):
        async for raw in socket:
            if json.loads(raw)["type"] == "reset":
                observation = {"message": "x" * observation_chars}
                await socket.send(json.dumps({"type": "observation", "data": {"observation": observation}}))

    return await serve(handler, "127.0.0.1", 0, max_size=None)


@pytest.mark.parametrize("limit", [None, 1024 * 1024])
async def test_a_frame_over_the_limit_ends_the_episode_naming_the_limit(limit):
    """The default bound (16 MiB) and a configured one (1 MiB) alike; a frame under it still reads."""
    bound = limit or MAX_FRAME_BYTES
    server = await answering_reset_with(bound + 1024)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    options = {"max_frame_bytes": limit} if limit else {}
    factory = openenv_env(url, action=lambda answer: {"message": answer}, **options)
    env = factory()
    try:
        with pytest.raises(EpisodeError) as error:
            await env.reset({"messages": []}, seed=1)
        assert error.value.kind == "reset" and f"max_frame_bytes={bound:,}" in str(error.value)
    finally:
        await env.close()
        server.close()
    small = await answering_reset_with(1000)
    url = f"http://127.0.0.1:{small.sockets[0].getsockname()[1]}"
    env = openenv_env(url, action=lambda answer: {"message": answer}, **options)()
    try:
        opened = await env.reset({"messages": []}, seed=1)
        assert opened.messages[0]["content"] == "x" * 1000
    finally:
        await env.close()
        small.close()


def test_the_limit_must_be_a_positive_number_of_bytes():
    from rlfactory_nb.errors import ConfigError

    with pytest.raises(ConfigError, match="max_frame_bytes"):
        openenv_env("http://127.0.0.1:1", max_frame_bytes=0)()
