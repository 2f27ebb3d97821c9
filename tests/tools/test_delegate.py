"""Models and agents as tools (`rf.model_tool`, `rf.agent_tool`) in a ToolSet next to an MCP server:
one chat completion by an engine or an HTTP endpoint; a whole rollout of another agent, its
transcript kept in the result's details; a looping agent bounded by max_turns and the tool timeout."""

import asyncio

import httpx
import pytest
from rollout.scripted import ScriptedEngine  # tests/ is on sys.path

import rlfactory_nb as rf
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.tools import ToolSet
from rlfactory_nb.types import Trajectory, load_jsonl, save_jsonl

CALL = '<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'
CALCULATOR = {"name": "calculator", "command": "python", "args": ["-m", "rlfactory_nb.tools.servers.calculator"]}


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def toolset(*functions, **settings):
    return ToolSet((rf.tools.ServerConfig(**CALCULATOR),), functions, rf.tools.ToolSetSettings(**settings))


async def test_a_model_tool_on_an_engine_renders_its_own_template_and_is_cached(tokenizer):
    engine = ScriptedEngine(tokenizer, {"Summarise": ["A short summary."]})
    summarise = rf.model_tool("summarise", "Summarise a text.", engine=engine, system_prompt="Be brief.")
    async with toolset(summarise) as tools:
        assert set(tools.names) == {"calculator", "summarise"}
        assert tools.spec("summarise").input_schema["required"] == ["prompt"]
        first, again, calc = await tools.call_many(
            [("summarise", {"prompt": "Summarise: a long text"}), ("summarise", {"prompt": "Summarise: a long text"}),
             ("calculator", {"expression": "2+3"})]
        )  # fmt: skip
    assert (first.status, first.content, calc.content) == ("ok", "A short summary.", "5")
    assert again.cached and len(engine.prompts) == 1  # the same call twice at once: one completion
    assert engine.prompts[0].startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSummarise: a long text")
    assert engine.prompts[0].endswith("<|im_start|>assistant\n")
    usage = summarise.fn.client.usage
    assert usage.requests == 1 and usage.completion_tokens > 0 and usage.prompt_tokens == len(tokenizer.encode(engine.prompts[0]))


async def test_a_model_tool_over_http_and_a_down_endpoint_is_an_uncached_error(judge_server):
    http = httpx.AsyncClient()
    await http.post(f"{judge_server}/reset")
    answer = rf.model_tool("ask", "Ask a model.", base_url=f"{judge_server}/v1", model="text=Paris", system_prompt="Terse.")
    down = rf.model_tool("down", "A model that is down.", base_url="http://127.0.0.1:9/v1", model="m", max_retries=0)
    async with ToolSet.from_functions(answer, down) as tools:
        ok = await tools.call("ask", {"prompt": "Capital of France?"})
        failed = [await tools.call("down", {"prompt": "hello"}) for _ in range(2)]
    assert (ok.status, ok.content) == ("ok", "Paris")
    sent = (await http.get(f"{judge_server}/stats")).json()["last_body"]["messages"]
    await http.aclose()
    assert sent == [{"role": "system", "content": "Terse."}, {"role": "user", "content": "Capital of France?"}]
    assert [result.status for result in failed] == ["error", "error"] and "ChatError" not in failed[0].content
    assert "127.0.0.1:9" in failed[0].content and not failed[1].cached  # may come back: not cached
    assert down.fn.client.usage.failures == 2


def test_a_model_tool_needs_one_model_and_a_chat_template(tokenizer):
    with pytest.raises(ValueError, match="either engine= .* or base_url="):
        rf.model_tool("m", "d")
    bare = ScriptedEngine(tokenizer, {})
    bare.tokenizer = None
    with pytest.raises(ValueError, match="pass tokenizer="):
        rf.model_tool("m", "d", engine=bare)


async def test_an_agent_tool_runs_a_whole_rollout_and_keeps_its_transcript(tokenizer, tmp_path):
    helper_replies = {"12*7": [CALL.format(name="calculator", args='{"expression": "12*7"}'), "<answer>84</answer>"]}
    async with toolset() as helper_tools:
        helper = Agent(None, helper_tools, engine=ScriptedEngine(tokenizer, helper_replies), tokenizer=tokenizer)
        research = rf.agent_tool(helper, "helper", "Works out arithmetic with a calculator.")
        policy_replies = {"help": [CALL.format(name="helper", args='{"task": "What is 12*7?"}'), "<answer>84</answer>"]}
        async with ToolSet.from_functions(research) as tools:
            policy = Agent(None, tools, engine=ScriptedEngine(tokenizer, policy_replies), tokenizer=tokenizer)
            traj = await policy.rollout([{"role": "user", "content": "help me"}])
    (result,) = traj.tool_results()
    assert (result.status, result.content) == ("ok", "84")
    inner = Trajectory.from_dict(result.details["trajectory"])
    assert result.details["agent"] == "helper" and inner.num_turns == 2 and inner.tool_results()[0].content == "84"
    # the helper's tokens are not the policy's: only its answer is in the trajectory, as a masked tool response
    assert len(traj.loss_mask) == len(traj.response_ids) < len(traj.response_ids) + len(inner.response_ids)
    assert "12*7" not in tokenizer.decode([i for i, m in zip(traj.response_ids, traj.loss_mask) if m == 0])
    (loaded,) = load_jsonl(save_jsonl([traj], tmp_path / "t.jsonl"))  # details survive the run folder
    assert loaded.tool_results()[0].details == result.details


async def test_a_looping_agent_tool_is_bounded_by_its_max_turns_and_the_tool_timeout(tokenizer):
    loop = {"again": [CALL.format(name="calculator", args='{"expression": "1+1"}')]}
    async with toolset() as helper_tools:
        capped = Agent(None, helper_tools, engine=ScriptedEngine(tokenizer, loop), tokenizer=tokenizer, max_turns=3)
        slow = Agent(None, helper_tools, engine=ScriptedEngine(tokenizer, loop, delay_s=0.2), tokenizer=tokenizer, max_turns=1000)
        tools = ToolSet.from_functions(rf.agent_tool(capped, "capped", "loops"), rf.agent_tool(slow, "slow", "loops"), timeout_s=1.0)
        async with tools:
            started = asyncio.get_running_loop().time()
            by_turns, by_time = await tools.call_many([("capped", {"task": "again"}), ("slow", {"task": "again"})])
            elapsed = asyncio.get_running_loop().time() - started
    assert by_turns.status == "ok" and "no answer (max_turns after 3 turn(s))" in by_turns.content
    assert Trajectory.from_dict(by_turns.details["trajectory"]).num_turns == 3
    assert by_time.status == "timeout" and "timed out after 1 s" in by_time.content and elapsed < 3
