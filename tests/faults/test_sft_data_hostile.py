"""SFT data from files a user may have downloaded: a FIFO, a trajectory line of the wrong shape, and
binary garbage each end in a DatasetError naming the file, in bounded time (train/sft_data.py reads
through data/rows.py and types.load_jsonl)."""

import os

import pytest

from rlfactory_nb.errors import DatasetError
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.train.sft_data import sft_trajectories

from .conftest import finishes


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def hostile_files(folder):
    fifo = folder / "fifo.jsonl"
    os.mkfifo(fifo)
    shaped = folder / "shaped.jsonl"
    shaped.write_text('{"prompt_ids": [1], "turns": "x"}\n')
    garbage = folder / "garbage.jsonl"
    garbage.write_bytes(bytes(range(256)) * 4096)
    return {"a FIFO": (fifo, "FIFO"), "a wrong-shaped trajectory": (shaped, "line 1"), "binary garbage": (garbage, "UTF-8")}


@pytest.mark.parametrize("case", ["a FIFO", "a wrong-shaped trajectory", "binary garbage"])
def test_hostile_sft_data_is_a_dataset_error_naming_the_file(tmp_path, tokenizer, case):
    path, said = hostile_files(tmp_path)[case]
    done, outcome = finishes(lambda: sft_trajectories(str(path), tokenizer), 10.0)
    assert done, f"reading {case} did not end within 10 s"
    assert isinstance(outcome, DatasetError), outcome
    assert str(path) in str(outcome) and said in str(outcome)
