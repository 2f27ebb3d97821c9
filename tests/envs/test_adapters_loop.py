"""The adapters through the real rollout loop: a ScriptedEngine plays the model over the tiny preset's
real tokenizer (so the token assembly, masks and parsing are the real ones), and the environment,
server or game is the real package. Failures end the episode as data: a named error, counted, the
instance closed, and no socket, file or process left behind."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re

import pytest

import rlfactory_nb as rf
from rlfactory_nb.engines.testing import ScriptedEngine
from rlfactory_nb.envs.adapters import (
    OpenEnvEnvironment,
    OpenEnvServer,
    openenv_env,
    skyrl_env,
    textarena_env,
    trl_env,
)
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.seeds import SampleId

from .test_adapters import Counter
from .test_adapters_openenv import GUESS_APP, openenv_available

CALL = '<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'
needs_openenv = pytest.mark.skipif(not openenv_available(), reason="no OpenEnv venv: run scripts/install_openenv.sh")


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def binary_search(pattern: str, low: int, high: int, write) -> callable:
    """A scripted player: reads its past guesses and the answers from the prompt, guesses the middle."""

    def reply(prompt: str) -> str:
        lo, hi = low, high
        for guess, answer in re.findall(pattern, prompt, flags=re.DOTALL):
            if "higher" in answer:
                lo = int(guess) + 1
            elif "lower" in answer:
                hi = int(guess) - 1
            elif "correct" in answer:
                return "I found it."
        return write((lo + hi) // 2)

    return reply


def masked(tokenizer, traj, sampled: int) -> str:
    return tokenizer.decode([i for i, m in zip(traj.response_ids, traj.loss_mask, strict=True) if m == sampled])


def agent_for(tokenizer, engine, env, **options):
    return rf.Agent(None, tokenizer=tokenizer, engine=engine, env=env, max_total_tokens=4096, **options)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def child_pids() -> set[int]:
    path = f"/proc/{os.getpid()}/task/{os.getpid()}/children"
    return {int(p) for p in open(path).read().split()} if os.path.exists(path) else set()


# --- OpenEnv -------------------------------------------------------------------------------------

OPENENV_TURN = r'"number": (\d+)\}\}\s*</tool_call>.*?<tool_response>\s*(\w+)'


@needs_openenv
@pytest.mark.slow  # starts its own OpenEnv server: about 5-30 s on 2 busy cores
async def test_openenv_episode_through_the_loop_wins_with_masked_tool_tokens(tokenizer):
    guess = binary_search(OPENENV_TURN, 1, 100, lambda n: CALL.format(name="guess", args=json.dumps({"number": n})))
    with OpenEnvServer(GUESS_APP) as server:
        agent = agent_for(tokenizer, ScriptedEngine(tokenizer, guess), openenv_env(server.url), max_turns=10)
        row = {"messages": [{"role": "user", "content": "Find my number."}], "reset_args": {"low": 1, "high": 100}}
        # a secret the first guess (50) misses, so that a hint is fed back (a random one was 50 in 1 of 100 runs)
        sample = next(s for s in (SampleId(0, 1, p, 0) for p in range(100)) if random.Random(s.reset_seed()).randint(1, 100) != 50)
        traj = await agent.rollout(row, sample_id=sample)
    assert traj.finish_reason == "stop", traj.metadata.get("env_error")
    assert traj.metadata["env_reward"] == 1.0 and traj.num_turns > 1
    assert traj.messages[1]["content"].startswith("I picked a number between 1 and 100")  # the reset observation
    # the winning call's observation said done: the episode ended after that turn (finished()),
    # its result recorded in the turn but not fed back to the model
    assert traj.turns[-1].results[-1].content == "correct" and traj.turns[-1].calls
    tool_texts = [m["content"] for m in traj.messages if m["role"] == "tool"]
    assert set(tool_texts) <= {"higher", "lower"} and len(tool_texts) == traj.num_turns - 1
    assert "higher" in masked(tokenizer, traj, 0) or "lower" in masked(tokenizer, traj, 0)
    assert "higher" not in masked(tokenizer, traj, 1) and "lower" not in masked(tokenizer, traj, 1)
    assert '"name": "guess"' in masked(tokenizer, traj, 1)
    assert agent.episodes.stats.open_now == 0 and not agent.episodes.stats.errors


@needs_openenv
@pytest.mark.slow  # starts its own OpenEnv server: about 5-30 s on 2 busy cores
async def test_openenv_server_dying_mid_episode_ends_it_as_data(tokenizer):
    instances: list[OpenEnvEnvironment] = []
    server = OpenEnvServer(GUESS_APP).start()
    calls = 0

    def reply(prompt: str) -> str:
        nonlocal calls
        calls += 1
        if calls == 2:  # the server dies between the first and the second guess
            server.process.kill()
            server.process.wait(timeout=10)
        return CALL.format(name="guess", args=json.dumps({"number": 10 * calls}))

    def factory():
        instances.append(openenv_env(server.url)())
        return instances[-1]

    try:
        agent = agent_for(tokenizer, ScriptedEngine(tokenizer, reply), factory, max_turns=6)
        traj = await agent.rollout({"messages": [{"role": "user", "content": "Guess."}]})
    finally:
        server.stop()
    assert traj.finish_reason == "error"
    assert traj.metadata["env_error"]["kind"] == "tool" and "closed the session" in traj.metadata["env_error"]["message"]
    assert dict(agent.episodes.stats.errors) == {"tool": 1}
    assert agent.episodes.stats.open_now == 0 and instances[0]._socket is None


@needs_openenv
@pytest.mark.slow  # starts its own OpenEnv server: about 5-30 s on 2 busy cores
async def test_refused_sessions_end_as_data_and_leave_nothing_open(tokenizer):
    """200 episodes refused by a server at capacity: each a named, counted error; sockets, files and
    child processes are what they were before."""
    with OpenEnvServer(GUESS_APP, env={"GUESS_MAX_SESSIONS": "1"}) as server:
        holder = openenv_env(server.url)()
        await holder.reset({"messages": []}, seed=0)
        children, fds = child_pids(), open_fds()
        engine = ScriptedEngine(tokenizer, ["never asked"])
        agent = agent_for(tokenizer, engine, openenv_env(server.url), max_turns=2, max_open_envs=32)
        rows = [{"messages": [{"role": "user", "content": f"Game {i}"}]} for i in range(200)]
        trajectories = await asyncio.gather(*(agent.rollout(row) for row in rows))
        assert all(t.finish_reason == "error" for t in trajectories)
        assert all("capacity" in t.metadata["env_error"]["message"] for t in trajectories)
        assert dict(agent.episodes.stats.errors) == {"reset": 200}
        assert agent.episodes.stats.opened == agent.episodes.stats.closed == 200
        assert engine.prompts == []  # no episode reached the model
        await asyncio.sleep(0.2)
        assert open_fds() <= fds and child_pids() == children
        await holder.close()


# --- text games and TRL-style classes ------------------------------------------------------------

TEXTARENA_TURN = r"\[(\d+)\]<\|im_end\|>.*?\[GAME\] ([^\n<]*)"


async def test_textarena_game_through_the_loop(tokenizer):
    pytest.importorskip("textarena")
    play = binary_search(TEXTARENA_TURN, 1, 20, lambda n: f"[{n}]")
    agent = agent_for(tokenizer, ScriptedEngine(tokenizer, play), textarena_env("GuessTheNumber-v0"), max_turns=10)
    row = {"messages": [{"role": "system", "content": "Play well."}]}
    for sample in range(8):  # seeded games (one per prompt); the first whose secret is not the first guess (1 in 20 is)
        traj = await agent.rollout(row, sample_id=SampleId(seed=0, step=1, prompt=sample, sample=0))
        if traj.num_turns > 1:
            break
    assert traj.finish_reason == "stop", traj.metadata.get("env_error")
    assert traj.metadata["env_reward"] == 1.0
    game_text = masked(tokenizer, traj, 0)
    assert "higher" in game_text or "lower" in game_text
    assert "[GAME]" not in masked(tokenizer, traj, 1)


async def test_skyrl_environment_through_the_loop(tokenizer):
    pytest.importorskip("skyrl_gym")
    row = {
        "messages": [{"role": "user", "content": "48 clips in April, half as many in May. Total?"}],
        "reward_spec": {"method": "rule", "ground_truth": "72"},
        "extra_info": {"max_turns": 3},
    }
    engine = ScriptedEngine(tokenizer, ["48 + 24 = 71\n#### 71", "48 + 24 = 72\n#### 72"])
    agent = agent_for(tokenizer, engine, skyrl_env("gsm8k_multi_turn"), max_turns=5)
    traj = await agent.rollout(row)
    assert traj.num_turns == 2
    assert traj.metadata["env_reward"] == pytest.approx(1.0 + 0.2 / 3)
    assert "tentative numeric answer" in masked(tokenizer, traj, 0)


async def test_trl_class_through_the_loop_and_its_reward_reads_the_instance(tokenizer):
    replies = [CALL.format(name="increment", args='{"a": 2}'), CALL.format(name="increment", args='{"a": 3}'), "At 5."]
    env = trl_env(Counter, reward=lambda counter: float(counter.value == counter.target))
    agent = agent_for(tokenizer, ScriptedEngine(tokenizer, replies), env, max_turns=4)
    row = {"messages": [{"role": "user", "content": "Count."}], "target": 5}
    traj = await agent.rollout(row, keep_open=True)
    instance = agent.env_of(traj)
    assert instance.inner.value == 5 and traj.metadata["env_reward"] == 1.0
    assert traj.messages[0]["content"] == "Count.\n\nReach 5."  # reset's string joined the prompt
    await agent.close_episodes()


async def test_an_adapter_env_that_raises_ends_the_episode_as_data(tokenizer):
    class Broken(Counter):
        def increment(self, a: int) -> int:
            """Increment the counter.

            Args:
                a: how much to add
            """
            raise RuntimeError("the counter jammed")

        def close(self) -> None:
            raise OSError("and will not close")

    replies = [CALL.format(name="increment", args='{"a": 1}'), "Hm."]
    agent = agent_for(tokenizer, ScriptedEngine(tokenizer, replies), trl_env(Broken), max_turns=3)
    traj = await agent.rollout({"messages": [{"role": "user", "content": "Count."}], "target": 1})
    tool_result = next(m for m in traj.messages if m["role"] == "tool")
    assert "the counter jammed" in tool_result["content"]  # a tool failure is data the model reads
    assert traj.metadata["env_error"]["kind"] == "close"
    assert agent.episodes.stats.errors["close"] == 1 and agent.episodes.stats.open_now == 0


async def test_a_factory_that_returns_a_trl_object_fails_in_create_naming_trl_env(tokenizer):
    agent = agent_for(tokenizer, ScriptedEngine(tokenizer, ["Done."]), lambda: Counter(), max_turns=2)
    traj = await agent.rollout({"messages": [{"role": "user", "content": "Count."}], "target": 1})
    error = traj.metadata["env_error"]
    assert error["kind"] == "create" and "env=trl_env(factory)" in error["message"] and "env=Counter" in error["message"]
