"""Hostile programs and hostile local processes against an agent program's endpoint (issue 54).

Each test failed on 764a942: the endpoint read bodies before the key, answered hostile bodies with
500s, started one endpoint per concurrent first episode and left them listening, filed a reused
client's calls under the first episode, let a program that swallows its cancellation outlive its
timeout, decoded every prefix of a completion for a stop string, and rendered (and cached)
prompts of any size before checking the token budget."""

from __future__ import annotations

import asyncio
import json
import time
from urllib.parse import urlparse

import httpx
import openai
import pytest

from rlfactory_nb.programs import AgentProgram
from rlfactory_nb.rollout import tokens
from tests.programs.conftest import ReplayEngine

ROW = {"messages": [{"role": "user", "content": "What is 2+2?"}], "ground_truth": "4"}


@pytest.fixture
def program_of(tiny_policy):
    """`program_of(fn, texts=..., **options)` -> (program, engine): `fn` served by a ReplayEngine."""

    def make(fn, texts=("<answer>4</answer>",), **options):
        engine = ReplayEngine(tiny_policy.tokenizer, texts)
        return AgentProgram(fn, engine=engine, tokenizer=tiny_policy.tokenizer, **options), engine

    return make


async def ask(client, model="policy", messages=None, **options):
    reply = await client.chat.completions.create(model=model, messages=messages or ROW["messages"], **options)
    return reply.choices[0].message.content


