"""The preset's task definition agrees with the real calculator server the rollouts use."""

from pathlib import Path

from rlfactory_nb.models.presets import calculator
from rlfactory_nb.tools import ToolSet

EXAMPLE_TOOLS = Path(__file__).resolve().parents[2] / "examples" / "calculator" / "tools.yaml"


async def test_server_lists_exactly_the_spec_the_model_was_trained_on():
    async with ToolSet.from_config(EXAMPLE_TOOLS) as tools:
        assert [spec.to_openai() for spec in tools.specs] == [calculator.CALCULATOR_TOOL]
        for question in calculator.questions(5, seed=7):
            result = await tools.call("calculator", {"expression": question.expression})
            assert result.status == "ok" and result.content == str(question.answer)


def test_train_and_heldout_questions_are_disjoint():
    train = {row["messages"][0]["content"] for row in calculator.dataset("train", 2000)}
    heldout = {row["messages"][0]["content"] for row in calculator.dataset("heldout", 200)}
    assert len(train & heldout) <= 2  # 3 operators x 990^2 operand pairs: collisions are rare
