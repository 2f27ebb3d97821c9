"""The NL2SQL example's tool: `sql(query)`, one read-only SELECT on the shop database, as an MCP
server over stdio.

    python -m rlfactory_nb.recipes.nl2sql.server --max-rows 20 --timeout-s 2

It serves the example's database, built into the cache on first use (`database.py`), or the SQLite
file given as `--database`. Every guard on the
model's SQL is in `query.py`; the answer is the result as JSON (`QueryResult.to_json`), or a short
message starting with "error:" for a refused, failed or stopped query.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent

from rlfactory_nb.recipes.nl2sql.database import ensure_database
from rlfactory_nb.recipes.nl2sql.query import QueryError, run_query

TOOL_NAME = "sql"
DESCRIPTION = (
    "Run one read-only SQLite SELECT query on the shop database and return the columns and rows as "
    "JSON (at most {max_rows} rows)."
)


def answer(database: Path, query: str, *, max_rows: int, timeout_s: float) -> CallToolResult:
    """The tool's result for `query`: the rows as JSON, or an error result the model reads."""
    try:
        text, failed = run_query(database, query, max_rows=max_rows, timeout_s=timeout_s).to_json(), False
    except QueryError as error:
        text, failed = f"error: {error}", True
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=failed)


def build_server(database: Path, *, max_rows: int, timeout_s: float) -> MCPServer:
    server = MCPServer("nl2sql", log_level="WARNING")

    @server.tool(name=TOOL_NAME, description=DESCRIPTION.format(max_rows=max_rows))
    async def sql(query: str) -> CallToolResult:
        # A worker thread, so a query running to its deadline does not stall the server's other calls.
        return await asyncio.to_thread(answer, database, query, max_rows=max_rows, timeout_s=timeout_s)

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rlfactory_nb.recipes.nl2sql.server", description=__doc__)
    parser.add_argument("--database", type=Path, default=None, help="an SQLite file (default: the shop)")
    parser.add_argument("--max-rows", type=int, default=20, help="rows returned at most (the rest is cut)")
    parser.add_argument("--timeout-s", type=float, default=2.0, help="a query running longer is stopped")
    args = parser.parse_args(argv)
    database = args.database or ensure_database()
    build_server(database, max_rows=args.max_rows, timeout_s=args.timeout_s).run("stdio")


if __name__ == "__main__":
    main()
