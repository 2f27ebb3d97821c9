"""Keep the defaults quoted in the docs equal to config.py's: each quoted default is written as
`VALUE<!-- default: dotted.key -->` (the comment is invisible when the Markdown renders).

    python scripts/docs_defaults.py          # list the quoted defaults that differ from config.py
    python scripts/docs_defaults.py --write  # rewrite them from config.py

tests/test_docs_defaults.py fails while one differs.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from rlfactory_nb.config import DEFAULTS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/decisions.md", "docs/gpu.md")
QUOTED = re.compile(r"([\w.,-]+)<!-- default: ([\w.]+) -->")


def default_text(key: str) -> str:
    """The default of `key` as the docs write it (thousands with commas, None as null)."""
    value = DEFAULTS
    for part in key.split("."):
        value = getattr(value, part)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:,}" if isinstance(value, int) else str(value)


def generated(text: str) -> str:
    """`text` with every quoted default set from config.py."""
    return QUOTED.sub(lambda match: f"{default_text(match[2])}<!-- default: {match[2]} -->", text)


def quoted(text: str) -> list[tuple[str, str]]:
    """(key, value as written) of every quoted default in `text`."""
    return [(match[2], match[1]) for match in QUOTED.finditer(text)]


def main(argv: list[str]) -> int:
    stale = 0
    for name in DOCS:
        path = ROOT / name
        text = path.read_text(encoding="utf-8")
        for key, value in quoted(text):
            if value != default_text(key):
                stale += 1
                print(f"{name}: {key} is quoted as {value}, config.py says {default_text(key)}")
        if "--write" in argv:
            path.write_text(generated(text), encoding="utf-8")
    return 1 if stale and "--write" not in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