HOSTILE_BODIES = {
    "stop is a number": {"stop": 5},
    "a content part's text is a number": {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
    "a content part is a string": {"messages": [{"role": "user", "content": ["hi"]}]},
    "tool_calls is a number": {"messages": [*ROW["messages"], {"role": "assistant", "tool_calls": 5}, {"role": "user", "content": "k"}]},
    "a tool call is a string": {"messages": [*ROW["messages"], {"role": "assistant", "tool_calls": ["x"]}, {"role": "user", "content": "k"}]},
    "a call's function is a string": {
        "messages": [*ROW["messages"], {"role": "assistant", "tool_calls": [{"id": "a", "function": "f"}]}, {"role": "user", "content": "k"}],
    },
    "max_tokens is true": {"max_tokens": True},
}


async def test_hostile_bodies_are_named_400s_never_500s(program_of):
    """Before: each of these was a logged 500 ("the endpoint failed on this call: TypeError ...")."""
    seen = {}

    async def hostile(row, llm):
        headers = {"Authorization": f"Bearer {llm.api_key}", "Content-Type": "application/json"}
        url = llm.base_url + "/chat/completions"
        async with httpx.AsyncClient(timeout=30) as client:
            for case, body in HOSTILE_BODIES.items():
                seen[case] = await client.post(url, content=json.dumps({"messages": ROW["messages"], **body}), headers=headers)
            seen["JSON nested 100,000 deep"] = await client.post(url, content=b"[" * 100_000 + b"]" * 100_000, headers=headers)
            deep = json.dumps(ROW)[:-1].encode() + b', "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
            seen["a field nested 50,000 deep"] = await client.post(url, content=deep, headers=headers)
        return "done"

    program, engine = program_of(hostile, max_calls=50)
    traj = await program.rollout(ROW)
    assert traj.metadata["program"]["calls"] == 0 and engine.prompts == []
    for case, reply in seen.items():
        error = reply.json()["error"]
        assert reply.status_code == 400 and error["code"] != "server_error", (case, reply.status_code, error["message"])
    assert "stop" in seen["stop is a number"].json()["error"]["message"]
    assert "messages[1].tool_calls" in seen["a tool call is a string"].json()["error"]["message"]
    assert "nests deeper" in seen["JSON nested 100,000 deep"].json()["error"]["message"]


async def test_a_request_without_the_key_is_refused_before_its_body_is_read(program_of):
    """Before: the endpoint read the whole body (up to max_body_bytes) and only then checked the
    key, so any local process held the trainer's memory (about 250 MiB over 40 connections)."""
    seen = {}

    async def probe(row, llm):
        port = urlparse(llm.base_url).port
        for path, key in (("/v1/chat/completions", ""), (urlparse(llm.base_url).path + "/chat/completions", "rfs-wrong")):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            auth = f"Authorization: Bearer {key}\r\n" if key else ""
            writer.write(
                f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Type: application/json\r\n"
                f"Content-Length: 8000000\r\n\r\n".encode() + b"[" * 65536
            )
            await writer.drain()
            try:  # the body never completes: only a reply from the headers alone comes back
                seen[key or "no key"] = await asyncio.wait_for(reader.readline(), 3.0)
            except TimeoutError:
                seen[key or "no key"] = b"no reply: the endpoint waited for the body"
            writer.close()
        return "done"

    program, _ = program_of(probe)
    await program.rollout(ROW)
    assert seen["no key"].startswith(b"HTTP/1.1 401"), seen
    assert seen["rfs-wrong"].startswith(b"HTTP/1.1 403"), seen


async def test_concurrent_first_episodes_share_one_endpoint_which_closes_after_the_last(program_of):
    """Before: 32 concurrent first episodes started about 32 endpoints and 31 stayed listening
    (under a 256-descriptor limit the fifth evaluation failed)."""
    ports = []

    async def solve(row, llm):
        ports.append(urlparse(llm.base_url).port)
        return await ask(llm.client())

    program, _ = program_of(solve)
    trajectories = await asyncio.gather(*(program.rollout(ROW) for _ in range(32)))
    assert all(t.finish_reason == "stop" for t in trajectories)
    assert len(set(ports)) == 1, f"{len(set(ports))} endpoints started for one program"
    with pytest.raises(OSError):  # nothing listens once the episodes ended
        await asyncio.open_connection("127.0.0.1", ports[0])
    again = await program.rollout(ROW)  # the next episode starts a new one
    assert again.finish_reason == "stop"


async def test_a_client_kept_across_episodes_is_an_error_of_each_episode_that_misuses_it(program_of):
    """Before: every row's calls went into the first episode's trajectory; the other rows showed no
    calls and no error, yet returned scored answers."""
    shared = {"misused": 0}
    started, misused = asyncio.Event(), asyncio.Event()

    async def keeps_one_client(row, llm):
        if "client" not in shared:
            shared["client"] = llm.client()
            started.set()
            await misused.wait()  # the first episode stays open while the others call through its client
            return await ask(shared["client"])
        await started.wait()
        try:
            return await ask(shared["client"])
        finally:
            shared["misused"] += 1
            if shared["misused"] == 3:
                misused.set()

    program, engine = program_of(keeps_one_client, max_calls=8)
    trajectories = await asyncio.gather(*(program.rollout({**ROW, "id": f"row{i}"}) for i in range(4)))
    owners = [t for t in trajectories if "program_error" not in t.metadata]
    assert len(owners) == 1 and owners[0].metadata["program"]["calls"] == 1  # its own call, nobody else's
    for traj in trajectories:
        if traj is not owners[0]:
            assert traj.finish_reason == "error" and "serves only the episode it was made for" in traj.metadata["program_error"]
    assert len(engine.prompts) == 1


async def test_a_program_that_swallows_its_cancellation_still_ends_at_its_timeout(program_of):
    """Before: `wait_for` waited for the cancelled program, which never ended: the episode hung."""
    late = {}

    async def stubborn(row, llm):
        client = llm.client()
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                pass
        try:
            await ask(client)
        except openai.APIStatusError as error:
            late["status"] = error.status_code
        except RuntimeError as error:  # the episode closed its clients
            late["status"] = str(error)
        return "late"

    program, engine = program_of(stubborn, timeout_s=0.3)
    started = time.monotonic()
    traj = await asyncio.wait_for(program.rollout(ROW), 2.5)
    assert time.monotonic() - started < 2.0
    assert traj.finish_reason == "error" and "timeout_s=0.3" in traj.metadata["program_error"]
    await asyncio.sleep(3.2)  # the abandoned program's late call is refused, never served
    assert late and engine.prompts == []


async def test_a_stop_string_costs_a_few_decodes_not_one_per_token(program_of):
    """Before: every prefix of the completion was decoded: 6.2 s at 8,900 tokens on the loop."""
    text = "word " * 8_900 + "END tail"
    seen = {}

    async def with_stop(row, llm):
        started = time.perf_counter()
        seen["reply"] = await ask(llm.client(), stop=["END"])
        seen["seconds"] = time.perf_counter() - started
        return seen["reply"]

    program, engine = program_of(with_stop, texts=[text], max_new_tokens=20_000, max_total_tokens=30_000)
    traj = await program.rollout(ROW)
    assert seen["seconds"] < 1.5, seen["seconds"]
    assert seen["reply"].rstrip().endswith("word") and "END" not in seen["reply"]
    kept = traj.response_ids[: sum(traj.loss_mask)]
    assert engine.tokenizer.decode(kept).endswith("END") and not engine.tokenizer.decode(kept[:-1]).endswith("END")


async def test_an_oversize_prompt_is_refused_before_any_render_and_no_refusal_is_kept(program_of, monkeypatch):
    """Before: 2 MiB prompts were rendered and tokenized on the loop, then refused, then cached
    (three kept 56 MiB in a cache bounded by entry count)."""
    renders = []
    real_render = tokens.render
    monkeypatch.setattr(tokens, "render", lambda *a, **k: renders.append(1) or real_render(*a, **k))
    seen = {}

    async def oversize(row, llm):
        client = llm.client()
        renders.clear()  # serving the first episode rendered the template's generation prompt once
        # 2 MiB in 600 texts, each within the one cut of a text (tools.max_result_chars: rollout/guard.py)
        for case, words, count in (("huge", 700, 600), ("over", 300, 1), ("over again", 300, 1)):
            try:
                await ask(client, messages=[{"role": "user", "content": "word " * words}] * count)
            except openai.BadRequestError as error:
                seen[case] = (error.message, len(renders))
        huge_tool = {"type": "function", "function": {"name": "f", "description": "word " * 400_000, "parameters": {}}}
        try:
            await ask(client, tools=[huge_tool])
        except openai.BadRequestError as error:
            seen["huge tools"] = (error.message, len(renders))
        return "done"

    program, engine = program_of(oversize, max_total_tokens=256, max_calls=8)
    await program.rollout(ROW)
    assert engine.prompts == [] and all("max_total_tokens=256" in message for message, _ in seen.values())
    assert seen["huge"][1] == 0, "the 2 MiB prompt was rendered before it was refused"
    assert seen["huge tools"][1] == seen["over again"][1], "the 2 MiB tool schema was rendered before it was refused"
    assert seen["over again"][1] == seen["over"][1] + 1, "a refused prompt was kept and served from the cache"


def test_the_prompt_cache_is_bounded_by_bytes():
    cache = tokens.PromptCache(max_bytes=1_000_000)
    for index in range(100):
        cache.put((None, "", f"{index}" * 1000), tuple(range(1000)))
    assert cache.held <= 1_000_000
    assert cache.get((None, "", "99" * 1000)) is not None and cache.get((None, "", "0" * 1000)) is None
    cache.put((None, "", "big"), tuple(range(10_000)))  # over a sixteenth of the budget: not kept
    assert cache.get((None, "", "big")) is None
