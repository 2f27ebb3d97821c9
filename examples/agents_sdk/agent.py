"""An OpenAI Agents SDK calculator agent, trained as it is by rlfactory-nb (`rf.AgentProgram`).

`solve(row, llm)` is an ordinary Agents SDK program: an Agent with one function tool, run by the
Runner against a chat-completions model. The only rlfactory-nb part is `llm`: the OpenAI client it
gets (`llm.client()`, pointed at this episode's session of the run's endpoint) and the run's tools
(`llm.tools`, the calculator MCP server of examples/calculator/tools.yaml, with the run's cache and
limits). Without a run (`llm.tools` None) the tool computes locally.

    program = rf.AgentProgram(solve, policy)            # notebook 01: rf.RolloutStepper(program, row)
    rf.train_sync(cfg, agent=program)                   # or config.yaml: rollout.program
"""

from __future__ import annotations

import ast
import operator
import re

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

set_tracing_disabled(True)  # offline: no traces exported

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


async def solve(row, llm) -> str:
    """One episode: the row's question to an Agents SDK agent; its answer (inside <answer> when the
    model wrote one) is the sample's final answer."""
    model = OpenAIChatCompletionsModel(model=llm.model, openai_client=llm.client())
    agent = Agent(name="calculator", model=model, tools=[calculator_tool(llm)])
    result = await Runner.run(agent, row["messages"][-1]["content"], max_turns=3)
    output = str(result.final_output)
    found = _ANSWER.findall(output)
    return found[-1].strip() if found else output.strip()


def calculator_tool(llm):
    """The calculator as an Agents SDK function tool, served by the run's ToolSet when there is one."""

    async def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression such as 12*(3+4) and return the number."""
        if llm.tools is not None:
            return (await llm.tools.call("calculator", {"expression": expression})).content
        return evaluate(expression)

    # not strict: the schema then reads as the calculator server's own, which the preset was warm-started on
    return function_tool(calculator, strict_mode=False)


def evaluate(expression: str) -> str:
    """+, -, *, / over numbers, read with `ast` (tool arguments are untrusted: never eval).

    >>> evaluate("12*(3+4)"), evaluate("2**10")
    ('84', 'error: only + - * / and numbers')
    """
    try:
        value = _value(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ZeroDivisionError, ValueError):
        return "error: only + - * / and numbers"
    return str(int(value)) if float(value).is_integer() else str(value)


def _value(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_value(node.left), _value(node.right))
    raise ValueError("not arithmetic")
