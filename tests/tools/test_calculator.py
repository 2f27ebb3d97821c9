"""The calculator server: exact answers in the trained format. Refusing anything but arithmetic is a
security case: tests/faults/test_security.py."""


import pytest

from rlfactory_nb.tools import ToolSet
from rlfactory_nb.tools.servers.calculator import evaluate


@pytest.mark.parametrize(
    "expression, answer",
    [
        ("12*(3+4)", "84"),
        ("123*456", "56088"),
        ("10/5", "2"),  # integral results without ".0"
        ("10/4", "2.5"),
        ("7//2", "3"),
        ("-7 % 3", "2"),
        ("-3**2", "-9"),
        ("2**10", "1024"),
        ("sqrt(16) + abs(-2)", "6"),
        ("max(3, 9, 4) - min(3, 9, 4)", "6"),
        ("round(2.567, 2)", "2.57"),
        (" 999 - 1000 ", "-1"),
    ],
)
def test_arithmetic_answers_are_just_the_number(expression, answer):
    assert evaluate(expression) == answer


@pytest.mark.parametrize(
    "expression, message",
    [
        ("1/0", "division by zero"),
        ("5 % 0", "modulo by zero"),
        ("sqrt(-1)", "negative"),
        ("(-8)**(1/3)", "real"),
        ("1 +", "cannot parse"),
        ("1" * 600, "too long"),
        ("+".join(["1"] * 150), "too complex"),
    ],
)
def test_errors_are_short_messages(expression, message):
    result = evaluate(expression)
    assert result.startswith("error:") and message in result and len(result) < 200


async def test_calculator_over_stdio(repo_root):
    async with ToolSet.from_config(repo_root / "examples/calculator/tools.yaml") as tools:
        (spec,) = tools.specs
        assert spec.name == "calculator" and list(spec.input_schema["properties"]) == ["expression"]
        good, attack, bad = await tools.call_many(
            [
                ("calculator", {"expression": "12*(3+4)"}),
                ("calculator", {"expression": "__import__('os').system('id')"}),
                ("calculator", {"expression": "1/0"}),
            ]
        )
    assert (good.status, good.content) == ("ok", "84")
    assert attack.status == "error" and attack.content.startswith("error: only numbers")
    assert (bad.status, bad.content) == ("error", "error: division by zero")
