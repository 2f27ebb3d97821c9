"""The OpenEnv adapter against a real openenv 0.10 server (examples/guess/openenv_server.py, run by
uvicorn under the OpenEnv venv that scripts/install_openenv.sh makes): one WebSocket session per
episode, MCP tools listed and called, reward and done from the observations, and every failure of the
server (dies mid-episode, refuses a session, malformed frame, silence) an EpisodeError with the socket
closed and no process left behind."""

from __future__ import annotations

import asyncio
import json

import pytest

from rlfactory_nb.envs.adapters import OpenEnvServer, openenv_env
from rlfactory_nb.envs.adapters.openenv_server import openenv_python
from rlfactory_nb.errors import EpisodeError
from rlfactory_nb.types import ToolCall, Turn

GUESS_APP = "examples.guess.openenv_server:app"


def openenv_available() -> bool:
    import subprocess

    try:
        done = subprocess.run(
            [openenv_python(), "-c", "import openenv.core"], check=False, capture_output=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


pytestmark = pytest.mark.skipif(
    not openenv_available(), reason="no OpenEnv venv: run scripts/install_openenv.sh (make test does)"
)


@pytest.fixture(scope="module")
def server():
    with OpenEnvServer(GUESS_APP) as running:
        yield running


async def play_binary_search(env, low: int = 1, high: int = 100) -> int:
    """Guess with the `guess` tool until the server says correct; the number of guesses."""
    for count in range(1, 20):
        guess = (low + high) // 2
        [result] = await env.call_tools([ToolCall("guess", {"number": guess})])
        assert result.ok, result
        if result.content == "correct":
            return count
        low, high = (guess + 1, high) if result.content == "higher" else (low, guess - 1)
    raise AssertionError("binary search did not finish")


def test_one_session_per_episode_tools_reward_and_done(server):
    async def main():
        factory = openenv_env(server.url)
        first, second = factory(), factory()
        opened = await asyncio.gather(
            first.reset({"messages": [], "reset_args": {"low": 1, "high": 100}}, seed=1),
            second.reset({"messages": [], "reset_args": {"low": 1, "high": 100}}, seed=2),
        )
        assert opened[0].messages[0]["content"].startswith("I picked a number between 1 and 100")
        assert [spec.name for spec in first.tool_specs()] == ["guess"]
        assert first.tool_specs()[0].input_schema["properties"]["number"]["type"] == "integer"
        assert first.reward() is None and not first.done
        # the two sessions hold two games: each is solved on its own
        counts = await asyncio.gather(play_binary_search(first), play_binary_search(second))
        assert all(1 <= c <= 7 for c in counts)
        assert first.done and first.reward() == 1.0 and second.reward() == 1.0
        # after done, no more actions reach the server, and an answer ends the episode
        [late] = await first.call_tools([ToolCall("guess", {"number": 1})])
        assert late.status == "error" and "over" in late.content
        response = await first.respond(Turn(text="done", answer="done"))
        assert response.done and response.reward == 1.0
        assert first.state()["steps"] == counts[0] + 1  # list_tools + the guesses
        for env in (first, second):
            await env.close()
            assert env._socket is None

    asyncio.run(main())


def test_same_seed_same_game_and_tool_errors_are_data(server):
    async def main():
        envs = [openenv_env(server.url)() for _ in range(2)]
        for env in envs:
            await env.reset({"messages": []}, seed=5)
        counts = [await play_binary_search(env) for env in envs]
        assert counts[0] == counts[1]
        for env in envs:
            await env.close()
        env = openenv_env(server.url)()
        await env.reset({"messages": []}, seed=5)
        unknown, bad = await env.call_tools([ToolCall("shout", {}), ToolCall("guess", {"number": "many"})])
        assert unknown.status in ("unknown_tool", "error") and "shout" in unknown.content
        assert bad.status != "ok"
        assert not env.done
        await env.close()

    asyncio.run(main())


def test_model_answer_without_a_call_ends_an_mcp_episode(server):
    async def main():
        env = openenv_env(server.url)()
        await env.reset({"messages": []}, seed=3)
        response = await env.respond(Turn(text="I give up", answer="I give up"))
        assert response.done and response.reward is None
        await env.close()

    asyncio.run(main())


@pytest.mark.slow  # starts its own OpenEnv server: about 5-30 s on 2 busy cores
def test_a_session_beyond_capacity_is_refused_and_a_closed_one_is_released():
    async def main(url):
        factory = openenv_env(url)
        holder = factory()
        await holder.reset({"messages": []}, seed=0)
        refused = factory()
        with pytest.raises(EpisodeError, match="capacity") as caught:
            await refused.reset({"messages": []}, seed=1)
        assert caught.value.kind == "reset"
        await refused.close()
        await holder.close()
        # the closed session's slot is free again
        again = factory()
        await again.reset({"messages": []}, seed=2)
        assert await play_binary_search(again) >= 1
        await again.close()

    with OpenEnvServer(GUESS_APP, env={"GUESS_MAX_SESSIONS": "1"}) as single:
        asyncio.run(main(single.url))


@pytest.mark.slow  # starts its own OpenEnv server: about 5-30 s on 2 busy cores
def test_server_dying_mid_episode_ends_it_with_an_episode_error():
    server = OpenEnvServer(GUESS_APP).start()
    process = server.process

    async def main():
        env = openenv_env(server.url)()
        await env.reset({"messages": []}, seed=4)
        [first] = await env.call_tools([ToolCall("guess", {"number": 50})])
        assert first.ok
        process.kill()
        process.wait(timeout=10)
        with pytest.raises(EpisodeError) as caught:
            await env.call_tools([ToolCall("guess", {"number": 25})])
        assert caught.value.kind == "tool" and "closed the session" in str(caught.value)
        await env.close()  # does not raise on a dead server
        assert env._socket is None

    try:
        asyncio.run(main())
    finally:
        server.stop()
    assert process.poll() is not None


def test_unreachable_server_is_an_episode_error_at_reset():
    async def main():
        env = openenv_env("http://127.0.0.1:9")()
        with pytest.raises(EpisodeError, match="cannot open an OpenEnv session"):
            await env.reset({"messages": []}, seed=0)
        await env.close()

    asyncio.run(main())


def test_malformed_frame_and_silence_are_episode_errors():
    """A server that is not a well-behaved OpenEnv server (the real one cannot be made to send a
    broken frame): one that answers with text that is not JSON, and one that never answers."""
    from websockets.asyncio.server import serve

    async def broken(connection):
        message = json.loads(await connection.recv())
        if message["type"] == "reset" and message["data"].get("seed") == 1:
            await connection.send("{not json")
        async for _ignored in connection:  # never answers again; ends when the client closes
            pass

    async def main():
        async with serve(broken, "127.0.0.1", 0) as ws_server:
            port = ws_server.sockets[0].getsockname()[1]
            url = f"http://127.0.0.1:{port}"
            malformed = openenv_env(url)()
            with pytest.raises(EpisodeError, match="malformed frame"):
                await malformed.reset({"messages": []}, seed=1)
            await malformed.close()
            silent = openenv_env(url, message_timeout_s=0.5)()
            with pytest.raises(EpisodeError) as caught:
                await silent.reset({"messages": []}, seed=2)
            assert caught.value.kind == "timeout"
            await silent.close()
            assert malformed._socket is None and silent._socket is None

    asyncio.run(asyncio.wait_for(main(), timeout=30))


def test_server_that_cannot_start_names_its_error(tmp_path):
    from rlfactory_nb.errors import ServerStartError

    with pytest.raises(ServerStartError, match="no_such_module"):
        OpenEnvServer("no_such_module:app", startup_timeout_s=30).start()
    with pytest.raises(ValueError, match="module:attribute"):
        OpenEnvServer("no_colon")


def env_outside_the_checkout(folder, package: str = "my_guess_env", tail: str = "") -> str:
    """A copy of the guess server as a package of its own in `folder` (as a clone of OpenEnv's
    envs/echo_env would be): its `app`, as openenv_env(app=...) names it."""
    from pathlib import Path

    server = folder / package / "server"
    server.mkdir(parents=True)
    (folder / package / "__init__.py").write_text("")
    (server / "__init__.py").write_text("")
    source = (Path(__file__).resolve().parents[2] / "examples" / "guess" / "openenv_server.py").read_text()
    (server / "app.py").write_text(source + tail)
    return f"{package}.server.app:app"


def test_a_server_that_cannot_start_says_what_failed_not_that_the_venv_is_missing(tmp_path):
    from rlfactory_nb.errors import ServerStartError

    app = env_outside_the_checkout(tmp_path)
    with pytest.raises(ServerStartError, match=r"module 'my_guess_env.server.app' is not on the server's path.*pass cwd=") as off_path:
        OpenEnvServer(app, startup_timeout_s=30).start()
    assert "OpenEnv venv" not in str(off_path.value)  # the interpreter was fine: the folder was not on its path
    needs = env_outside_the_checkout(tmp_path, "needs_a_dependency", tail="import no_such_dependency\n")
    with pytest.raises(ServerStartError, match=r"imports 'no_such_dependency', which .* cannot import: install it"):
        OpenEnvServer(needs, cwd=tmp_path, startup_timeout_s=30).start()
    with pytest.raises(ServerStartError, match=r"has no attribute 'missing'"):
        OpenEnvServer(app.replace(":app", ":missing"), cwd=tmp_path, startup_timeout_s=30).start()
    with pytest.raises(ServerStartError, match=r"cannot run /no/such/python"):
        OpenEnvServer(app, python="/no/such/python", cwd=tmp_path).start()
    with pytest.raises(ValueError, match="cwd="):
        openenv_env(app=app, cwd=tmp_path / "absent")


@pytest.mark.slow  # starts its own OpenEnv server: about 5-30 s on 2 busy cores
def test_a_server_outside_the_checkout_is_started_in_its_own_folder(tmp_path):
    app = env_outside_the_checkout(tmp_path)

    async def main():
        env = openenv_env(app=app, cwd=tmp_path)()
        await env.reset({"messages": []}, seed=5)
        assert [spec.name for spec in env.tool_specs()] == ["guess"]
        assert await play_binary_search(env) >= 1
        await env.close()
        return env.url

    url = asyncio.run(main())
    from rlfactory_nb.envs.adapters import openenv_server

    [key] = [k for k, s in openenv_server._SHARED.items() if s.url == url]
    server = openenv_server._SHARED.pop(key)  # a stopped server left behind has no url for the next test
    assert server.cwd == tmp_path.resolve() and key[2] == str(tmp_path.resolve())
    server.stop()


@pytest.mark.slow  # starts its own OpenEnv server: about 5-30 s on 2 busy cores
def test_a_server_started_from_its_app_is_shared_by_the_process_s_episodes():
    from rlfactory_nb.envs.adapters import openenv_server

    async def main():
        factory = openenv_env(app=GUESS_APP)
        first, second = factory(), factory()
        assert first.url == second.url  # one server for the process, started by the first episode
        for env, seed in ((first, 1), (second, 2)):
            await env.reset({"messages": []}, seed=seed)
            assert await play_binary_search(env) >= 1
            await env.close()
        return first.url

    url = asyncio.run(main())
    [server] = [s for s in openenv_server._SHARED.values() if s.url == url]
    process = server.process
    server.stop()  # what the exit hook does
    assert process.poll() is not None
    with pytest.raises(ValueError, match="exactly one"):
        openenv_env("http://x", app=GUESS_APP)
