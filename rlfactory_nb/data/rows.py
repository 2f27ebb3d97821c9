"""Prompt datasets for training and evaluation, and the seeded order a run draws them in.

A row is `{"messages": [...], "ground_truth": ..., **other columns}`: the prompt as chat messages and
what the reward function compares against. Both are optional where something else owns them: a
row needs `ground_truth` only when a reward reads it (an environment or a reward of the user's may
own the reward: runtime.py checks the run's), and a prompt only when no environment writes it in
`reset` (a row of GSM8K's `question`/`answer` or a tau-bench task's `instruction`, which the
environment turns into its first message; such a row has `messages` [] here). Sources:

- `synthetic:calculator` / `synthetic:calculator-heldout`: the embedded calculator task (disjoint
  seeds, so held-out questions are never trained on); likewise `synthetic:nl2sql` (questions with
  gold SQL over the example's generated database, recipes/nl2sql), `synthetic:gsm8k` (GSM8K-style
  word problems, recipes/gsm8k) and their `-heldout` splits, each registered by the recipe that
  makes it (`register_synthetic`; rlfactory_nb/recipes/synthetic.py);
- a `.jsonl` or `.parquet` file whose rows have `messages` (a list of chat messages) or `prompt` (a
  string, taken as one user message, or a list of messages) and `ground_truth`; other columns are
  kept and reach reward functions as `sample.metadata` (and an environment's `reset` as the row).
  The verl / Search-R1 layout (`prompt` messages, `reward_model: {"ground_truth": ...}`, `data_source`, `extra_info`) loads unchanged, so
  datasets prepared for verl train here as they are;
- a `.json` file (a list of row objects, or JSON lines as `Dataset.to_json` writes them), a `.csv`
  file (string columns: `prompt` and `ground_truth`), or a folder written by `Dataset.save_to_disk`;
- from Python, a list of row dicts or a `datasets.Dataset` (`launch(..., train_data=rows)`).

`PromptOrder` decides which rows step k trains on from (seed, k) alone, and which rows dynamic
sampling's extra round r draws from (seed, k, r): no sampler state needs saving, so a resumed run
draws exactly the prompts the interrupted one would have.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import itertools
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from rlfactory_nb.errors import DatasetError
from rlfactory_nb.local_files import file_kind

Row = dict[str, Any]

SYNTHETIC_SOURCES: dict[str, Callable[[int], list[Row]]] = {}
"""generated datasets by name, each called with how many rows to make (a generator with fewer
distinct questions gives all it has); filled by `register_synthetic`"""
RECIPES = "rlfactory_nb.recipes.synthetic"
"""the module whose import registers the package's own generated datasets; imported by name on first
use (as `_views` reaches the widgets), so that data/ never imports a recipe"""


def register_synthetic(name: str, make: Callable[[str, int], list[Row]]) -> None:
    """Make `synthetic:NAME` load `make("train", n)` and `synthetic:NAME-heldout` `make("heldout", n)`:
    a recipe (or a user's module) registers the dataset it generates."""
    SYNTHETIC_SOURCES[f"synthetic:{name}"] = functools.partial(make, "train")
    SYNTHETIC_SOURCES[f"synthetic:{name}-heldout"] = functools.partial(make, "heldout")


def synthetic_sources() -> dict[str, Callable[[int], list[Row]]]:
    """Every registered generated dataset, the recipes' own included."""
    importlib.import_module(RECIPES)
    return SYNTHETIC_SOURCES


FILE_SUFFIXES = (".jsonl", ".parquet", ".json", ".csv")
SYNTHETIC_TRAIN_SIZE = 20_000
"""questions in the synthetic training set (cheap to make; larger than any run's steps x prompts)"""
MAX_LINE_BYTES = 16 * 1024 * 1024
"""a JSON line (one row) longer than this is refused: the reader never holds more of it"""
MAX_JSON_FILE_BYTES = 256 * 1024 * 1024
"""a .json list is parsed whole, so it is capped; JSON lines files stream and have no total cap"""
MAX_ROW_GROUP_BYTES = 1024 * 1024 * 1024
"""a parquet row group whose metadata declares more uncompressed bytes is refused before decoding"""
PARQUET_BATCH_ROWS = 256
"""parquet rows decoded at a time, so a limit of a few rows decodes only a batch"""


def load_rows(source: Any, limit: int | None = None, what: str = "dataset") -> list[Row]:
    """The rows of `source` (see the module docstring), at most `limit` of them: a file is read only
    as far as that. `what` names the source in errors about objects (e.g. "train_data")."""
    if not isinstance(source, (str, Path)):
        return rows_from_object(source, limit, what)
    source = str(source)
    if source.startswith("synthetic:"):
        if source not in synthetic_sources():
            raise DatasetError(f"unknown synthetic dataset {source!r}; known: {', '.join(SYNTHETIC_SOURCES)}")
        return SYNTHETIC_SOURCES[source](limit if limit is not None else SYNTHETIC_TRAIN_SIZE)
    path = Path(source)
    if path.suffix not in FILE_SUFFIXES and not path.is_dir():
        raise DatasetError(
            f"dataset {source!r}: expected a .jsonl, .json, .csv or .parquet file, a folder written by "
            f"Dataset.save_to_disk, or one of {', '.join(synthetic_sources())}"
        )
    rows = [to_row(record, where) for where, record in read_records(path, limit)]
    if not rows:
        raise DatasetError(f"dataset file {source!r} has no rows")
    return rows


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


def read_records(path: str | Path, limit: int | None = None) -> list[tuple[str, Any]]:
    """The first `limit` (default: all) raw records of a `.jsonl`, `.json`, `.csv` or `.parquet` file
    or a `save_to_disk` folder, each with where it came from (`file:line`, `file row n`) for error
    messages. Parquet needs pyarrow; nested columns come back as dicts and lists (not numpy arrays,
    as pandas would give). Files are read lazily and within the bounds above; anything unreadable is
    a DatasetError naming the file and the line or row."""
    return list(itertools.islice(_iter_records(Path(path)), limit))


def _iter_records(path: Path) -> Iterator[tuple[str, Any]]:
    if not path.exists():
        raise DatasetError(
            f"dataset file {str(path)!r} does not exist (data.train / data.eval in the run config)"
        )
    if path.is_dir():
        return _read_saved_dataset(path)
    if not path.is_file():  # a FIFO would block the read forever; a socket or device is no dataset either
        raise DatasetError(f"dataset {str(path)!r} is {file_kind(path.stat().st_mode)}, not a file or a folder")
    if path.suffix == ".parquet":
        return _read_parquet(path)
    if path.suffix == ".csv":
        return _read_csv(path)
    if path.suffix == ".json" and _starts_with_bracket(path):
        return _read_json_list(path)
    return _read_jsonl(path)


def _starts_with_bracket(path: Path) -> bool:
    with path.open("rb") as file:
        return file.read(4096).lstrip().startswith(b"[")


def parse_json(text: bytes | str, where: str) -> Any:
    """`json.loads`, with every way it fails (bad syntax or UTF-8, nesting too deep, an integer of
    more digits than Python converts) as a DatasetError naming `where`."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise DatasetError(f"{where}: not valid JSON ({error.msg})") from None
    except UnicodeDecodeError as error:
        raise DatasetError(f"{where}: not valid UTF-8 ({error.reason} at byte {error.start})") from None
    except RecursionError:
        raise DatasetError(f"{where}: JSON nested too deeply") from None
    except ValueError as error:  # e.g. an integer past sys.get_int_max_str_digits()
        raise DatasetError(f"{where}: unreadable JSON value ({error})") from None


def bounded_lines(path: Path | BinaryIO, max_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes) for each line of `path` (or of an open binary file), read lazily; None
    for a line longer than `max_bytes` (which is skipped without being held in memory)."""
    with path.open("rb") if isinstance(path, Path) else contextlib.nullcontext(path) as file:
        for number in itertools.count(1):
            line = file.readline(max_bytes + 1)
            if not line:
                return
            if len(line) > max_bytes and not line.endswith(b"\n"):
                while (rest := file.readline(max_bytes)) and not rest.endswith(b"\n"):
                    pass
                yield number, None
            else:
                yield number, line


def _read_json_list(path: Path) -> Iterator[tuple[str, Any]]:
    with path.open("rb") as file:
        text = file.read(MAX_JSON_FILE_BYTES + 1)
    if len(text) > MAX_JSON_FILE_BYTES:
        raise DatasetError(
            f"{path}: a JSON list file is read whole and may hold at most {MAX_JSON_FILE_BYTES:,} bytes; "
            "write JSON lines (.jsonl) for larger datasets"
        )
    records = parse_json(text, str(path))
    if not isinstance(records, list):
        raise DatasetError(f"{path}: expected a list of row objects, got {type(records).__name__}")
    yield from ((f"{path} row {number}", record) for number, record in enumerate(records, start=1))


def _read_csv(path: Path) -> Iterator[tuple[str, Any]]:
    import csv

    with path.open(encoding="utf-8", errors="strict", newline="") as file:
        reader = csv.DictReader(file)
        try:
            for record in reader:
                yield f"{path}:{reader.line_num}", dict(record)
        except csv.Error as error:  # e.g. a field past csv.field_size_limit() (131,072 characters)
            raise DatasetError(f"{path}:{reader.line_num + 1}: unreadable CSV ({error})") from None
        except UnicodeDecodeError as error:  # decoded in chunks: the line is where the chunk begins
            raise DatasetError(
                f"{path}: after line {reader.line_num}: not valid UTF-8 ({error.reason})"
            ) from None


def _read_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    for number, line in bounded_lines(path):
        where = f"{path}:{number}"
        if line is None:
            raise DatasetError(f"{where}: line longer than {MAX_LINE_BYTES:,} bytes")
        if line.strip():
            yield where, parse_json(line, where)


def _read_saved_dataset(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        import datasets
    except ImportError as error:
        raise DatasetError(
            f"reading the dataset folder {path} needs datasets: pip install datasets"
        ) from error
    _check_data_files_inside(path)
    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as error:  # noqa: BLE001 - datasets and pyarrow raise many types for a broken folder
        raise DatasetError(f"{path}: not a folder written by Dataset.save_to_disk ({error})") from None
    if isinstance(loaded, datasets.DatasetDict):
        raise DatasetError(
            f"{path} holds a DatasetDict with splits {sorted(loaded)}: point data.train at one split's folder"
        )
    yield from ((f"{path} row {number}", record) for number, record in enumerate(loaded, start=1))


def _check_data_files_inside(path: Path) -> None:
    """A save_to_disk folder's state.json names its arrow files; `datasets` joins each name to the
    folder, so an absolute name (or `..`) would read another dataset. Only plain names are let through."""
    state = path / "state.json"
    if not state.is_file():
        return  # a DatasetDict folder, or not a dataset at all: load_from_disk says which
    with state.open("rb") as file:
        text = file.read(MAX_LINE_BYTES + 1)
    if len(text) > MAX_LINE_BYTES:
        raise DatasetError(f"{state}: longer than {MAX_LINE_BYTES:,} bytes")
    files = parse_json(text, str(state))
    files = files.get("_data_files") if isinstance(files, dict) else None
    if not isinstance(files, list):
        raise DatasetError(f"{state}: expected an object with a '_data_files' list")
    for entry in files:
        name = entry.get("filename") if isinstance(entry, dict) else None
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise DatasetError(
                f"{state}: data file {name!r} is not a plain file name inside the folder "
                "(an absolute path or '..' would read another dataset)"
            )


def _read_parquet(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        import pyarrow.parquet
    except ImportError as error:
        raise DatasetError(f"reading {path} needs pyarrow: pip install pyarrow") from error
    number = 0
    try:
        file = pyarrow.parquet.ParquetFile(path)
        for group in range(file.metadata.num_row_groups):
            size = file.metadata.row_group(group).total_byte_size
            if size > MAX_ROW_GROUP_BYTES:
                raise DatasetError(
                    f"{path}: row group {group} declares {size:,} bytes uncompressed, more than "
                    f"{MAX_ROW_GROUP_BYTES:,}; write smaller row groups"
                )
        for batch in file.iter_batches(batch_size=PARQUET_BATCH_ROWS):
            for record in batch.to_pylist():
                number += 1
                yield f"{path} row {number}", record
    except DatasetError:
        raise
    except Exception as error:  # noqa: BLE001 - pyarrow raises many types for a broken file
        raise DatasetError(f"{path}: not a readable parquet file (near row {number + 1}: {error})") from None


def to_row(record: Any, where: str) -> Row:
    """Validate one record and normalize `prompt` to `messages` (a row without either gets none:
    `require_prompts` says whether that is allowed); lift a verl-layout ground truth."""
    if not isinstance(record, dict):
        raise DatasetError(f"{where}: a row must be a JSON object, got {type(record).__name__}")
    row = dict(record)
    reward_model = row.get("reward_model")
    if "ground_truth" not in row and isinstance(reward_model, dict) and "ground_truth" in reward_model:
        row["ground_truth"] = reward_model["ground_truth"]
    given = "messages" in row or "prompt" in row  # neither: a task whose environment writes the prompt
    if "messages" not in row:
        prompt = row.pop("prompt", [])
        row["messages"] = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    messages = row["messages"]
    if not isinstance(messages, list) or (given and not messages) or not all(_is_message(m) for m in messages):
        raise DatasetError(
            f"{where}: 'messages' must be a non-empty list of {{'role': ..., 'content': ...}} objects"
        )
    return row


def require_prompts(rows: list[Row], what: str) -> None:
    """Raise DatasetError at the first row without a prompt: a run whose environment does not write
    the prompt in `reset` needs one in every row."""
    for number, row in enumerate(rows, start=1):
        if not row["messages"]:
            columns = ", ".join(key for key in row if key != "messages") or "none"
            hint = (
                ". Plain question/answer rows carry no prompt: convert them first, e.g. "
                "python -m rlfactory_nb.recipes.deepsearch.convert IN OUT.jsonl --layout verl, or give "
                "an environment whose reset writes the prompt from the row (env=)"
                if "question" in row
                else "; or give an environment whose reset writes the prompt from the row (env=)"
            )
            raise DatasetError(
                f"{what} row {number}: missing column 'messages' (a list of chat messages) or 'prompt' "
                f"(a string); columns present: {columns}{hint}"
            )


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
