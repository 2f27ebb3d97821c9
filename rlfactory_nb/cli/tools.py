"""`rlfactory-nb tools list CONFIG` and `rlfactory-nb tools call CONFIG NAME '{"json": "args"}'`.

For checking a tools config from a shell before a run: are the servers starting, what does the model
see, what does a call return. The parser lives in the main CLI (`rlfactory_nb/cli/__init__.py`), which imports
this module only when a `tools` command runs; `main` runs it standalone
(`python -m rlfactory_nb.cli.tools list examples/calculator/tools.yaml`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys

from rlfactory_nb import cli
from rlfactory_nb.config import ConfigError
from rlfactory_nb.tools.mcp import ServerStartError
from rlfactory_nb.tools.toolset import ToolSet


def run_tools_command(args: argparse.Namespace) -> int:
    """Run a parsed `tools` command; returns the exit status (0 when a call's status is ok)."""
    try:
        return asyncio.run(_run(args))
    except (ConfigError, ServerStartError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


async def _run(args: argparse.Namespace) -> int:
    settings = {"cache": False}  # a one-off call from a shell should reach the tool
    if getattr(args, "timeout_s", None) is not None:
        settings["timeout_s"] = args.timeout_s
    tools = ToolSet.from_config(args.config, **settings)
    await tools.start(warm_validators=args.tools_command == "call")  # listing validates nothing
    try:
        if args.tools_command == "list":
            _print_specs(tools, as_json=args.json)
            return 0
        result = await tools.call(args.name, args.arguments)
    finally:
        await tools.stop()
    if args.json:
        print(json.dumps(dataclasses.asdict(result), ensure_ascii=False, indent=2))
    else:
        print(result.content)
        if not result.ok:
            print(f"[status: {result.status}]", file=sys.stderr)
    return 0 if result.ok else 1


def _print_specs(tools: ToolSet, as_json: bool) -> None:
    if as_json:
        print(json.dumps([spec.to_openai() for spec in tools.specs], ensure_ascii=False, indent=2))
        return
    for spec in tools.specs:
        properties = spec.input_schema.get("properties", {})
        required = set(spec.input_schema.get("required", []))
        params = ", ".join(
            f"{name}{'' if name in required else '?'}: {prop.get('type', 'any')}"
            for name, prop in properties.items()
        )
        print(f"{spec.name}({params})  [{spec.server}]")
        if spec.description:
            print(f"    {spec.description.splitlines()[0]}")


def main(argv: list[str] | None = None) -> int:
    """Standalone entry: `list ...` / `call ...` (a leading `tools` is accepted too)."""
    return cli.run_command("tools", argv)


if __name__ == "__main__":
    sys.exit(main())
