"""An MCP `search` server in front of a Search-R1 retrieval service (dense e5 + faiss, or BM25).

The in-memory BM25 server (`rlfactory_nb.tools.servers.search`) suits corpora up to a few hundred
thousand passages; wiki-18 has 21 million. For it, run Search-R1's retrieval service (its
`retrieval_server.py`: the corpus, a faiss index and the query encoder, on a GPU) and put this
server between it and the model. It posts `{"queries": [query], "topk": k, "return_scores": true}`
to the service's `/retrieve` endpoint and formats the passages exactly as the BM25 server does,
so a model sees the same tool, schema and output whichever retriever stands behind it.

    python -m rlfactory_nb.recipes.deepsearch.remote_search --url http://127.0.0.1:8000/retrieve --top-k 3

A service that cannot be reached, or answers with an error, gives a tool error whose reason the
model reads (the ToolSet reports it with status "error"), not a crashed rollout.
"""

from __future__ import annotations

import argparse
from typing import Any

import httpx
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from rlfactory_nb.tools.servers.search import Document, format_results


def parse_passages(payload: Any) -> list[tuple[Document, float]]:
    """The passages of one query in a `/retrieve` answer: `{"result": [[{"document": {"id",
    "contents"}, "score"}, ...]]}` (or bare documents when the service returns no scores).

    >>> parse_passages({"result": [[{"document": {"id": "7", "contents": '"Nethby"\\nThe capital of Skarra.'}, "score": 0.9}]]})
    [(Document(id='7', title='Nethby', text='The capital of Skarra.'), 0.9)]
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("result"), list) or not payload["result"]:
        raise ValueError(f"the retrieval service answered without a 'result' list: {payload!r:.200}")
    passages = []
    for item in payload["result"][0]:
        document, score = (
            (item["document"], float(item.get("score", 0.0))) if "document" in item else (item, 0.0)
        )
        title, _, text = str(document.get("contents", "")).partition("\n")
        passages.append(
            (Document(str(document.get("id", "")), title.strip().strip('"'), text.strip()), score)
        )
    return passages


def build_server(
    url: str, default_top_k: int = 3, max_top_k: int = 10, snippet_chars: int = 300, timeout_s: float = 30.0
) -> MCPServer:
    server = MCPServer("search", log_level="WARNING")
    client = httpx.AsyncClient(timeout=timeout_s)

    @server.tool(name="search")
    async def search(query: str, top_k: int = default_top_k) -> str:
        """Search the knowledge base and return the most relevant passages with their titles."""
        request = {"queries": [query], "topk": max(1, min(top_k, max_top_k)), "return_scores": True}
        try:
            response = await client.post(url, json=request)
            response.raise_for_status()
            passages = parse_passages(response.json())
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as error:
            # Anticipated: the model reads the reason (ToolError keeps it; other exceptions are masked).
            raise ToolError(f"the retrieval service at {url} failed: {error}") from error
        return format_results(passages, snippet_chars)

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="MCP search server over a Search-R1 retrieval service (stdio)"
    )
    parser.add_argument(
        "--url", default="http://127.0.0.1:8000/retrieve", help="the service's /retrieve endpoint"
    )
    parser.add_argument("--top-k", type=int, default=3, help="results when the caller gives no top_k")
    parser.add_argument("--max-top-k", type=int, default=10)
    parser.add_argument("--snippet-chars", type=int, default=300, help="each passage is cut to this length")
    parser.add_argument("--timeout-s", type=float, default=30.0)
    args = parser.parse_args(argv)
    build_server(args.url, args.top_k, args.max_top_k, args.snippet_chars, args.timeout_s).run("stdio")


if __name__ == "__main__":
    main()
