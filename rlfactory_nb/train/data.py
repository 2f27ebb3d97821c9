"""Prompt datasets for training and evaluation, and the seeded order a run draws them in.

A row is `{"messages": [...], "ground_truth": ..., **other columns}`: the prompt as chat messages and
what the reward function compares against. Sources:

- `synthetic:calculator` / `synthetic:calculator-heldout`: the embedded calculator task (disjoint
  seeds, so held-out questions are never trained on);
- a `.jsonl` or `.parquet` file whose rows have `messages` (a list of chat messages) or `prompt` (a
  string, taken as one user message, or a list of messages) plus `ground_truth`; other columns are
  kept and reach reward functions as `sample.metadata`. The verl / Search-R1 layout (`prompt`
  messages, `reward_model: {"ground_truth": ...}`, `data_source`, `extra_info`) loads unchanged, so
  datasets prepared for verl train here as they are;
- a `.json` file (a list of row objects, or JSON lines as `Dataset.to_json` writes them), a `.csv`
  file (string columns: `prompt` and `ground_truth`), or a folder written by `Dataset.save_to_disk`;
- from Python, a list of row dicts or a `datasets.Dataset` (`launch(..., train_data=rows)`).

`PromptOrder` decides which rows step k trains on from (seed, k) alone, and which rows dynamic
sampling's extra round r draws from (seed, k, r): no sampler state needs saving, so a resumed run
draws exactly the prompts the interrupted one would have.
"""

from __future__ import annotations

import functools
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlfactory_nb.presets import calculator

Row = dict[str, Any]

SYNTHETIC_SPLITS = {"synthetic:calculator": "train", "synthetic:calculator-heldout": "heldout"}
FILE_SUFFIXES = (".jsonl", ".parquet", ".json", ".csv")
SYNTHETIC_TRAIN_SIZE = 20_000
"""questions in the synthetic training set (cheap to make; larger than any run's steps x prompts)"""


class DatasetError(ValueError):
    """A dataset source that cannot be read, or a row without the columns training needs."""


def load_rows(source: Any, limit: int | None = None, what: str = "dataset") -> list[Row]:
    """The rows of `source` (see the module docstring), at most `limit` of them. `what` names the
    source in errors about objects (e.g. "train_data")."""
    if not isinstance(source, (str, Path)):
        return rows_from_object(source, limit, what)
    source = str(source)
    if source in SYNTHETIC_SPLITS:
        split = SYNTHETIC_SPLITS[source]
        size = limit if limit is not None else SYNTHETIC_TRAIN_SIZE
        return calculator.dataset(split, size)
    if source.startswith("synthetic:"):
        raise DatasetError(f"unknown synthetic dataset {source!r}; known: {', '.join(SYNTHETIC_SPLITS)}")
    path = Path(source)
    if path.suffix not in FILE_SUFFIXES and not path.is_dir():
        raise DatasetError(
            f"dataset {source!r}: expected a .jsonl, .json, .csv or .parquet file, a folder written by "
            f"Dataset.save_to_disk, or one of {', '.join(SYNTHETIC_SPLITS)}"
        )
    rows = [to_row(record, where) for where, record in read_records(path)]
    if not rows:
        raise DatasetError(f"dataset file {source!r} has no rows")
    return rows[:limit] if limit is not None else rows


def rows_from_object(data: Any, limit: int | None = None, what: str = "dataset") -> list[Row]:
    """Rows from a list of dicts or a `datasets.Dataset`, checked like a file's (errors name `what`
    and the row)."""
    if hasattr(data, "to_list") and hasattr(data, "column_names"):  # datasets.Dataset, without importing it
        records = data.select(range(min(limit, len(data)))).to_list() if limit is not None else data.to_list()
    elif isinstance(data, (list, tuple)):
        records = list(data[:limit] if limit is not None else data)
    else:
        raise DatasetError(
            f"{what} is a {type(data).__name__}: pass a list of row dicts, a datasets.Dataset, or a path"
        )
    if not records:
        raise DatasetError(f"{what} has no rows")
    return [to_row(record, f"{what} row {number}") for number, record in enumerate(records, start=1)]


