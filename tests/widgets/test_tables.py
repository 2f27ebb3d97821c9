"""Tables that read at a glance: one line a row (long cells cut, whole text on hover), a row count,
numbers to 3 places; eval comparisons coloured by better or worse and counted apart."""

import pandas as pd

from rlfactory_nb._views import CELL_CHARS, html_table
from rlfactory_nb.eval import EvalReport, EvalRow
from rlfactory_nb.widgets.reward_lab import table_html

QUESTION = ("Mark's book has 197 pages. Mark reads 27 pages a day for 5 days, then 9 pages a day for 2 days. "
            "How many pages are left to read? Let's think step by step and output the final answer after \"####\".")


def test_a_long_cell_is_cut_with_its_whole_text_on_hover_and_rows_are_counted():
    table = pd.DataFrame([{"question": QUESTION, "em": 0.9406250000000004}, {"question": "short", "em": 1.0}])
    rendered = table_html(table)
    assert "<div class='rf-table-count'>2 samples</div>" in rendered
    assert f"title='{QUESTION[:20]}" in rendered.replace("&#x27;", "'")
    assert QUESTION[: CELL_CHARS - 1] + "…" in rendered.replace("&#x27;", "'").replace("&quot;", '"')
    assert "0.941<" in rendered and "0.9406" not in rendered.split("title=")[0]
    assert "white-space:nowrap" in rendered  # one line a row: a question no longer wraps a word a line


def report(label, sampled, parse_errors, rows):
    return EvalReport(label, sampled, sampled, 0.5, 1.0, parse_errors, 2.0, rows)


def row(index, sampled, greedy):
    return EvalRow(index, "q", "1", "a", sampled, "a", greedy, 1)


def test_a_summary_is_a_table_rounded_to_3_places():
    summary = report("base", 0.9406250000000004, 0.0, []).summary()
    assert summary["sampled_reward"] == 0.9406250000000004  # still the dict it was
    assert "0.941" in repr(summary) and "0.94062" not in repr(summary)
    assert "<table class='rf-table'>" in summary._repr_html_() and ">0.941<" in summary._repr_html_()


def test_an_eval_comparison_colours_each_change_and_counts_better_and_worse_apart():
    base = report("base", 0.5, 0.1, [row(0, 0.0, 0.0), row(1, 1.0, 1.0), row(2, 0.0, 1.0)])
    new = report("trained", 0.6, 0.3, [row(0, 1.0, 1.0), row(1, 0.0, 1.0), row(2, 1.0, 0.0)])
    comparison = new.compare(base)
    assert (len(comparison.better()), len(comparison.worse()), len(comparison.changed())) == (1, 1, 3)
    verdicts = comparison.verdicts()
    assert verdicts["sampled_reward"] == "better" and verdicts["parse_errors_per_sample"] == "worse"
    assert verdicts["turns_mean"] == "same"
    page = comparison._repr_html_()
    assert "1 prompts better</span>, <span class='rf-worse'>1 worse</span>" in page and "1 changed evenly" in page
    assert "<td class='rf-num rf-worse'>" not in page  # the change row's cells are text ("+0.200")
    assert "<td class='rf-worse'>+0.200</td>" in page and "<td class='rf-better'>+0.100</td>" in page


def test_plain_tables_need_no_count_word_guessing():
    assert "3 prompts" in html_table(["a"], [[1], [2], [3]], "prompts")
