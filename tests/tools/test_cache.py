"""ToolCache: canonical keys, LRU eviction, counters, record/replay through sqlite, shared in-flight
calls, and a shared second tier (an in-process twin here; the Ray actor is tests/cluster/test_tool_cache.py)."""

import asyncio
from pathlib import Path

from rlfactory_nb.tools import ToolCache, ToolSet
from rlfactory_nb.tools.cache import Recorded, cache_key


def test_argument_order_does_not_matter_but_values_do():
    assert cache_key("t", {"a": 1, "b": [1, 2]}) == cache_key("t", {"b": [1, 2], "a": 1})
    assert cache_key("t", {"a": 1}) != cache_key("t", {"a": "1"})
    assert cache_key("s1.t", {}) != cache_key("s2.t", {})


def test_least_recently_used_entries_are_evicted():
    cache = ToolCache(max_entries=2)
    cache.put("t", {"i": 1}, Recorded("ok", "1"))
    cache.put("t", {"i": 2}, Recorded("ok", "2"))
    assert cache.get("t", {"i": 1}) is not None  # 1 is now the most recent
    cache.put("t", {"i": 3}, Recorded("ok", "3"))
    assert cache.get("t", {"i": 2}) is None
    assert cache.get("t", {"i": 1}) == Recorded("ok", "1")
    assert cache.stats() == {"hits": 2, "local_hits": 2, "shared_hits": 0, "misses": 1, "entries": 2}


def test_results_recorded_on_disk_are_found_by_a_new_cache(tmp_path):
    path = tmp_path / "run" / "tools.sqlite"
    first = ToolCache(path=path)
    first.put("calc.calculator", {"expression": "2+2"}, Recorded("ok", "4"))
    first.close()
    again = ToolCache(path=path)
    assert again.get("calc.calculator", {"expression": "2+2"}) == Recorded("ok", "4")


def _counter(label: str = "") -> int:
    """Counts its calls: a tool whose answer shows whether it ran."""
    _counter.calls += 1
    return _counter.calls


_counter.calls = 0


async def test_a_recorded_run_replays_without_running_tools(tmp_path):
    path = tmp_path / "tools.sqlite"
    async with ToolSet.from_functions(_counter, cache_path=str(path)) as recording:
        recorded = [await recording.call("_counter", {}) for _ in range(2)]
    assert [r.cached for r in recorded] == [False, True] and _counter.calls == 1
    async with ToolSet.from_functions(_counter, cache_path=str(path), replay=True) as replaying:
        replayed = await replaying.call("_counter", {})
        unrecorded = await replaying.call("_counter", {"label": "never called"})
    assert replayed.cached and replayed.content == recorded[0].content
    assert _counter.calls == 1  # the tool never ran during the replay
    assert unrecorded.status == "error" and "no recorded result" in unrecorded.content


async def test_per_tool_opt_out_always_runs_the_tool():
    calls = []

    def side_effect(x: int) -> int:
        calls.append(x)
        return x

    config = {"functions": [{"function": side_effect, "cache": False}]}
    async with ToolSet.from_config(config) as tools:
        results = [await tools.call("side_effect", {"x": 1}) for _ in range(3)]
    assert calls == [1, 1, 1] and not any(r.cached for r in results)


async def test_identical_calls_in_flight_at_once_run_the_tool_once():
    """A group's samples ask the same thing at the same moment, before any result is cached."""
    runs = []

    async def slow_search(query: str) -> str:
        runs.append(query)
        await asyncio.sleep(0.2)
        return f"results for {query}"

    async with ToolSet.from_functions(slow_search) as tools:
        same = [("slow_search", {"query": "qwen3"})] * 8
        results = await tools.call_many([*same, ("slow_search", {"query": "other"})])
        stats = tools.stats()["cache"]
    assert sorted(runs) == ["other", "qwen3"]
    assert {r.content for r in results[:8]} == {"results for qwen3"}
    assert sum(r.cached for r in results) == 7 and stats["hits"] == 7
    async with ToolSet.from_functions(slow_search, cache=False) as uncached:
        await uncached.call_many(same)
    assert len(runs) == 2 + 8, "without the cache every call runs"


async def test_a_cancelled_caller_does_not_cancel_the_shared_call():
    async def slow(x: int) -> int:
        await asyncio.sleep(0.2)
        return x

    async with ToolSet.from_functions(slow) as tools:
        first = asyncio.ensure_future(tools.call("slow", {"x": 3}))
        await asyncio.sleep(0.05)
        second = asyncio.ensure_future(tools.call("slow", {"x": 3}))
        await asyncio.sleep(0.01)
        first.cancel()
        result = await second
    assert result.status == "ok" and result.content == "3" and result.cached


class DictTier:
    """The SharedCache protocol over a dict, answering after a real suspension (as an actor would)."""

    def __init__(self):
        self.entries: dict[str, Recorded] = {}
        self.record_path: Path | None = None
        self.lookups = 0

    def open(self, record_path: Path | None) -> None:
        self.record_path = record_path

    async def get(self, key: str) -> Recorded | None:
        self.lookups += 1
        await asyncio.sleep(0.01)
        return self.entries.get(key)

    def put(self, key: str, outcome: Recorded) -> None:
        self.entries[key] = outcome


async def test_a_second_process_is_answered_by_the_shared_tier():
    tier, runs = DictTier(), []

    def lookup(word: str) -> str:
        runs.append(word)
        return word.upper()

    first, second = (ToolSet.from_functions(lookup, shared_cache=tier) for _ in range(2))  # two processes
    async with first, second:
        ran = await first.call("lookup", {"word": "qwen"})
        shared = await second.call("lookup", {"word": "qwen"})
        local = await second.call("lookup", {"word": "qwen"})
    assert runs == ["qwen"] and ran.content == shared.content == local.content == "QWEN"
    assert (ran.cached, shared.cached, local.cached) == (False, True, True)
    assert second.stats()["cache"] == {
        "hits": 2,
        "local_hits": 1,
        "shared_hits": 1,
        "misses": 0,
        "entries": 1,
    }
    assert first.stats()["cache"]["misses"] == 1 and tier.lookups == 2


async def test_identical_calls_waiting_on_the_shared_tier_run_the_tool_once():
    tier, runs = DictTier(), []

    async def search(query: str) -> str:
        runs.append(query)
        return f"results for {query}"

    async with ToolSet.from_functions(search, shared_cache=tier) as tools:
        results = await tools.call_many([("search", {"query": "grpo"})] * 8)
    assert runs == ["grpo"] and tier.lookups == 1 and sum(r.cached for r in results) == 7


async def test_the_shared_tier_keeps_the_record_and_no_details(tmp_path):
    tier = DictTier()
    path = tmp_path / "run" / "tools.sqlite"
    cache = ToolCache(path=path, shared=tier)
    cache.put("t", {"i": 1}, Recorded("ok", "1", details={"rows": [1]}))
    assert tier.record_path == path and not path.exists(), "the tier is the file's one writer"
    assert tier.entries == {cache_key("t", {"i": 1}): Recorded("ok", "1")}
    assert cache.get("t", {"i": 1}).details == {"rows": [1]}, "in this process the details stay"


async def test_without_a_shared_tier_get_shared_finds_nothing():
    cache = ToolCache()
    assert cache.get("t", {}) is None and await cache.get_shared("t", {}) is None
    assert cache.stats()["misses"] == 1
