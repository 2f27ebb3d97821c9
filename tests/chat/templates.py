"""The reference chat templates in ../shared/reference/templates/, rendered the way transformers does.

Tests read the templates from there and skip when the folder is absent; the project never copies
them. Rendering uses transformers' own template compiler, so the text is what a tokenizer's
`apply_chat_template` would produce.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

TEMPLATES = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "templates"
QWEN3_TEMPLATE = TEMPLATES.parent / "qwen3" / "qwen3_chat_template.jinja"


def template_text(name: str) -> str:
    """The reference template `name` (e.g. "qwen3_5"), or a skip when the reference folder is absent."""
    path = QWEN3_TEMPLATE if name == "qwen3" else TEMPLATES / f"{name}.jinja"
    if not path.exists():
        pytest.skip(f"reference template {path} is absent")
    return path.read_text()


def render(template: str, messages: list[dict[str, Any]], **options: Any) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(conversations=[messages], chat_template=template, **options)
    return rendered[0]


class TemplateOnly:
    """The two things `detect_chat_format` reads from a tokenizer: its template and its vocabulary."""

    def __init__(self, template: str, vocab: dict[str, int] | None = None):
        self.chat_template = template
        self._vocab = vocab or {}

    def get_vocab(self) -> dict[str, int]:
        return self._vocab
