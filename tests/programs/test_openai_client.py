"""An agent written with the `openai` client itself, served by the endpoint over an engine."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

import rlfactory_nb as rf
from rlfactory_nb.config import RunConfig
from rlfactory_nb.programs import AgentProgram
from rlfactory_nb.rewards import load_reward
from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.types import Sample
from tests.programs.conftest import CALCULATOR_SCHEMA, ReplayEngine, audit_masks, calculator, call_text

QUESTION = [{"role": "user", "content": "What is 12+30?"}]
REPLIES = [call_text("calculator", {"expression": "12+30"}), "<answer>42</answer>"]


async def tool_loop(row, llm, stream: bool = False):
    """A hand-written tool loop: call the model, run its calls, send the results back."""
    client = llm.client()
    messages = list(row["messages"])
    for _ in range(4):
        if stream:
            reply = await _streamed(client, llm.model, messages)
        else:
            reply = (await client.chat.completions.create(model=llm.model, messages=messages, tools=[CALCULATOR_SCHEMA])).choices[0].message
        messages.append(reply.model_dump(exclude_none=True))
        if not reply.tool_calls:
            return reply.content
        for call in reply.tool_calls:
            result = calculator.fn(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return ""


async def _streamed(client, model, messages):
    """A streamed reply, put back together as the openai client's users do."""
    content, calls = "", {}
    stream = await client.chat.completions.create(model=model, messages=messages, tools=[CALCULATOR_SCHEMA], stream=True)
    async for chunk in stream:
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is None:
            continue
        content += delta.content or ""
        for call in delta.tool_calls or []:
            calls[call.index] = call
    tool_calls = [
        {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
        for _, c in sorted(calls.items())
    ]
    return openai.types.chat.ChatCompletionMessage(role="assistant", content=content or None, tool_calls=tool_calls or None)


@pytest.mark.parametrize("in_memory", [True, False], ids=["in-memory", "http"])
@pytest.mark.parametrize("stream", [False, True])
async def test_one_episode_merges_into_one_exact_trajectory(replay, tiny_policy, stream, in_memory):
    """The same episode whichever way `llm.client()` reaches the endpoint (in memory, or loopback HTTP)."""
    program, engine = replay(REPLIES, lambda row, llm: tool_loop(row, llm, stream), in_memory=in_memory)
    program.fn = _async(program.fn)
    traj = await program.rollout({"messages": QUESTION, "ground_truth": "42"})
    counters = traj.metadata["program"]
    assert (counters["calls"], counters["merged"], counters["forks"], counters["drift"]) == (2, 1, 0, 0)
    assert traj.metadata["segments"] == [] and traj.finish_reason == "stop"
    assert [c.name for c in traj.tool_calls()] == ["calculator"] and traj.tool_results()[0].content == "42"
    sample = Sample.from_trajectory(traj)
    assert sample.final_answer == "42" and sample.ground_truth == "42"
    audit_masks(traj, engine, tiny_policy.tokenizer, [CALCULATOR_SCHEMA])
    # the second call's prompt is the first call's prompt + what it sampled + the masked tool turn
    assert engine.prompts[1][: len(engine.prompts[0]) + len(engine.sampled[0])] == engine.prompts[0] + engine.sampled[0]


async def test_the_ids_are_the_ones_rf_agent_assembles(replay, tiny_policy):
    program, _engine = replay(REPLIES, tool_loop)
    traj = await program.rollout({"messages": QUESTION})
    tools = rf.ToolSet.from_functions(calculator)
    await tools.start()
    try:
        agent = Agent(None, tools, engine=ReplayEngine(tiny_policy.tokenizer, REPLIES), tokenizer=tiny_policy.tokenizer)
        reference = await agent.rollout(QUESTION)
        assert tools.specs[0].to_openai() == CALCULATOR_SCHEMA
    finally:
        await tools.stop()
    assert (traj.prompt_ids, traj.response_ids, traj.loss_mask) == (reference.prompt_ids, reference.response_ids, reference.loss_mask)


@pytest.mark.parametrize(
    "reply",
    ["<answer>919</answer>", "<think>7*131 = 917? No: 7*131 = 917, 919 is prime.</think>\n\n<answer>919</answer>", "919"],
    ids=["answer-tags", "reasoning-and-tags", "bare"],
)
async def test_a_program_s_answer_is_scored_as_an_agent_s_last_turn_by_the_calculator_reward(replay, tiny_policy, reply):
    """The calculator example's own reward scores the answer an openai-client program returns as it
    scores an rf.Agent's last turn over the same reply: the family's reasoning removed, <answer> read."""
    reward = load_reward(RunConfig.from_yaml("examples/calculator/config.yaml").reward.function)

    async def joined(row, llm):  # as frameworks that keep the reasoning in the text hand it back
        message = (await llm.client().chat.completions.create(model=llm.model, messages=row["messages"])).choices[0].message
        thought = getattr(message, "reasoning_content", None)
        return f"<think>{thought}</think>\n\n{message.content}" if thought else message.content

    row = {"messages": QUESTION, "ground_truth": "919"}
    scores = []
    for fn in (tool_loop, joined):
        program, _engine = replay([reply], fn)
        scores.append(reward(Sample.from_trajectory(await program.rollout(row))))
    agent = Agent(None, None, engine=ReplayEngine(tiny_policy.tokenizer, [reply]), tokenizer=tiny_policy.tokenizer)
    scores.append(reward(Sample.from_trajectory(await agent.rollout(row))))
    assert scores == [1.0, 1.0, 1.0]


async def test_a_rewritten_history_starts_a_segment_and_both_train(replay, tiny_policy):
    async def summarizing(row, llm):
        client = llm.client()
        first = await client.chat.completions.create(model=llm.model, messages=row["messages"])
        summary = [{"role": "user", "content": f"Earlier you said: {first.choices[0].message.content}. Answer now."}]
        second = await client.chat.completions.create(model=llm.model, messages=summary)
        return second.choices[0].message.content

    program, engine = replay(["thinking about it", "<answer>42</answer>"], summarizing)
    traj = await program.rollout({"messages": QUESTION})
    counters = traj.metadata["program"]
    assert (counters["calls"], counters["merged"], counters["forks"]) == (2, 0, 1)
    assert counters["segment_starts"] == ["first call", "history rewritten at call 1"]
    audit_masks(traj, engine, tiny_policy.tokenizer)
    rows, advantages = rf.programs.expand_segments([traj], __import__("torch").tensor([0.5]))
    assert [r.prompt_ids for r in rows] == engine.prompts and advantages.tolist() == [0.5, 0.5]


async def test_models_route_and_completion_fields(replay):
    seen = {}

    async def probe(row, llm):
        client = llm.client()
        seen["models"] = [m.id for m in (await client.models.list()).data]
        reply = await client.chat.completions.create(
            model=llm.model, messages=row["messages"], tools=[CALCULATOR_SCHEMA], max_completion_tokens=50, seed=3
        )
        seen["reply"] = reply
        return "done"

    program, engine = replay([call_text("calculator", {"expression": "1+1"})], probe)
    await program.rollout({"messages": QUESTION})
    reply = seen["reply"]
    assert seen["models"] == ["policy"] and reply.object == "chat.completion"
    assert reply.choices[0].finish_reason == "tool_calls" and reply.choices[0].message.content is None
    call = reply.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == ("calculator", {"expression": "1+1"})
    assert reply.usage.completion_tokens == len(engine.sampled[0]) and reply.usage.prompt_tokens == len(engine.prompts[0])
    assert engine.samplings[0].max_new_tokens == 50 and engine.samplings[0].seed == 3  # on its own: obeyed


async def test_in_a_run_the_runs_sampling_wins_and_is_logged(replay, caplog):
    async def asks(row, llm):
        await llm.client().chat.completions.create(model=llm.model, messages=row["messages"], temperature=0.2, top_p=0.5)
        return "x"

    program, engine = replay(["hello"], asks)
    cfg = RunConfig.from_dict({"name": "t", "rollout": {"temperature": 0.7, "max_new_tokens": 9}})
    caplog.set_level("INFO", logger="rlfactory_nb.programs.sessions")
    bound = program.bind(cfg=cfg, engine=engine)
    traj = await bound.rollout({"messages": QUESTION})
    assert (engine.samplings[0].temperature, engine.samplings[0].top_p, engine.samplings[0].max_new_tokens) == (0.7, 1.0, 9)
    assert traj.metadata["program"]["ignored_sampling"] == 1
    assert "the run's sampling wins" in caplog.text and "'temperature': 0.2" in caplog.text


async def test_stop_strings_and_tool_choice_none(replay, tiny_policy):
    seen = {}

    async def asks(row, llm):
        client = llm.client()
        seen["stop"] = await client.chat.completions.create(model=llm.model, messages=row["messages"], stop=["42"])
        seen["none"] = await client.chat.completions.create(
            model=llm.model, messages=row["messages"], tools=[CALCULATOR_SCHEMA], tool_choice="none"
        )
        return "x"

    texts = ["the answer is 42 and more words", call_text("calculator", {"expression": "1+1"})]
    program, _engine = replay(texts, asks)
    traj = await program.rollout({"messages": QUESTION})
    assert seen["stop"].choices[0].message.content == "the answer is"
    kept = tiny_policy.tokenizer.decode(traj.metadata["segments"][0]["response_ids"])
    assert kept.endswith("42") and "more" not in kept  # the ids kept end with the token that completed the stop
    assert seen["none"].choices[0].message.tool_calls is None and "<tool_call>" in seen["none"].choices[0].message.content


@pytest.mark.parametrize("in_memory", [True, False], ids=["in-memory", "http"])
async def test_a_plain_function_program_runs_in_a_thread(replay, in_memory):
    def plain(row, llm):
        reply = llm.sync_client().chat.completions.create(model=llm.model, messages=row["messages"])
        return reply.choices[0].message.content

    program, _ = replay(["<answer>7</answer>"], plain, in_memory=in_memory)
    traj = await program.rollout({"messages": QUESTION})
    assert traj.metadata["final_answer"] == "<answer>7</answer>" and traj.metadata["program"]["calls"] == 1


async def test_the_endpoint_listens_on_the_loopback_only(replay):
    program, _ = replay(["hi"], tool_loop)
    endpoint = await program.endpoint()
    sockets = [s for site in endpoint._runner.sites for s in site._server.sockets]
    assert {s.getsockname()[0] for s in sockets} == {"127.0.0.1"}
    async with httpx.AsyncClient() as client:
        response = await client.get(f"http://127.0.0.1:{endpoint.port}/v1/models")
    assert response.status_code == 401 and "api_key" in response.json()["error"]["message"]
    await program.close()


async def test_llm_client_reaches_the_endpoint_without_a_socket_and_hears_the_same_errors(replay, monkeypatch):
    """In memory the client's requests never touch the listening socket (no connection is accepted),
    and a refused request is the same HTTP error, raised by the openai client as over HTTP."""
    seen = {}

    async def program_fn(row, llm):
        client = llm.client()
        reply = await client.chat.completions.create(model=llm.model, messages=row["messages"])
        try:
            await client.chat.completions.create(model="gpt-4o", messages=row["messages"])
        except openai.NotFoundError as error:
            seen["in_memory"] = (error.status_code, error.body["message"])
        over_http = openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0)
        try:
            await over_http.chat.completions.create(model="gpt-4o", messages=row["messages"])
        except openai.NotFoundError as error:
            seen["http"] = (error.status_code, error.body["message"])
        await over_http.close()
        return reply.choices[0].message.content

    from rlfactory_nb.programs.endpoint import Endpoint

    over_aiohttp, handle = [], Endpoint._handle

    async def counted(self, request):
        over_aiohttp.append(request.path)
        return await handle(self, request)

    monkeypatch.setattr(Endpoint, "_handle", counted)  # before the endpoint starts and routes to it
    program, _ = replay(["<answer>7</answer>"], program_fn)
    traj = await program.rollout({"messages": QUESTION})
    assert traj.metadata["final_answer"] == "<answer>7</answer>" and traj.metadata["program"]["calls"] == 1
    assert seen["in_memory"] == seen["http"] and seen["in_memory"][0] == 404 and "llm.model" in seen["in_memory"][1]
    assert len(over_aiohttp) == 1  # the one request over llm.base_url; llm.client()'s two came in memory
    await program.close()


