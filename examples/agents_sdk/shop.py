"""An OpenAI Agents SDK support agent for the shop (examples/shop), trained as it is by rlfactory-nb.

`solve(row, llm)` is an ordinary Agents SDK program that serves one customer: an Agent whose function
tools are the episode's (`llm.tools`: the four tools of this episode's own shop database), run by the
Runner; whenever the agent answers the customer without a tool call, the customer answers back
(`await llm.respond()`: the simulated user of the row, envs/user.py style) and the conversation goes on
until the customer is done. The reward is the shop's own (its final database, what the customer was
told), as for rf.Agent.

    rlfactory-nb train examples/shop/config.yaml rollout.program=examples/agents_sdk/shop.py:solve
"""

from __future__ import annotations

import json

import openai
from agents import Agent, FunctionTool, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.exceptions import MaxTurnsExceeded

set_tracing_disabled(True)  # offline: no traces exported

MAX_TURNS = 4
"""model calls of one Runner.run (one answer to the customer); the run's rollout.max_turns bounds the episode"""


async def solve(row, llm) -> str:
    """One customer conversation; returns the agent's last answer to the customer."""
    model = OpenAIChatCompletionsModel(model=llm.model, openai_client=llm.client())
    instructions = "\n".join(m["content"] for m in row["messages"] if m["role"] == "system")
    agent = Agent(name="shop", instructions=instructions or None, model=model, tools=episode_tools(llm))
    history = [{"role": m["role"], "content": m["content"]} for m in row["messages"] if m["role"] != "system"]
    answer = ""
    while True:
        try:
            result = await Runner.run(agent, history, max_turns=MAX_TURNS)
        except (MaxTurnsExceeded, openai.BadRequestError):  # the episode's calls or tokens are spent
            return answer
        answer = str(result.final_output)
        reply = await llm.respond()  # the customer's answer to it
        if reply is None or reply.done or not reply.messages:
            return answer
        history = result.to_input_list() + [{"role": m["role"], "content": m["content"]} for m in reply.messages]


def episode_tools(llm) -> list[FunctionTool]:
    """The episode's tools as Agents SDK function tools (none when the episode has none)."""
    return [] if llm.tools is None else [_function_tool(llm, spec) for spec in llm.tools.specs]


def _function_tool(llm, spec) -> FunctionTool:
    async def invoke(context, arguments: str) -> str:
        try:
            parsed = json.loads(arguments or "{}")
        except json.JSONDecodeError as error:
            return f"Error: the arguments are not JSON: {error}"
        if not isinstance(parsed, dict):
            return "Error: the arguments must be a JSON object"
        return (await llm.tools.call(spec.name, parsed)).content

    return FunctionTool(
        name=spec.name, description=spec.description, params_json_schema=spec.input_schema, on_invoke_tool=invoke,
        strict_json_schema=False,
    )
