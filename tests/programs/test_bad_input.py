"""Bad input: every case ends with an HTTP error naming the limit, or an episode that ends as data
(named, counted); no session reads another's calls, and the other episodes go on."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from rlfactory_nb.rollout.groups import rollout_groups
from rlfactory_nb.types import Sample
from tests.programs.conftest import audit_masks

ROW = {"messages": [{"role": "user", "content": "What is 2+2?"}], "ground_truth": "4"}


async def ask(llm, messages=None, **options):
    reply = await llm.client().chat.completions.create(model=llm.model, messages=messages or ROW["messages"], **options)
    return reply.choices[0].message.content


async def test_a_program_that_raises_ends_as_data(replay):
    async def broken(row, llm):
        await ask(llm)
        raise KeyError("no such key")

    program, _ = replay(["<answer>4</answer>"], broken)
    traj = await program.rollout(ROW)
    assert traj.finish_reason == "error" and "KeyError" in traj.metadata["program_error"]
    assert traj.metadata["program"]["calls"] == 1 and Sample.from_trajectory(traj).final_answer == ""


async def test_a_program_past_its_timeout_is_cancelled_and_its_session_closed(replay):
    """The late call comes while another episode keeps the endpoint listening (it closes with the last)."""
    kept, ended = {}, asyncio.Event()

    async def hangs(row, llm):
        if row.get("who") == "late":
            await ended.wait()
            late = openai.AsyncOpenAI(base_url=kept["llm"].base_url, api_key=kept["llm"].api_key, max_retries=0)
            with pytest.raises(openai.APIStatusError) as error:
                await late.chat.completions.create(model="policy", messages=ROW["messages"])
            kept["late"] = error.value
            return "done"
        kept["llm"] = llm
        await ask(llm)
        await asyncio.sleep(60)

    program, _ = replay(["x"], hangs, timeout_s=1.0)
    first = asyncio.ensure_future(program.rollout(ROW))
    await asyncio.sleep(0.7)  # the late episode's own timeout is later than the first's
    late = asyncio.ensure_future(program.rollout({**ROW, "who": "late"}))
    traj = await first
    ended.set()
    await late
    assert traj.finish_reason == "error" and "timeout_s=1" in traj.metadata["program_error"]
    assert kept["late"].status_code == 410 and "closed" in kept["late"].message


async def test_an_answer_that_is_not_a_string_is_named(replay):
    async def returns_number(row, llm):
        await ask(llm)
        return 4

    program, _ = replay(["4"], returns_number)
    traj = await program.rollout(ROW)
    assert traj.finish_reason == "error" and "returned a int, not a str" in traj.metadata["program_error"]


async def test_a_call_past_max_calls_is_refused_and_the_episode_ends_max_turns(replay):
    seen = {}

    async def keeps_asking(row, llm):
        for _ in range(5):
            try:
                await ask(llm)
            except openai.BadRequestError as error:
                seen["error"] = error
                return "gave up"
        return "never"

    program, engine = replay(["again"], keeps_asking, max_calls=2)
    traj = await program.rollout(ROW)
    assert len(engine.prompts) == 2 and "max_calls" in seen["error"].message
    assert traj.finish_reason == "max_turns" and traj.metadata["final_answer"] == "gave up"


async def test_a_prompt_past_the_token_budget_is_refused(replay):
    seen = {}

    async def long_prompt(row, llm):
        try:
            await ask(llm, [{"role": "user", "content": "word " * 400}])
        except openai.BadRequestError as error:
            seen["error"] = error
        return ""

    program, engine = replay(["x"], long_prompt, max_total_tokens=64)
    traj = await program.rollout(ROW)
    assert engine.prompts == [] and "max_total_tokens=64" in seen["error"].message
    assert traj.finish_reason == "length"


async def test_malformed_json_unknown_model_and_a_body_over_the_limit(replay):
    seen = {}

    async def hostile(row, llm):
        headers = {"Authorization": f"Bearer {llm.api_key}", "Content-Type": "application/json"}
        url = llm.base_url + "/chat/completions"
        async with httpx.AsyncClient() as client:
            seen["json"] = await client.post(url, content=b'{"messages": [', headers=headers)
            seen["model"] = await client.post(url, json={"model": "gpt-5", "messages": ROW["messages"]}, headers=headers)
            big = {"model": llm.model, "messages": [{"role": "user", "content": "x" * 5000}]}
            seen["size"] = await client.post(url, content=json.dumps(big), headers=headers)
            seen["n"] = await client.post(url, json={"messages": ROW["messages"], "n": 3}, headers=headers)
            seen["role"] = await client.post(url, json={"messages": [{"role": "wizard", "content": "x"}]}, headers=headers)
        return "done"

    program, engine = replay(["x"], hostile, max_body_bytes=4000)
    traj = await program.rollout(ROW)
    assert engine.prompts == [] and traj.metadata["program"]["calls"] == 0 and traj.finish_reason == "stop"
    expected = {"json": (400, "not valid JSON"), "model": (404, "'gpt-5'"), "size": (413, "max_body_bytes=4,000"),
                "n": (400, "n=1"), "role": (400, "messages[0].role")}
    for case, (status, words) in expected.items():
        assert seen[case].status_code == status and words in seen[case].json()["error"]["message"], case


async def test_concurrent_calls_of_one_session_are_branches(replay, tiny_policy):
    async def branches(row, llm):
        answers = await asyncio.gather(ask(llm), ask(llm))
        return answers[0]

    program, engine = replay(["<answer>4</answer>"], branches, chat_format="qwen3")
    engine.delay_s = 0.05
    traj = await program.rollout(ROW)
    counters = traj.metadata["program"]
    assert (counters["calls"], counters["forks"]) == (2, 1)
    assert counters["segment_starts"][1].startswith("branch at call 1")
    audit_masks(traj, engine, tiny_policy.tokenizer)


async def test_a_session_key_used_from_another_episode_is_refused(replay):
    keys: dict[str, object] = {}
    both = asyncio.Event()
    outcome = {}

    async def spy(row, llm):
        keys[row["who"]] = llm
        if len(keys) == 2:
            both.set()
        await both.wait()
        await ask(llm)
        if row["who"] == "a":
            other = keys["b"]
            stolen = openai.AsyncOpenAI(base_url=llm.base_url, api_key=other.api_key, max_retries=0)
            with pytest.raises(openai.PermissionDeniedError) as error:
                await stolen.chat.completions.create(model=llm.model, messages=row["messages"])
            outcome["message"] = error.value.message
        return row["who"]

    program, _ = replay(["<answer>4</answer>"], spy)
    a, b = await asyncio.gather(program.rollout({**ROW, "who": "a"}), program.rollout({**ROW, "who": "b"}))
    assert "does not belong to session" in outcome["message"]
    assert a.metadata["program"]["calls"] == 1 and b.metadata["program"]["calls"] == 1  # nobody saw another's


async def test_one_failing_episode_leaves_the_groups_going(replay):
    async def sometimes(row, llm):
        if row["messages"][0]["content"].startswith("fail"):
            raise RuntimeError("boom")
        return await ask(llm)

    program, _ = replay(["<answer>4</answer>"], sometimes)
    rows = [ROW, {"messages": [{"role": "user", "content": "fail now"}]}]
    groups = await rollout_groups(program, rows, group_size=2)
    assert [[t.finish_reason for t in g] for g in groups] == [["stop", "stop"], ["error", "error"]]
