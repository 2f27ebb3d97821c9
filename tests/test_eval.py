"""rf.evaluate on the real tiny model and calculator server: sampled and greedy, tool stats, comparison."""

from pathlib import Path

import pytest

from rlfactory_nb.config import RunConfig
from rlfactory_nb.eval import EvalReport, EvalRow, evaluate

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cfg():
    return RunConfig.from_yaml(
        ROOT / "examples/calculator/config.yaml",
        overrides={"tools.config": str(ROOT / "examples/calculator/tools.yaml"), "rollout.max_new_tokens": 32},
    )


@pytest.mark.slow
async def test_report_matches_its_rows_and_greedy_is_deterministic(tiny_policy, cfg):
    report = await evaluate(tiny_policy, "synthetic:calculator-heldout", cfg, limit=4, label="tiny")
    assert report.label == "tiny" and len(report.rows) == 4
    assert report.sampled_reward == pytest.approx(sum(r.sampled_reward for r in report.rows) / 4)
    assert report.greedy_reward == pytest.approx(sum(r.greedy_reward for r in report.rows) / 4)
    assert report.tool_call_rate == sum(1 for r in report.rows if r.tool_calls) / 4
    assert 0 <= report.tool_success_rate <= 1 and len(report.trajectories["greedy"]) == 4
    again = await evaluate(tiny_policy, "synthetic:calculator-heldout", cfg, limit=4)
    assert [r.greedy_answer for r in again.rows] == [r.greedy_answer for r in report.rows]
    assert "tiny" in report._repr_html_() and "<svg" in report.view().static_html()


@pytest.mark.slow
async def test_one_engine_evaluated_twice_samples_the_same_tokens(tiny_policy, cfg):
    """Held-out requests are seeded per prompt (eval.held_out_ids), not drawn from the engine's
    generator, whose state the first evaluation moved on."""
    engine = tiny_policy.engine("hf", seed=0)
    first = await evaluate(engine, "synthetic:calculator-heldout", cfg, limit=6)
    second = await evaluate(engine, "synthetic:calculator-heldout", cfg, limit=6)
    sampled = [t.response_ids for t in first.trajectories["sampled"]]
    assert [t.response_ids for t in second.trajectories["sampled"]] == sampled


def test_compare_gives_deltas_and_changed_prompts():
    def report(label, rewards):
        rows = [EvalRow(i, "q", "1", "a", r, "a", r, 1) for i, r in enumerate(rewards)]
        mean = sum(rewards) / len(rewards)
        return EvalReport(label, mean, mean, 1.0, 1.0, 0.0, 2.0, rows)

    comparison = report("trained", [1.0, 1.0, 0.0]).compare(report("base", [0.0, 1.0, 0.0]))
    assert comparison.deltas()["sampled_reward"] == pytest.approx(1 / 3)
    assert comparison.deltas()["tool_call_rate"] == 0
    assert [new.index for new, _ in comparison.changed()] == [0]
    assert "+0.333" in comparison._repr_html_()
    table = comparison.new.table()
    assert list(table.columns) == ["index", "question", "ground_truth", "sampled_answer", "sampled_reward", "greedy_answer", "greedy_reward", "tool_calls"]
    assert table["sampled_reward"].tolist() == [1.0, 1.0, 0.0]
    summary = comparison.table()
    assert list(summary.index) == ["base", "trained", "change"]
    assert summary.loc["change", "sampled_reward"] == pytest.approx(1 / 3)
