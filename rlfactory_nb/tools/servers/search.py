"""Search MCP server: BM25 retrieval over a JSONL corpus, with optional simulated latency.

The corpus uses the Search-R1 layout, one document per line: `{"id": "...", "contents": "\\"Title\\"\\nText"}`
(the first line of `contents` is the quoted title). Results are formatted the way Search-R1 models
are trained to read them: `Doc 1(Title: "...") text`.

BM25 (k1=0.9, b=0.4, the Pyserini defaults Search-R1 used) is computed here over an in-memory
inverted index: enough for corpora up to a few hundred thousand short passages without any extra
dependency. Latency can be simulated (lognormal, as real retrieval services are) to benchmark how
rollouts overlap slow tools.

    python -m rlfactory_nb.tools.servers.search --corpus data.jsonl --top-k 3 --latency-mean-s 0.2

Ranking runs in a worker thread (`asyncio.to_thread`), so a long search does not stall the other
queries the server is answering; a query longer than `max_query_chars` (default 1,000) is refused
with an error result naming the limit, since its cost grows with its distinct terms (a 23 KB query
over 40k documents took 3 s).

Environment variables RLF_SEARCH_CORPUS, RLF_SEARCH_LATENCY_MEAN_S and RLF_SEARCH_LATENCY_SIGMA set the
same options (flags win), so a config can set them through `env:`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

TINY_WIKI = Path(__file__).parent / "data" / "tiny_wiki.jsonl"
"""the small corpus shipped with the package (synthetic documents written for tests and examples)"""

_STOPWORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "whose",
        "why",
        "how",
        "with",
    }
)
_TOKEN = re.compile(r"\w+")


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens without stopwords.

    >>> tokenize("Who founded the town of Marrowfield?")
    ['founded', 'town', 'marrowfield']
    """
    return [t for t in _TOKEN.findall(text.lower()) if t not in _STOPWORDS]


def load_corpus(path: str | Path) -> list[Document]:
    """Documents of a Search-R1-layout JSONL file."""
    documents = []
    with Path(path).open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if "contents" not in row:
                raise ValueError(f"{path}:{number}: each line needs a 'contents' field (and an 'id')")
            title, _, text = row["contents"].partition("\n")
            documents.append(Document(str(row.get("id", number)), title.strip().strip('"'), text.strip()))
    return documents


class BM25:
    """Okapi BM25 over an inverted index."""

    def __init__(self, documents: Iterable[Document], k1: float = 0.9, b: float = 0.4):
        self.documents = list(documents)
        self.k1, self.b = k1, b
        self._postings: dict[str, list[tuple[int, int]]] = defaultdict(list)  # term -> [(doc, tf)]
        self._lengths = []
        for index, doc in enumerate(self.documents):
            counts = Counter(tokenize(f"{doc.title} {doc.text}"))
            self._lengths.append(sum(counts.values()))
            for term, tf in counts.items():
                self._postings[term].append((index, tf))
        self._mean_length = sum(self._lengths) / max(1, len(self._lengths))

    def search(self, query: str, top_k: int = 3) -> list[tuple[Document, float]]:
        scores: dict[int, float] = defaultdict(float)
        n = len(self.documents)
        for term in set(tokenize(query)):
            postings = self._postings.get(term, [])
            idf = math.log(1 + (n - len(postings) + 0.5) / (len(postings) + 0.5))
            for index, tf in postings:
                norm = self.k1 * (1 - self.b + self.b * self._lengths[index] / self._mean_length)
                scores[index] += idf * tf * (self.k1 + 1) / (tf + norm)
        best = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:top_k]
        return [(self.documents[index], score) for index, score in best]


def format_results(results: list[tuple[Document, float]], snippet_chars: int) -> str:
    """Search-R1's passage format, one document per line."""
    if not results:
        return "No results."
    lines = []
    for rank, (doc, _) in enumerate(results, 1):
        text = doc.text if len(doc.text) <= snippet_chars else doc.text[:snippet_chars].rstrip() + "..."
        lines.append(f'Doc {rank}(Title: "{doc.title}") {text}')
    return "\n".join(lines)


@dataclass(frozen=True)
class Latency:
    """Lognormal delay with the given mean (seconds); mean 0 means none."""

    mean_s: float = 0.0
    sigma: float = 0.5

    def sample(self, rng: random.Random) -> float:
        if self.mean_s <= 0:
            return 0.0
        mu = math.log(self.mean_s) - self.sigma**2 / 2  # so that the mean is mean_s
        return rng.lognormvariate(mu, self.sigma)


def build_server(
    corpus: str | Path = TINY_WIKI,
    default_top_k: int = 3,
    max_top_k: int = 10,
    snippet_chars: int = 300,
    latency: Latency = Latency(),
    seed: int = 0,
    max_query_chars: int = 1000,
) -> MCPServer:
    index = BM25(load_corpus(corpus))
    rng = random.Random(seed)
    server = MCPServer("search", log_level="WARNING")

    @server.tool(name="search")
    async def search(query: str, top_k: int = default_top_k) -> str:
        """Search the knowledge base and return the most relevant passages with their titles."""
        if len(query) > max_query_chars:  # a ToolError's message reaches the model; others are hidden
            raise ToolError(
                f"the query is {len(query):,} characters; the limit is {max_query_chars:,} (--max-query-chars)"
            )
        await asyncio.sleep(latency.sample(rng))
        results = await asyncio.to_thread(index.search, query, max(1, min(top_k, max_top_k)))
        return format_results(results, snippet_chars)

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="BM25 search over a JSONL corpus, as an MCP server (stdio)")
    parser.add_argument("--corpus", default=os.environ.get("RLF_SEARCH_CORPUS", str(TINY_WIKI)))
    parser.add_argument("--top-k", type=int, default=3, help="results when the caller gives no top_k")
    parser.add_argument("--max-top-k", type=int, default=10)
    parser.add_argument("--snippet-chars", type=int, default=300, help="each passage is cut to this length")
    parser.add_argument(
        "--latency-mean-s", type=float, default=float(os.environ.get("RLF_SEARCH_LATENCY_MEAN_S", "0"))
    )
    parser.add_argument(
        "--latency-sigma", type=float, default=float(os.environ.get("RLF_SEARCH_LATENCY_SIGMA", "0.5"))
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-query-chars", type=int, default=1000, help="longer queries are refused")
    args = parser.parse_args(argv)
    latency = Latency(args.latency_mean_s, args.latency_sigma)
    server = build_server(
        args.corpus, args.top_k, args.max_top_k, args.snippet_chars, latency, args.seed, args.max_query_chars
    )
    server.run("stdio")


if __name__ == "__main__":
    main()
