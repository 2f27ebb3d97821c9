"""The GSM8K example: synthetic problems whose own solutions score 1 under `rf.rewards.gsm8k`, the
real dataset's layouts (verl parquet as it is; GSM8K JSONL and save_to_disk through the converter),
the calculator tool on a problem's steps, and a CPU training run of examples/gsm8k/config.yaml."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlfactory_nb.data.rows import DatasetError, load_rows
from rlfactory_nb.examples import example
from rlfactory_nb.recipes.gsm8k.convert import main as convert
from rlfactory_nb.recipes.gsm8k.synthetic import INSTRUCTION, dataset
from rlfactory_nb.rewards import gsm8k
from rlfactory_nb.rewards.samples import make_sample
from rlfactory_nb.tools.servers.calculator import evaluate

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gsm8k"
SOLUTION = (
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips.\n#### 72"
)


def test_synthetic_problems_are_seeded_split_and_solved_by_their_solutions():
    train, heldout = dataset("train", 200), dataset("heldout", 50)
    assert dataset("train", 5) == train[:5]
    assert not {r["extra_info"]["question"] for r in train} & {r["extra_info"]["question"] for r in heldout}
    for row in train:
        solution = row["extra_info"]["answer"]
        assert row["messages"][0]["content"].endswith(INSTRUCTION)
        assert gsm8k(make_sample(solution, ground_truth=row["ground_truth"])) == 1.0
        for expression, value in re.findall(r"<<([^=]+)=(-?\d+)>>", solution):
            assert evaluate(expression) == value, solution
    assert gsm8k(make_sample("#### 7", ground_truth=train[0]["ground_truth"])) == 0.0


def test_the_example_dataset_is_notebook_ready(monkeypatch):
    monkeypatch.chdir(ROOT / "notebooks")
    ex = example("gsm8k")
    assert len(ex.dataset("train", 64)) == 64 and len(ex.dataset("eval", 16)) == 16
    assert ex.config().tools.config == str(ROOT / "examples/calculator/tools.yaml")


def test_verl_parquet_loads_as_it_is(tmp_path):
    import pyarrow
    import pyarrow.parquet

    record = {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": f"Natalia sold clips... {INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "72"},
        "extra_info": {"split": "train", "index": 0, "answer": SOLUTION, "question": "Natalia sold clips..."},
    }
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist([record]), tmp_path / "train.parquet")
    (row,) = load_rows(str(tmp_path / "train.parquet"))
    assert row["ground_truth"] == "72" and row["messages"] == record["prompt"]
    assert gsm8k(make_sample(SOLUTION, ground_truth=row["ground_truth"])) == 1.0


@pytest.mark.parametrize("layout", ["jsonl", "save_to_disk"])
def test_gsm8k_s_own_layouts_convert_to_rows_that_train(layout, tmp_path, capsys):
    records = [
        {"question": "Natalia sold clips...", "answer": SOLUTION},
        {"question": "Big?", "answer": "#### 1,200"},
    ]
    source = tmp_path / "gsm8k.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    if layout == "save_to_disk":
        import datasets

        datasets.Dataset.from_list(records).save_to_disk(str(tmp_path / "saved"))
        source = tmp_path / "saved"
    for target in (tmp_path / "train.parquet", tmp_path / "train.jsonl"):
        assert convert([str(source), str(target)]) == 0
        rows = load_rows(str(target))
        assert [r["ground_truth"] for r in rows] == ["72", "1200"]
        assert rows[0]["messages"] == [{"role": "user", "content": f"Natalia sold clips... {INSTRUCTION}"}]
    assert "wrote 2 problems" in capsys.readouterr().out


def test_rows_that_are_not_gsm8k_are_refused_naming_the_row(tmp_path, capsys):
    source = tmp_path / "bad.jsonl"
    source.write_text(json.dumps({"question": "q", "answer": "no final line"}) + "\n")
    assert convert([str(source), str(tmp_path / "out.jsonl")]) == 2
    assert "bad.jsonl:1: the answer has no final '#### n' line" in capsys.readouterr().err
    source.write_text(json.dumps({"problem": "q"}) + "\n")
    with pytest.raises(
        DatasetError, match="bad.jsonl:1: expected GSM8K's 'question' and 'answer'.*found problem"
    ):
        from rlfactory_nb.recipes.gsm8k.convert import convert as convert_file

        convert_file(source, tmp_path / "out.jsonl")


async def test_the_calculator_tool_computes_a_problem_s_steps():
    row = dataset("train", 1)[0]
    async with example("gsm8k").tools() as tools:
        for expression, value in re.findall(r"<<([^=]+)=(-?\d+)>>", row["extra_info"]["answer"]):
            assert (await tools.call("calculator", {"expression": expression})).content == value


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A random tiny Qwen3 with the preset tokenizer: the pipeline, without building the preset."""
    from tiny_models import random_qwen3, save_with_tokenizer

    return save_with_tokenizer(random_qwen3(max_positions=1024), tmp_path_factory.mktemp("tiny-qwen3"))


def test_train_command_runs_two_steps_of_the_example_on_cpu(tiny_model, tmp_path):
    """Two GRPO steps with the calculator server, an eval and a checkpoint, in a subprocess: about
    30 s on 2 busy CPU cores, so not marked slow."""
    command = [
        str(Path(sys.executable).with_name("rlfactory-nb")),
        "train",
        str(EXAMPLE / "config.yaml"),
        *("grpo.steps=2", "grpo.prompts_per_step=2", "grpo.group_size=2", "grpo.eval_every=2"),
        *("grpo.checkpoint_every=2", "data.eval_size=2", "rollout.max_turns=2"),
        f"model.name={tiny_model}",
        f"output_dir={tmp_path}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        command, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "finished step 2 of 2" in done.stdout
    run = tmp_path / "gsm8k-tiny"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1, 2]
    assert {"reward/mean", "reward/gsm8k", "eval/sampled_reward/mean"} <= set(rows[-1]), sorted(rows[-1])
    assert (run / "checkpoints" / "step_000002").is_dir()
