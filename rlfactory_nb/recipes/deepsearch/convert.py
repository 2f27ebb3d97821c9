"""Convert DeepSearch question sets between the verl / Search-R1 layout and plain JSONL.

    python -m rlfactory_nb.recipes.deepsearch.convert nq_hotpotqa/train.parquet data/train.parquet
    python -m rlfactory_nb.recipes.deepsearch.convert nq_hotpotqa/test.parquet data/nq_test.parquet --only-source nq
    python -m rlfactory_nb.recipes.deepsearch.convert questions.jsonl train.jsonl --layout verl

The input layout is recognised per row; the output layout is `--layout`, by default verl for
.parquet and plain for .jsonl. Verl output is always prompted with this recipe's system prompt (see
data.py), so Search-R1's own files come out ready for `rlfactory-nb train`.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from rlfactory_nb.data.rows import DatasetError
from rlfactory_nb.recipes.deepsearch.data import LAYOUTS, read_questions, write_questions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rlfactory_nb.recipes.deepsearch.convert",
        description="Convert question sets between the verl/Search-R1 layout and plain JSONL.",
    )
    parser.add_argument("input", help="a .parquet or .jsonl file in either layout")
    parser.add_argument("output", help="the .parquet or .jsonl file to write")
    parser.add_argument(
        "--layout", choices=LAYOUTS, default=None, help="default: verl for .parquet, plain for .jsonl"
    )
    parser.add_argument(
        "--only-source",
        action="append",
        default=None,
        metavar="NAME",
        help="keep rows whose data_source is NAME (repeatable), e.g. nq",
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="keep at most this many rows (after filtering)"
    )
    args = parser.parse_args(argv)
    try:
        questions = read_questions(args.input)
        if args.only_source:
            questions = [q for q in questions if q.data_source in args.only_source]
        questions = questions[: args.limit] if args.limit is not None else questions
        if not questions:
            raise DatasetError(f"no rows left in {args.input} with data_source in {args.only_source}")
        path = write_questions(args.output, questions, args.layout)
    except DatasetError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    sources = ", ".join(
        f"{name} {count}" for name, count in Counter(q.data_source for q in questions).items()
    )
    print(f"wrote {len(questions)} questions to {path} ({sources})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
