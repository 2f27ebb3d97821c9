"""The agent-program endpoint: its overhead per call, and its throughput against rf.Agent.

    OMP_NUM_THREADS=1 python bench/endpoint.py [--quick]

1. Overhead per call. One program episode makes two calls through the `openai` client (the first
   rendered whole, the second continuing it by a masked delta); each call's wall time in the
   program minus the time the engine spent in `generate` for it is the endpoint's overhead (HTTP,
   JSON, rendering, parsing, the client). Alternating with those episodes, the same prompts go to the
   engine's own `generate` directly, so both generate timings come from one run side by side.
2. 64 concurrent programs: the same 64 calculator episodes (same prompts, tools, limits and seeds,
   so the same tokens) run by `rf.Agent` and by an `rf.AgentProgram` whose hand-written tool loop
   talks to the endpoint; model calls per second, alternating rounds.

The engine is the tiny-calculator preset's hf engine. Writes bench/results/endpoint.{json,md}.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `bench` importable as a script

from bench._common import machine_line, markdown_table, script_args, section, write_result
from rlfactory_nb.engines.base import SamplingParams
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.programs import AgentProgram
from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.rollout.groups import rollout_groups
from rlfactory_nb.rollout.tokens import prompt_ids
from rlfactory_nb.seeds import SampleId
from rlfactory_nb.tools.python import tool
from rlfactory_nb.tools.toolset import ToolSet

NAME = "endpoint"
QUICK = "--quick" in sys.argv
EPISODES = 16 if QUICK else 60
"""overhead episodes (two calls each)"""
ROUNDS = 2 if QUICK else 3
"""throughput rounds per variant (one warm-up more)"""
CONCURRENT = 64
QUESTION = [{"role": "user", "content": "What is 123+456?"}]
WAYS = ("in_memory", "http")
"""how the program's `llm.client()` reaches the endpoint: in memory (the default), or loopback HTTP"""


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression such as 12*(3+4) and return the number."""
    left, _, right = expression.partition("+")
    try:
        return str(int(left) + int(right))
    except ValueError:
        return "error: write an addition"


SCHEMAS = [calculator.spec.to_openai()]


class TimedEngine:
    """The engine, with the seconds each `generate` took (the endpoint's calls are sequential here)."""

    def __init__(self, engine: Any):
        self.engine, self.seconds = engine, []

    async def generate(self, ids: list[int], sampling: SamplingParams) -> Any:
        started = time.perf_counter()
        out = await self.engine.generate(ids, sampling)
        self.seconds.append(time.perf_counter() - started)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


async def two_calls(row: dict[str, Any], llm: Any) -> str:
    """The overhead probe: a call, its reply and the tool's result (a user turn when it made no call),
    a second call; times both."""
    client, timings = llm.client(), row["timings"]
    messages = list(row["messages"])
    for _ in range(2):
        started = time.perf_counter()
        reply = await client.chat.completions.create(model=llm.model, messages=messages, tools=SCHEMAS, max_tokens=48)
        timings.append(time.perf_counter() - started)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        answers = [{"role": "tool", "tool_call_id": call.id, "content": "579"} for call in message.tool_calls or []]
        messages += answers or [{"role": "user", "content": "and 7+8?"}]
    return "done"


async def tool_loop(row: dict[str, Any], llm: Any) -> str:
    """The throughput program: the rf.Agent's loop, written against the openai client."""
    client, schemas = llm.client(), [spec.to_openai() for spec in llm.tools.specs]
    messages = list(row["messages"])
    for turn in range(3):
        reply = (await client.chat.completions.create(model=llm.model, messages=messages, tools=schemas)).choices[0].message
        messages.append(reply.model_dump(exclude_none=True))
        if not reply.tool_calls or turn == 2:
            return reply.content or ""
        results = await llm.tools.call_many([(c.function.name, json.loads(c.function.arguments)) for c in reply.tool_calls])
        messages += [{"role": "tool", "tool_call_id": c.id, "content": r.content} for c, r in zip(reply.tool_calls, results)]
    return ""


def percentiles(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return {"p50_ms": at(0.50) * 1e3, "p99_ms": at(0.99) * 1e3, "mean_ms": statistics.fmean(ordered) * 1e3}


async def overhead(policy: Policy) -> dict[str, Any]:
    """Episodes alternate between the two ways in (`llm.client()` in memory, the same client over
    loopback HTTP) and the engine's own generate on the same prompt, so all three share one run."""
    engine = TimedEngine(policy.engine("hf"))
    programs = {
        way: AgentProgram(two_calls, engine=engine, tokenizer=policy.tokenizer, sampling=SamplingParams(temperature=0),
                          in_memory=way == "in_memory")
        for way in WAYS
    }
    direct_ids = prompt_ids(policy.tokenizer, QUESTION, SCHEMAS)
    direct: list[float] = []
    through = {way: [] for way in WAYS}
    over = {way: [] for way in WAYS}
    served = {way: [] for way in WAYS}
    spliced = 0
    for episode in range(EPISODES + 2):  # two warm-up episodes
        for way, program in programs.items():
            timings: list[float] = []
            engine.seconds.clear()
            traj = await program.rollout({"messages": QUESTION, "timings": timings})
            if episode >= 2:
                served[way] += [ms / 1e3 for ms in traj.metadata["program"]["serve_ms"]]
                spliced += bool(traj.metadata["program"]["merged"])
                through[way] += engine.seconds
                over[way] += [call - generate for call, generate in zip(timings, engine.seconds)]
        started = time.perf_counter()
        await engine.engine.generate(direct_ids, SamplingParams(temperature=0, max_new_tokens=48))
        if episode >= 2:
            direct.append(time.perf_counter() - started)
    for program in programs.values():
        await program.close()
    return {
        "calls": len(over["in_memory"]),
        "engine_generate": percentiles(direct),
        **{f"generate_inside_endpoint_{way}": percentiles(through[way]) for way in WAYS},
        **{f"endpoint_overhead_{way}": percentiles(over[way]) for way in WAYS},
        "endpoint_server_side": percentiles(served["in_memory"] + served["http"]),
        "spliced_calls": spliced,
    }


async def throughput(policy: Policy) -> dict[str, Any]:
    engine = policy.engine("hf")
    tools = ToolSet.from_functions(calculator)
    await tools.start()
    rows = [{"messages": [{"role": "user", "content": f"What is {100 + i}+{200 + 3 * i}?"}]} for i in range(CONCURRENT)]
    sampling = SamplingParams(temperature=1.0)
    agent = Agent(policy, tools, engine=engine, max_turns=3, max_new_tokens=48, max_total_tokens=1024, sampling=sampling)
    program = AgentProgram(
        tool_loop, engine=engine, tokenizer=policy.tokenizer, tools=tools, max_calls=3, max_new_tokens=48,
        max_total_tokens=1024, sampling=sampling, request_sampling=False, max_connections=4,
    )
    rates: dict[str, list[float]] = {"rf.Agent": [], "AgentProgram": []}
    calls: dict[str, int] = {}
    for round_ in range(ROUNDS + 1):
        for name, runner in (("rf.Agent", agent), ("AgentProgram", program)):
            started = time.perf_counter()
            groups = await rollout_groups(runner, rows, 1, sample_ids=lambda p, s, r=round_: SampleId(0, r, p, s))
            seconds = time.perf_counter() - started
            calls[name] = sum(g[0].num_turns for g in groups)
            if round_:
                rates[name].append(calls[name] / seconds)
    await program.close()
    await tools.stop()
    medians = {name: statistics.median(values) for name, values in rates.items()}
    return {"calls_per_episode_set": calls, "calls_per_s": medians, "ratio": medians["AgentProgram"] / medians["rf.Agent"]}


def main() -> None:
    machine = machine_line()
    policy = Policy.load("tiny-calculator")
    cost = asyncio.run(overhead(policy))
    rate = asyncio.run(throughput(policy))
    data = {"overhead": cost, "throughput": rate}
    ms = lambda d: (f"{d['p50_ms']:.2f}", f"{d['p99_ms']:.2f}")
    table = markdown_table(
        ["per call (ms)", "p50", "p99"],
        [["the engine's own generate (at most 48 tokens, greedy)", *ms(cost["engine_generate"])],
         ["generate inside an endpoint call (in memory)", *ms(cost["generate_inside_endpoint_in_memory"])],
         ["endpoint overhead as the program sees it, `llm.client()` in memory", *ms(cost["endpoint_overhead_in_memory"])],
         ["endpoint overhead as the program sees it, the same client over loopback HTTP", *ms(cost["endpoint_overhead_http"])],
         ["of which the endpoint's own work (history, render, parse; no HTTP)", *ms(cost["endpoint_server_side"])]],
    )
    throughput_table = markdown_table(
        ["64 concurrent episodes", "model calls / s"],
        [[name, f"{value:.1f}"] for name, value in rate["calls_per_s"].items()]
        + [["AgentProgram / rf.Agent", f"{rate['ratio']:.2f}x"]],
    )
    bullets = [
        (f"- Overhead over {cost['calls']} calls each way ({cost['spliced_calls']} of {2 * EPISODES} second calls "
        "continued the first by a masked delta; the others followed a new user turn, which Qwen3's template renders "
        f"whole, the costlier path): p50 {cost['endpoint_overhead_in_memory']['p50_ms']:.2f} ms with `llm.client()` "
        f"(in memory), {cost['endpoint_overhead_http']['p50_ms']:.2f} ms over loopback HTTP (a framework given "
        f"`llm.base_url`), against the goal of 5 ms; the endpoint's own part is p50 "
        f"{cost['endpoint_server_side']['p50_ms']:.2f} ms. The rest is the openai client's own request handling "
        "(it runs in the program, whoever serves it) and, over HTTP, the loopback connection and aiohttp."),
        (f"- Throughput: the same 64 calculator episodes ({rate['calls_per_episode_set']['rf.Agent']} model calls "
        f"with rf.Agent, {rate['calls_per_episode_set']['AgentProgram']} through the endpoint; same seeds, so the "
        f"same tokens), medians of {ROUNDS} alternating rounds: {rate['ratio']:.2f}x (goal >= 0.9x)."),
    ]
    markdown = section(
        "Agent programs: the endpoint's overhead per call and its throughput against rf.Agent",
        "bench/endpoint.py", script_args(), machine, table, bullets, throughput_table,
    )
    write_result(NAME, data, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
