"""The search server: BM25 ranking over the shipped corpus, Search-R1 output, simulated latency."""

import random
import statistics
import sys

from rlfactory_nb.tools import ToolSet
from rlfactory_nb.tools.servers.search import BM25, TINY_WIKI, Latency, format_results, load_corpus


def test_shipped_corpus_uses_the_search_r1_layout():
    documents = load_corpus(TINY_WIKI)
    assert len(documents) >= 25
    assert all(d.title and d.text and not d.title.startswith('"') for d in documents)


def test_bm25_ranks_the_document_about_the_query_first():
    index = BM25(load_corpus(TINY_WIKI))
    assert index.search("How tall is the Tessel Lighthouse?", 1)[0][0].title == "Tessel Lighthouse"
    assert index.search("who bred the Amber Drop pear", 1)[0][0].title in ("Amber Drop pear", "Lina Osk")
    assert index.search("zzzz qqqq", 3) == []


def test_results_format_and_snippet_length():
    index = BM25(load_corpus(TINY_WIKI))
    text = format_results(index.search("Mount Oradine first climbed", 2), snippet_chars=40)
    first, second = text.splitlines()
    assert first.startswith('Doc 1(Title: "Mount Oradine") ') and first.endswith("...")
    assert second.startswith("Doc 2(Title: ")
    assert format_results([], 40) == "No results."


def test_simulated_latency_has_the_requested_mean():
    rng = random.Random(0)
    samples = [Latency(0.2, 0.5).sample(rng) for _ in range(4000)]
    assert abs(statistics.mean(samples) - 0.2) < 0.01
    assert Latency(0.0).sample(rng) == 0.0


async def test_search_over_stdio_with_latency():
    server = {
        "name": "search",
        "command": sys.executable,
        "args": ["-m", "rlfactory_nb.tools.servers.search", "--latency-mean-s", "0.05", "--top-k", "2"],
    }
    async with ToolSet.from_config({"servers": [server]}) as tools:
        result = await tools.call("search", {"query": "Who founded Marrowfield?"})
        assert result.ok and result.content.count("Doc ") == 2 and "Ilsa Voren" in result.content
        assert (await tools.call("search", {"query": "x", "top_k": "two"})).status == "invalid_args"
