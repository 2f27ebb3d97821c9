"""The search server answers concurrent queries while one long search runs (BM25 ranks in a worker
thread), and refuses a query past its length limit with an error result naming the limit."""

import asyncio
import json
import sys

import pytest

from rlfactory_nb.tools import ToolSet

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(180)]

VOCABULARY = [f"w{i}" for i in range(100)]


def search_config(tmp_path) -> dict:
    corpus = tmp_path / "corpus.jsonl"
    text = " ".join(VOCABULARY)  # every term in every document: a query of all of them scores them all
    lines = (json.dumps({"id": str(i), "contents": f'"Doc {i}"\n{text} unique{i}'}) for i in range(20_000))
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["-m", "rlfactory_nb.tools.servers.search", "--corpus", str(corpus)]
    return {"servers": [{"name": "search", "command": sys.executable, "args": args, "timeout_s": 120}]}


async def test_a_long_search_does_not_stall_other_queries(tmp_path):
    async with ToolSet.from_config(search_config(tmp_path), cache=False, start_timeout_s=120) as tools:
        finished = []

        async def search(query: str, label: str):
            result = await tools.call("search", {"query": query})
            finished.append(label)
            return result

        heavy = asyncio.create_task(search(" ".join(VOCABULARY), "heavy"))  # 2M postings, about a second
        await asyncio.sleep(0.1)
        light = await search("unique7", "light")
        assert light.ok and '"Doc 7"' in light.content
        assert (await heavy).ok
        assert finished == ["light", "heavy"], "before: the light query waited for the whole heavy search"


async def test_a_query_past_the_limit_is_an_error_naming_it(tmp_path):
    async with ToolSet.from_config(search_config(tmp_path), cache=False, start_timeout_s=120) as tools:
        result = await tools.call("search", {"query": "w1 " * 8000})  # 24 KB
        assert result.status == "error"
        assert "1,000" in result.content and "--max-query-chars" in result.content
