"""ToolSetView (`tools.view()`): what the model is told about each tool, and a form to call one.

Servers with their state and restarts; every tool with its description and input schema; a form
that sends JSON arguments through the same `ToolSet.call` the agent uses, showing the result's
status, content, latency and whether it came from the cache. A call history keeps the latencies.
"""

from __future__ import annotations

import html
import json
from typing import Any

import ipywidgets as widgets

from rlfactory_nb.tools.toolset import ToolSet
from rlfactory_nb.types import ToolResult, ToolSpec
from rlfactory_nb.widgets._base import StaticFallback, error_area, run_callback
from rlfactory_nb.widgets.controls import FULL_LABEL, selector
from rlfactory_nb.widgets.registry import register_view
from rlfactory_nb.widgets.trajectory import STATUS_COLORS

_PLACEHOLDERS = {"string": "", "integer": 0, "number": 0, "boolean": False, "array": [], "object": {}}


def example_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """A skeleton of the required arguments, to edit in the form.

    >>> example_arguments({"properties": {"expression": {"type": "string"}, "n": {"type": "integer"}}, "required": ["expression"]})
    {'expression': ''}
    """
    properties = schema.get("properties", {})
    required = schema.get("required", list(properties))
    return {name: _PLACEHOLDERS.get(properties.get(name, {}).get("type"), None) for name in required}


def servers_html(tools: Any) -> str:
    stats = tools.stats()
    rows = [
        f"<tr><td>{html.escape(name)}</td><td>{html.escape(str(info['state']))}</td><td>{html.escape(str(info['restarts']))}</td></tr>"
        for name, info in stats["servers"].items()
    ]
    cache = stats.get("cache")
    cache_line = f"<div>cache: {html.escape(json.dumps(cache))}</div>" if cache else "<div>cache: off</div>"
    head = "<tr><th>server</th><th>state</th><th>restarts</th></tr>"
    table = f"<table class='rf-table'>{head}{''.join(rows)}</table>" if rows else "<div>no MCP servers (Python tools only)</div>"
    return table + cache_line


def spec_html(spec: ToolSpec) -> str:
    schema = html.escape(json.dumps(spec.input_schema, indent=2))
    return (
        f"<div><b><code>{html.escape(spec.name)}</code></b> <i>({html.escape(spec.server)})</i>: "
        f"{html.escape(spec.description)}<pre style='margin:2px 0 8px 0'>{schema}</pre></div>"
    )


def result_html(result: ToolResult) -> str:
    color = STATUS_COLORS.get(result.status, "#000")
    return (
        f"<div><span style='color:{color}'><b>{html.escape(result.status)}</b></span> "
        f"{result.latency_s * 1000:.1f} ms{' (cached)' if result.cached else ''}"
        f"<pre style='margin:2px 0'>{html.escape(result.content)}</pre></div>"
    )


@register_view(ToolSet)
class ToolSetView(StaticFallback, widgets.VBox):
    """Servers, tools, schemas, and a call form over a started ToolSet."""

    def __init__(self, tools: ToolSet):
        self.tools = tools
        self.history: list[ToolResult] = []
        names = tools.names
        self.servers = widgets.HTML(servers_html(tools))
        self.specs = widgets.HTML("".join(spec_html(spec) for spec in tools.specs))
        self.tool = selector("tool", names)
        self.arguments = widgets.Textarea(description="arguments (JSON)", style=FULL_LABEL, layout=widgets.Layout(width="60%", height="80px"))
        self.call_button = widgets.Button(description="Call", icon="play", button_style="primary")
        self.result = widgets.HTML()
        self.latencies = widgets.HTML()
        self.errors = error_area()
        self.tool.observe(lambda change: self._fill_arguments(change["new"]), names=["value"])
        self.call_button.on_click(lambda _: run_callback(self.errors, self.call_from_form, self._show))
        if names:
            self._fill_arguments(names[0])
        form = widgets.VBox([self.tool, self.arguments, self.call_button, self.result, self.latencies])
        super().__init__([self.servers, self.specs, form, self.errors])
        self.add_class("rf-toolset-view")

    async def call_from_form(self) -> ToolResult:
        """Call the selected tool with the form's JSON arguments (invalid JSON comes back as a result,
        exactly as the model would see it)."""
        return await self.tools.call(self.tool.value, self.arguments.value)

    def static_html(self) -> str:
        return self.servers.value + self.specs.value + self.result.value

    def _fill_arguments(self, name: str) -> None:
        self.arguments.value = json.dumps(example_arguments(self.tools.spec(name).input_schema))

    def _show(self, result: ToolResult) -> None:
        self.history.append(result)
        self.result.value = result_html(result)
        recent = [f"{r.name} {r.latency_s * 1000:.1f} ms" for r in self.history[-5:]]
        self.latencies.value = f"<div><small>recent calls: {html.escape(', '.join(recent))}</small></div>"
        self.servers.value = servers_html(self.tools)