async def test_the_in_memory_client_keeps_its_read_timeout(replay, tiny_policy):
    """A socket would time a slow reply out; in memory the client's read timeout still holds."""
    from rlfactory_nb.engines.testing import ScriptedEngine

    async def patient(row, llm):
        try:
            await llm.client(timeout=0.2).chat.completions.create(model=llm.model, messages=row["messages"])
        except openai.APITimeoutError:
            return "timed out"
        return "answered"

    engine = ScriptedEngine(tiny_policy.tokenizer, ["late"], delay_s=2.0)
    program = AgentProgram(patient, engine=engine, tokenizer=tiny_policy.tokenizer)
    traj = await program.rollout({"messages": QUESTION})
    assert traj.metadata["final_answer"] == "timed out"
    await program.close()


def _async(fn):
    async def run(row, llm):
        return await fn(row, llm)

    return run


async def summarizing_agent(row, llm):
    """Two calls, the second over a rewritten history: two segments per episode."""
    client = llm.client()
    first = await client.chat.completions.create(model=llm.model, messages=row["messages"], max_tokens=8)
    summary = [{"role": "user", "content": f"You said {first.choices[0].message.content!r}. {row['messages'][-1]['content']}"}]
    second = await client.chat.completions.create(model=llm.model, messages=summary, max_tokens=8)
    return second.choices[0].message.content or ""