def read_records(path: str | Path) -> list[tuple[str, Any]]:
    """The raw records of a `.jsonl`, `.json`, `.csv` or `.parquet` file or a `save_to_disk` folder,
    each with where it came from (`file:line`, `file row n`) for error messages. Parquet needs
    pyarrow; nested columns come back as dicts and lists (not numpy arrays, as pandas would give)."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(
            f"dataset file {str(path)!r} does not exist (data.train / data.eval in the run config)"
        )
    if path.is_dir():
        return _read_saved_dataset(path)
    if path.suffix == ".parquet":
        return _read_parquet(path)
    if path.suffix == ".csv":
        return _read_csv(path)
    if path.suffix == ".json" and path.read_text(encoding="utf-8").lstrip().startswith("["):
        return _read_json_list(path)
    return _read_jsonl(path)


def _read_json_list(path: Path) -> list[tuple[str, Any]]:
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise DatasetError(f"{path}: not valid JSON ({error.msg} at line {error.lineno})") from error
    return [(f"{path} row {number}", record) for number, record in enumerate(records, start=1)]


def _read_csv(path: Path) -> list[tuple[str, Any]]:
    import csv

    with path.open(encoding="utf-8", newline="") as file:
        return [(f"{path}:{number}", dict(record)) for number, record in enumerate(csv.DictReader(file), start=2)]


def _read_saved_dataset(path: Path) -> list[tuple[str, Any]]:
    try:
        import datasets
    except ImportError as error:
        raise DatasetError(f"reading the dataset folder {path} needs datasets: pip install datasets") from error
    try:
        loaded = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as error:
        raise DatasetError(f"{path}: not a folder written by Dataset.save_to_disk ({error})") from error
    if isinstance(loaded, datasets.DatasetDict):
        raise DatasetError(
            f"{path} holds a DatasetDict with splits {sorted(loaded)}: point data.train at one split's folder"
        )
    return [(f"{path} row {number}", record) for number, record in enumerate(loaded.to_list(), start=1)]


def _read_jsonl(path: Path) -> list[tuple[str, Any]]:
    records = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                records.append((f"{path}:{number}", json.loads(line)))
            except json.JSONDecodeError as error:
                raise DatasetError(f"{path}:{number}: not valid JSON ({error.msg})") from error
    return records


def _read_parquet(path: Path) -> list[tuple[str, Any]]:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as error:
        raise DatasetError(f"reading {path} needs pyarrow: pip install pyarrow") from error
    try:
        table = pyarrow.parquet.read_table(path)
    except (OSError, pyarrow.ArrowException) as error:
        raise DatasetError(f"{path}: not a readable parquet file ({error})") from error
    return [(f"{path} row {number}", record) for number, record in enumerate(table.to_pylist(), start=1)]


def to_row(record: Any, where: str) -> Row:
    """Validate one record and normalize `prompt` to `messages`."""
    if not isinstance(record, dict):
        raise DatasetError(f"{where}: a row must be a JSON object, got {type(record).__name__}")
    columns = ", ".join(record) or "none"
    if "messages" not in record and "prompt" not in record:
        hint = (
            ". Plain question/answer rows carry no prompt: convert them first, e.g. "
            "python -m rlfactory_nb.recipes.deepsearch.convert IN OUT.jsonl --layout verl"
            if "question" in record
            else ""
        )
        raise DatasetError(
            f"{where}: missing column 'messages' (a list of chat messages) or 'prompt' (a string); "
            f"columns present: {columns}{hint}"
        )
    row = dict(record)
    if "ground_truth" not in row:
        reward_model = row.get("reward_model")
        if not (isinstance(reward_model, dict) and "ground_truth" in reward_model):
            raise DatasetError(
                f"{where}: missing column 'ground_truth' (the answer the reward function checks; "
                f"verl-layout files give it as reward_model.ground_truth); columns present: {columns}"
            )
        row["ground_truth"] = reward_model["ground_truth"]
    if "messages" not in row:
        prompt = row.pop("prompt")
        row["messages"] = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    messages = row["messages"]
    if not isinstance(messages, list) or not messages or not all(_is_message(m) for m in messages):
        raise DatasetError(
            f"{where}: 'messages' must be a non-empty list of {{'role': ..., 'content': ...}} objects"
        )
    return row


def _is_message(message: Any) -> bool:
    return isinstance(message, dict) and isinstance(message.get("role"), str) and "content" in message


@dataclass(frozen=True)
class PromptOrder:
    """Which rows each step trains on: epochs of seeded shuffles, consumed `per_step` rows at a time."""

    num_rows: int
    per_step: int
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_rows < 1 or self.per_step < 1:
            raise DatasetError(
                f"need rows and prompts per step >= 1, got {self.num_rows} and {self.per_step}"
            )

    def indices(self, step: int) -> list[int]:
        """Row indices for `step` (1-based), a pure function of (seed, step)."""
        start = (step - 1) * self.per_step
        return [self._at(position) for position in range(start, start + self.per_step)]

    def _at(self, position: int) -> int:
        epoch, offset = divmod(position, self.num_rows)
        return _epoch_order(self.num_rows, self.seed, epoch)[offset]

    def rows(self, rows: list[Row], step: int) -> list[Row]:
        return [rows[i] for i in self.indices(step)]

    def refill(self, step: int, round_: int) -> list[int]:
        """Row indices for dynamic sampling's extra round `round_` (>= 1) of `step`: `per_step` rows
        drawn at random, avoiding rows the step drew before while enough remain; a pure function of
        (seed, step, round_), like `indices`.

        >>> order = PromptOrder(num_rows=6, per_step=2)
        >>> first, again = order.refill(3, 1), order.refill(3, 1)
        >>> first == again and not set(first) & set(order.indices(3))
        True
        """
        drawn = set(self.indices(step)).union(*(self.refill(step, earlier) for earlier in range(1, round_)))
        fresh = [index for index in range(self.num_rows) if index not in drawn]
        pool = fresh if len(fresh) >= self.per_step else list(range(self.num_rows))
        rng = random.Random(f"{self.seed}:{step}:refill:{round_}")
        if len(pool) < self.per_step:  # a dataset with fewer rows than a step has prompts
            return rng.choices(pool, k=self.per_step)
        return rng.sample(pool, self.per_step)


@functools.lru_cache(maxsize=4)
def _epoch_order(num_rows: int, seed: int, epoch: int) -> tuple[int, ...]:
    order = list(range(num_rows))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return tuple(order)
