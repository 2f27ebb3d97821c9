"""The MCP SDK calls an MCPConnection makes, apart from its lifecycle: the streamable HTTP
transport, listing a server's tools, checking that arguments can be sent, and the text the model
reads from a result; with the records they yield (`RemoteTool`, `CallOutcome`, which Python tools
answer with too).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pydantic_core
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import PaginatedRequestParams

from rlfactory_nb.tools.validate import InvalidArguments


@dataclass(frozen=True)
class RemoteTool:
    """A tool as the server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class CallOutcome:
    """What the server answered: `is_error` is the server's own verdict (a tool error, not a crash)."""

    is_error: bool
    text: str
    details: dict[str, Any] | None = None
    """`ToolResult.details` (a Python tool's ToolReply; an MCP server gives none)"""


@asynccontextmanager
async def http_transport(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    """Streamable HTTP with our headers; the SDK leaves a client it was given open, so close it here."""
    async with (
        create_mcp_http_client(headers=headers) as client,
        streamable_http_client(url, http_client=client) as streams,
    ):
        yield streams


def check_sendable(arguments: dict[str, Any]) -> None:
    """Serialise `arguments` as the SDK will. It does so in its transport's writer task, where a
    failure (a lone surrogate in model text) ends the session like a crash: every call in flight
    fails, and the server is restarted until it is marked failed."""
    try:
        pydantic_core.to_json(arguments)
    except (ValueError, RecursionError) as exc:
        raise InvalidArguments(f"the arguments cannot be sent to the server: {one_line(exc)}") from None


async def list_tools(session: ClientSession) -> list[RemoteTool]:
    tools: list[RemoteTool] = []
    cursor: str | None = None
    while True:
        page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools += [RemoteTool(t.name, t.description or "", dict(t.input_schema)) for t in page.tools]
        cursor = page.next_cursor
        if not cursor:
            return tools


def content_text(content: list[Any], structured: dict[str, Any] | None = None) -> str:
    """The text the model reads from MCP content blocks (non-text blocks are named, not dropped)."""
    parts = []
    for block in content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(block.resource.text)
        else:
            parts.append(f"[{kind or 'unknown'} content: {getattr(block, 'mime_type', '') or 'not shown'}]")
    if not parts and structured is not None:
        return json.dumps(structured, ensure_ascii=False)
    return "\n".join(parts)


def one_line(exc: BaseException) -> str:
    """One line for an exception, looking inside the exception groups anyio raises."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
