"""Tool-call parsers by name: `get_parser("qwen3").parse(text) -> ParseResult(content, calls, errors)`."""

from rlfactory_nb.parsing import qwen3 as _qwen3  # noqa: F401  (registers "qwen3" and "hermes")
from rlfactory_nb.parsing.base import (
    ParseResult,
    ToolCallParser,
    format_error_for_model,
    get_parser,
    parser_names,
    register_parser,
)
from rlfactory_nb.parsing.qwen3 import Qwen3Parser

__all__ = [
    "ParseResult",
    "Qwen3Parser",
    "ToolCallParser",
    "format_error_for_model",
    "get_parser",
    "parser_names",
    "register_parser",
]