def sample_index(sample: Sample) -> float:
    """A reward that differs within every group, so every group trains."""
    return float(sample.metadata["sample_index"])


@pytest.mark.slow
def test_every_segment_of_every_episode_trains(tmp_path):
    cfg = RunConfig.from_dict({
        "name": "segments", "output_dir": str(tmp_path), "model": {"name": "tiny-calculator", "device": "cpu"},
        "rollout": {"max_turns": 2, "max_new_tokens": 8, "max_total_tokens": 512},
        "grpo": {"steps": 1, "prompts_per_step": 2, "group_size": 2, "eval_every": 0, "checkpoint_every": 0,
                 "trajectories_per_step": -1},
        "data": {"train": "synthetic:calculator"},
    })
    result = rf.train_sync(cfg, agent=rf.AgentProgram(summarizing_agent), reward=sample_index)
    row = result.metrics
    saved = rf.types.load_jsonl(tmp_path / "segments" / "trajectories" / "step_000001.jsonl")
    assert row["groups/trained"] == 2 and row["program/forks"] == 4 and all(len(t.metadata["segments"]) == 1 for t in saved)
    sampled = sum(sum(t.loss_mask) + sum(sum(s["loss_mask"]) for s in t.metadata["segments"]) for t in saved)
    assert row["train/tokens"] == sampled * cfg.grpo.ppo_epochs  # both segments of all 4 episodes trained


@pytest.mark.parametrize("thinking", [True, False])
async def test_a_run_s_thinking_mode_reaches_the_program_through_bind(replay, tiny_policy, thinking):
    async def asks(row, llm):
        reply = await llm.client().chat.completions.create(model=llm.model, messages=row["messages"])
        return reply.choices[0].message.content

    program, engine = replay(["hello"], asks)
    cfg = RunConfig.from_dict({"name": "t", "rollout": {"enable_thinking": thinking}})
    bound = program.bind(cfg=cfg, engine=engine)
    assert bound.enable_thinking is thinking
    await bound.rollout({"messages": QUESTION})
    rendered = tiny_policy.tokenizer.apply_chat_template(QUESTION, tokenize=False, add_generation_prompt=True, enable_thinking=thinking)
    assert tiny_policy.tokenizer.decode(engine.prompts[0]) == rendered  # the prompt the program's call was served
