"""DeepSearch question sets in two layouts, and conversion between them.

- the verl / Search-R1 layout (parquet or JSONL), which verl and this package train on::

      {"data_source": "nq", "prompt": [{"role": "user", "content": "..."}], "ability": "fact-reasoning",
       "reward_model": {"style": "rule", "ground_truth": {"target": ["answer", ...]}},
       "extra_info": {"split": "train", "index": 0}}

  Search-R1's files also keep the source columns `id`, `question` and `golden_answers`.
- plain JSONL, one question per line: `{"question": "...", "answers": ["...", ...]}`, optionally with
  `id`, `data_source` and `extra_info`; FlashRAG's `golden_answers` is accepted for `answers`.

Reading either layout gives `Question` records. Writing the verl layout builds each prompt with this
recipe's system prompt: a Search-R1 file asks for `<search>` tags that this package does not parse,
so converting it re-prompts it for MCP tool calls, and a file converted twice stays the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rlfactory_nb.data.rows import DatasetError, read_records
from rlfactory_nb.recipes.deepsearch.prompt import SYSTEM_PROMPT, prompt_messages, question_from_messages
from rlfactory_nb.rewards.functions import gold_answers

Layout = Literal["verl", "plain"]
LAYOUTS: tuple[Layout, ...] = ("verl", "plain")


@dataclass(frozen=True)
class Question:
    """One question with every answer that counts as correct."""

    question: str
    answers: tuple[str, ...]
    data_source: str = "qa"
    """the benchmark it comes from ("nq", "hotpotqa", ...): evaluation reports EM per source"""
    extra_info: Mapping[str, Any] = field(default_factory=dict)
    """anything else (split, index, supporting titles); carried through conversion unchanged"""
    id: str | None = None


def read_questions(path: str | Path) -> list[Question]:
    """The questions of a `.jsonl` or `.parquet` file in either layout (see the module docstring)."""
    questions = [question_from_record(record, where) for where, record in read_records(path)]
    if not questions:
        raise DatasetError(f"dataset file {str(path)!r} has no rows")
    return questions


def question_from_record(record: Any, where: str) -> Question:
    """A `Question` from one row of either layout; `where` names the file and row in errors."""
    if not isinstance(record, dict):
        raise DatasetError(f"{where}: a row must be an object, got {type(record).__name__}")
    question = _question(record)
    if question is None:
        raise DatasetError(
            f"{where}: missing column 'question' (plain layout) or 'prompt' with a user message "
            f"(verl layout); columns present: {', '.join(record) or 'none'}"
        )
    extra_info = record.get("extra_info") or {}
    if not isinstance(extra_info, Mapping):
        raise DatasetError(f"{where}: column 'extra_info' must be an object, got {extra_info!r:.80}")
    identifier = record.get("id")
    return Question(
        question=question,
        answers=_answers(record, where),
        data_source=str(record.get("data_source") or "qa"),
        extra_info=dict(extra_info),
        id=None if identifier is None else str(identifier),
    )


def _question(record: Mapping[str, Any]) -> str | None:
    if isinstance(record.get("question"), str) and record["question"].strip():
        return record["question"].strip()
    prompt = record.get("prompt")
    return question_from_messages(prompt) if isinstance(prompt, list) else None


def _answers(record: Mapping[str, Any], where: str) -> tuple[str, ...]:
    column = next((key for key in ("answers", "golden_answers") if key in record), None)
    if column is not None:
        value = record[column]
    else:
        column = "reward_model.ground_truth.target"
        reward_model = record.get("reward_model")
        if not (isinstance(reward_model, Mapping) and "ground_truth" in reward_model):
            raise DatasetError(
                f"{where}: missing column 'answers' (plain layout) or 'reward_model.ground_truth.target' "
                f"(verl layout); columns present: {', '.join(record) or 'none'}"
            )
        value = reward_model["ground_truth"]
    try:
        answers = tuple(answer.strip() for answer in gold_answers(value) if answer.strip())
    except TypeError as error:
        raise DatasetError(f"{where}: column '{column}': {error}") from None
    if not answers:
        raise DatasetError(f"{where}: column '{column}' holds no answer")
    return answers


def verl_record(question: Question, index: int, system_prompt: str = SYSTEM_PROMPT) -> dict[str, Any]:
    """The verl / Search-R1 row of `question`, prompted with `system_prompt`."""
    extra_info = dict(question.extra_info)
    extra_info.setdefault("index", index)  # verl and Search-R1 rows carry their position
    record: dict[str, Any] = {} if question.id is None else {"id": question.id}
    record.update(
        question=question.question,
        data_source=question.data_source,
        prompt=prompt_messages(question.question, system_prompt),
        ability="fact-reasoning",
        reward_model={"style": "rule", "ground_truth": {"target": list(question.answers)}},
        extra_info=extra_info,
    )
    return record


def plain_record(question: Question) -> dict[str, Any]:
    """The plain JSONL row of `question`."""
    record: dict[str, Any] = {} if question.id is None else {"id": question.id}
    record.update(
        question=question.question, answers=list(question.answers), data_source=question.data_source
    )
    if question.extra_info:
        record["extra_info"] = dict(question.extra_info)
    return record


def write_questions(
    path: str | Path,
    questions: Iterable[Question],
    layout: Layout | None = None,
    system_prompt: str = SYSTEM_PROMPT,
) -> Path:
    """Write `questions` to a `.jsonl` or `.parquet` file in `layout` (default: verl for parquet,
    plain for JSONL)."""
    path = Path(path)
    if path.suffix not in (".jsonl", ".parquet"):
        raise DatasetError(f"{path}: write a .jsonl or .parquet file")
    layout = layout or ("verl" if path.suffix == ".parquet" else "plain")
    if layout not in LAYOUTS:
        raise DatasetError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    records = [
        verl_record(q, i, system_prompt) if layout == "verl" else plain_record(q)
        for i, q in enumerate(questions)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        _write_parquet(path, records)
    else:
        with path.open("w", encoding="utf-8") as out:
            out.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    return path


def _write_parquet(path: Path, records: list[dict[str, Any]]) -> None:
    import pyarrow
    import pyarrow.parquet

    # Columns from every row, not just the first (Table.from_pylist's rule): rows may differ in
    # optional columns such as `id` or `extra_info`.
    columns = list(dict.fromkeys(key for record in records for key in record))
    table = pyarrow.Table.from_pydict({key: [record.get(key) for record in records] for key in columns})
    pyarrow.parquet.write_table(table, path)
