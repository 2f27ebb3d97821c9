"""Dataset sources, row validation, and the seeded prompt order that makes resume exact."""

import json

import pytest

from rlfactory_nb.data.rows import DatasetError, PromptOrder, load_rows, require_prompts
from rlfactory_nb.models.presets import calculator


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_synthetic_splits_come_from_the_calculator_preset():
    train = load_rows("synthetic:calculator", limit=50)
    heldout = load_rows("synthetic:calculator-heldout", limit=50)
    assert train == calculator.dataset("train", 50) and heldout == calculator.dataset("heldout", 50)
    assert not {r["messages"][0]["content"] for r in train} & {r["messages"][0]["content"] for r in heldout}
    with pytest.raises(DatasetError, match="synthetic:calculator-heldout"):
        load_rows("synthetic:calculatr")


def test_jsonl_rows_with_messages_or_prompt_keep_their_extra_columns(tmp_path):
    path = write_jsonl(
        tmp_path / "data.jsonl",
        [
            {"messages": [{"role": "user", "content": "2+2?"}], "ground_truth": "4", "level": 1},
            {"prompt": "3+3?", "ground_truth": "6"},
        ],
    )
    rows = load_rows(path)
    assert rows[0] == {"messages": [{"role": "user", "content": "2+2?"}], "ground_truth": "4", "level": 1}
    assert rows[1] == {"messages": [{"role": "user", "content": "3+3?"}], "ground_truth": "6"}
    assert load_rows(path, limit=1) == rows[:1]


@pytest.mark.parametrize(
    "record, message",
    [
        ({"messages": [{"content": "no role"}], "ground_truth": "x"}, r"'messages' must be a non-empty list"),
        ({"messages": [], "ground_truth": "x"}, r"'messages' must be a non-empty list"),
        ([1, 2], r"a row must be a JSON object"),
    ],
)
def test_bad_rows_name_the_line_and_the_missing_column(tmp_path, record, message):
    path = write_jsonl(tmp_path / "data.jsonl", [record])
    with pytest.raises(DatasetError, match=message):
        load_rows(path)


def test_rows_without_a_ground_truth_or_a_prompt_load_and_a_run_without_an_environment_wants_a_prompt(tmp_path):
    """A prompt-only row (TRL's environment datasets) and a task row whose environment writes the
    prompt (GSM8K's question/answer, tau-bench's instruction) load; a run without an environment
    then needs a prompt in each row, and the error points plain question rows to the converter."""
    path = write_jsonl(tmp_path / "data.jsonl", [{"prompt": "hi"}, {"question": "hi", "answer": "x"}])
    prompt_only, task = load_rows(path)
    assert prompt_only == {"messages": [{"role": "user", "content": "hi"}]}
    assert task == {"question": "hi", "answer": "x", "messages": []}
    require_prompts([prompt_only], "data.train")
    with pytest.raises(DatasetError, match=r"data.train row 2: missing column 'messages'.*or 'prompt'.*question, answer.*convert.*env="):
        require_prompts([prompt_only, task], "data.train")


def test_missing_files_and_other_formats_are_clear_errors(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        load_rows(str(tmp_path / "nope.jsonl"))
    with pytest.raises(DatasetError, match="expected a .jsonl, .json, .csv or .parquet file"):
        load_rows(str(tmp_path / "data.txt"))
    (tmp_path / "bad.jsonl").write_text('{"prompt": \n')
    with pytest.raises(DatasetError, match="bad.jsonl:1: not valid JSON"):
        load_rows(str(tmp_path / "bad.jsonl"))


def test_prompt_order_is_a_function_of_seed_and_step_and_covers_each_epoch():
    order = PromptOrder(num_rows=10, per_step=4, seed=3)
    again = PromptOrder(num_rows=10, per_step=4, seed=3)
    assert [order.indices(s) for s in range(1, 6)] == [again.indices(s) for s in range(1, 6)]
    first_epoch = order.indices(1) + order.indices(2) + order.indices(3)[:2]
    assert sorted(first_epoch) == list(range(10))  # every row once before any repeats
    assert order.indices(1) != PromptOrder(num_rows=10, per_step=4, seed=4).indices(1)


def test_datasets_users_already_have_load_like_jsonl(tmp_path):
    datasets = pytest.importorskip("datasets")
    records = [{"prompt": "What is 1+1?", "ground_truth": "2"}, {"prompt": "What is 2+2?", "ground_truth": "4"}]
    dataset = datasets.Dataset.from_list(records)
    dataset.save_to_disk(str(tmp_path / "saved"))
    dataset.to_json(str(tmp_path / "lines.json"))
    dataset.to_csv(str(tmp_path / "table.csv"), index=False)
    (tmp_path / "list.json").write_text(json.dumps(records))
    expected = load_rows(write_jsonl(tmp_path / "data.jsonl", records))
    for source in (dataset, records, *(str(tmp_path / name) for name in ("saved", "lines.json", "table.csv", "list.json"))):
        assert load_rows(source) == expected, source
    assert load_rows(dataset, 1) == expected[:1]
    assert load_rows(datasets.Dataset.from_list([{"prompt": "hi"}]), what="train_data") == [{"messages": [{"role": "user", "content": "hi"}]}]
    datasets.DatasetDict({"train": dataset}).save_to_disk(str(tmp_path / "dict"))
    with pytest.raises(DatasetError, match="DatasetDict with splits \\['train'\\]"):
        load_rows(str(tmp_path / "dict"))
