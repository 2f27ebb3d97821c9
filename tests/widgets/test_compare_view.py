"""ComparisonView over a hand-made comparison (no model): colours, hover text, order, static HTML."""

import math
import re

import pytest

from rlfactory_nb.compare import Scorer, build_comparison
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.types import Trajectory
from rlfactory_nb.widgets import ComparisonView, view_for
from rlfactory_nb.widgets.compare import CAVEAT, change_color, page_html


def hand_comparison():
    """Trajectory 0: one sampled token up by 1, another down by 0.5, a tool token between; trajectory 1:
    the first token again, up by 2 (so it sorts first, and that token's summed change is 3)."""
    tokenizer = build_tokenizer()
    ids = tokenizer.encode("Hi there my friend")
    assert len(set(ids[:4])) == 4
    first = Trajectory([ids[0]], [ids[1], ids[2], ids[3]], [1, 0, 1], [0.0, 0.0], id="a")
    second = Trajectory([ids[0]], [ids[1]], [1], [0.0], id="b")
    before = [[-2.0, -1.0], [-3.0]]
    after = [[-1.0, -1.5], [-1.0]]
    scorer = Scorer(None, tokenizer, "base", owned=False)
    return build_comparison((first, second), before, after, scorer, Scorer(None, tokenizer, "step 30", owned=False))


@pytest.fixture(scope="module")
def comparison():
    return hand_comparison()


def test_the_tables_and_the_order(comparison):
    assert comparison.tokens["change"].tolist() == [1.0, -0.5, 2.0]
    assert comparison.summary["id"].tolist() == ["b", "a"]
    assert comparison.turns[["trajectory", "turn", "change"]].values.tolist() == [[0, 0, 1.0], [0, 1, -0.5], [1, 0, 2.0]]
    top = comparison.top_tokens(3)
    assert top["direction"].tolist() == ["more", "less"] and top["change"].tolist() == [3.0, -0.5]


def test_the_strip_is_coloured_by_the_change_and_hover_shows_both_policies(comparison):
    view = comparison.view()
    assert isinstance(view, ComparisonView) and view_for(comparison) is not view
    assert [label for label, _ in view.selector.options] == ["1 (b): +2.000 nats", "0 (a): +0.500 nats"]
    view.selector.value = 0
    spans = re.findall(r"<span class='rf-token rf-change'[^>]*>", view.trajectory.value)
    assert len(spans) == 2 and view.trajectory.value.count("rf-masked' title='id") == 2  # prompt + tool token
    assert f"background:{change_color(1.0, 2.0)}" in spans[0] and f"background:{change_color(-0.5, 2.0)}" in spans[1]
    assert f"log p before -2.000 (p {math.exp(-2):.3f}), after -1.000 (p {math.exp(-1):.3f}), change +1.000" in spans[0]
    assert "<svg" in view.trajectory.value and "turn 2" in view.trajectory.value


def test_the_static_rendering_shows_the_selected_trajectory_the_table_and_the_caveat(comparison):
    view = ComparisonView(comparison)
    static = view.static_html()
    assert "trajectory 1 (b)" in static and "what the policy now says more" in static and CAVEAT in static
    view.selector.value = 0
    assert "trajectory 0 (a)" in view.static_html()
    assert page_html(comparison) == static


def test_identical_policies_show_white_tokens_and_say_nothing_moved(comparison):
    same = build_comparison(
        comparison.trajectories, [[-1.0, -1.0], [-1.0]], [[-1.0, -1.0], [-1.0]],
        *[Scorer(None, comparison.tokenizer, name, owned=False) for name in ("a", "b")],
    )
    static = page_html(same)
    assert static.count("background:rgb(255,255,255);color:#000'>") == 2 and "no token's log-probability changed" in static


def test_the_page_starts_at_the_first_sampled_token_in_a_sans_serif_font(comparison):
    """The prompt (often a whole system prompt) folds away; the strip below it starts with the first
    sampled token."""
    page = page_html(comparison, 0)
    assert "<div class='rf-comparison'>" in page and "font-family: sans-serif" in page
    folded, strip = page.split("</details>", 1)
    assert "<details class='rf-prompt'><summary>the prompt (1 tokens, not scored)" in folded
    first = strip.split("<div class='rf-strip'>", 1)[1]
    assert first.startswith("<span class='rf-token rf-change'")
