"""Convert the real GSM8K to the verl layout that training reads.

    python -m rlfactory_nb.recipes.gsm8k.convert gsm8k/train.jsonl data/gsm8k/train.parquet
    python -m rlfactory_nb.recipes.gsm8k.convert gsm8k_saved/test data/gsm8k/test.jsonl

The input is GSM8K as its authors and Hugging Face ship it: JSONL, or a folder written by
`Dataset.save_to_disk`, with `question` and `answer` (the solution ending in `#### n`) columns. Each
row gets verl's prompt (the question, then `synthetic.INSTRUCTION`) and the number as ground truth.
verl's own GSM8K parquet needs no conversion: point `data.train` at it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rlfactory_nb.data.rows import DatasetError, read_records
from rlfactory_nb.recipes.gsm8k.synthetic import INSTRUCTION


def verl_row(record: Any, where: str, index: int) -> dict[str, Any]:
    """The verl-layout row of one GSM8K record; DatasetError naming `where` when it is not one."""
    if not (
        isinstance(record, dict)
        and isinstance(record.get("question"), str)
        and isinstance(record.get("answer"), str)
    ):
        columns = ", ".join(record) if isinstance(record, dict) else type(record).__name__
        raise DatasetError(f"{where}: expected GSM8K's 'question' and 'answer' text columns; found {columns}")
    number = record["answer"].rpartition("####")[2].strip().replace(",", "")
    if "####" not in record["answer"] or not number:
        raise DatasetError(f"{where}: the answer has no final '#### n' line")
    return {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": f"{record['question']} {INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": number},
        "extra_info": {"index": index, "question": record["question"], "answer": record["answer"]},
    }


def convert(source: Path, target: Path) -> int:
    """Write `source`'s rows to `target` (.jsonl or .parquet) in the verl layout; returns the count."""
    if target.suffix not in (".jsonl", ".parquet"):
        raise DatasetError(f"{target}: write a .jsonl or .parquet file")
    rows = [verl_row(record, where, index) for index, (where, record) in enumerate(read_records(source))]
    if not rows:
        raise DatasetError(f"{source} has no rows")
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.suffix == ".parquet":
        import pyarrow
        import pyarrow.parquet

        pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), target)
    else:
        target.write_text(
            "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8"
        )
    return len(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlfactory_nb.recipes.gsm8k.convert", description=__doc__)
    parser.add_argument("input", type=Path, help="GSM8K as .jsonl or a save_to_disk folder")
    parser.add_argument("output", type=Path, help="the .jsonl or .parquet file to write (verl layout)")
    args = parser.parse_args(argv)
    try:
        count = convert(args.input, args.output)
    except DatasetError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {count} problems to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
