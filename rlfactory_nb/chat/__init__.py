"""Model families (chat formats) and their tool-call parsers.

`get_chat_format("qwen3")` or `detect_chat_format(tokenizer)` gives a family's `ChatFormat`;
`get_parser("qwen3").parse(text, tools=None) -> ParseResult(content, calls, errors, reasoning, answer)`
(`tools`: the offered `ToolSpec`s, which type XML-style values by their schemas).
A family is one module here that registers its record (qwen3.py, qwen3_xml.py).
"""

from rlfactory_nb.chat import deepseek_v3 as _deepseek_v3  # noqa: F401  (registers "deepseek_v3")
from rlfactory_nb.chat import deepseek_v4 as _deepseek_v4  # noqa: F401  (registers "deepseek_v4")
from rlfactory_nb.chat import deepseek_v32 as _deepseek_v32  # noqa: F401  (registers "deepseek_v32")
from rlfactory_nb.chat import gemma4 as _gemma4  # noqa: F401  (registers "gemma4")
from rlfactory_nb.chat import glm4_5 as _glm4_5  # noqa: F401  (registers "glm4_5" and "glm4_7")
from rlfactory_nb.chat import gpt_oss as _gpt_oss  # noqa: F401  (registers "gpt_oss")
from rlfactory_nb.chat import kimi_k2 as _kimi_k2  # noqa: F401  (registers "kimi_k2")
from rlfactory_nb.chat import kimi_k3 as _kimi_k3  # noqa: F401  (registers "kimi_k3")
from rlfactory_nb.chat import llama3 as _llama3  # noqa: F401  (registers "llama3")
from rlfactory_nb.chat import llama4 as _llama4  # noqa: F401  (registers "llama4")
from rlfactory_nb.chat import mistral as _mistral  # noqa: F401  (registers "mistral")
from rlfactory_nb.chat import qwen2_5 as _qwen2_5  # noqa: F401  (registers "qwen2_5")
from rlfactory_nb.chat import qwen3 as _qwen3  # noqa: F401  (registers the "qwen3" family and parser)
from rlfactory_nb.chat import qwen3_xml as _qwen3_xml  # noqa: F401  (registers "qwen3_xml")
from rlfactory_nb.chat.detect import detect_chat_format, resolve_chat_format
from rlfactory_nb.chat.format import (
    ChatFormat,
    chat_format_names,
    eos_ids,
    get_chat_format,
    register_chat_format,
    registered_chat_formats,
)
from rlfactory_nb.chat.parsers import (
    ParseResult,
    ToolCallParser,
    format_error_for_model,
    get_parser,
    parser_names,
    register_parser,
)
from rlfactory_nb.chat.qwen3 import Qwen3Parser
from rlfactory_nb.chat.qwen3_xml import Qwen3XMLParser
from rlfactory_nb.chat.reasoning import ReasoningMarkers

__all__ = [
    "ChatFormat",
    "ParseResult",
    "Qwen3Parser",
    "Qwen3XMLParser",
    "ReasoningMarkers",
    "ToolCallParser",
    "chat_format_names",
    "detect_chat_format",
    "eos_ids",
    "format_error_for_model",
    "get_chat_format",
    "get_parser",
    "parser_names",
    "register_chat_format",
    "register_parser",
    "registered_chat_formats",
    "resolve_chat_format",
]
