"""The job's shared tool cache on a real local Ray: rollout processes see each other's results through
one actor, which alone writes the sqlite record; a killed actor leaves each process its own LRU."""

import logging
import sqlite3
import time
import uuid

import ray

from rlfactory_nb.cluster.names import NAMESPACE
from rlfactory_nb.cluster.tool_cache import TOOL_CACHE_PREFIX, SharedToolCache
from rlfactory_nb.tools import ToolSet


def rollout_process_class() -> type:
    """An actor standing for one rollout process: its own ToolSet on the run's shared tier. Defined
    in a function so Ray ships it by value (workers need not import the tests package)."""

    class RolloutProcess:
        def __init__(self, run_name: str, record_path: str):
            self.runs: list[str] = []

            def lookup(word: str) -> str:
                self.runs.append(word)
                return word.upper()

            self.shared = SharedToolCache(run_name)
            self.tools = ToolSet.from_functions(lookup, cache_path=record_path, shared_cache=self.shared)

        async def ready(self) -> bool:
            return await self.shared.wait_started()

        async def call(self, word: str) -> tuple[str, bool]:
            result = await self.tools.call("lookup", {"word": word})
            return result.content, result.cached

        def report(self) -> tuple[list[str], dict]:
            return self.runs, self.tools.stats()["cache"]

    return RolloutProcess


def cache_actor(run_name: str):
    return ray.get_actor(TOOL_CACHE_PREFIX + run_name, namespace=NAMESPACE)


def wait_for_entries(run_name: str, count: int) -> dict:
    """The actor's stats once it holds `count` entries (a put is sent without waiting for it)."""
    for _ in range(100):
        stats = ray.get(cache_actor(run_name).stats.remote())
        if stats["entries"] >= count:
            return stats
        time.sleep(0.05)
    raise AssertionError(f"the cache actor never held {count} entries: {stats}")


def test_two_rollout_processes_answer_each_other_from_one_actor(cluster, tmp_path):
    run_name, record = f"shared-{uuid.uuid4().hex[:6]}", tmp_path / "run" / "tool_cache.sqlite"
    process = ray.remote(rollout_process_class()).options(num_cpus=0)
    first, second = process.remote(run_name, str(record)), process.remote(run_name, str(record))
    try:
        assert ray.get([first.ready.remote(), second.ready.remote()]) == [True, True]
        assert ray.get(first.call.remote("qwen")) == ("QWEN", False)
        stats = wait_for_entries(run_name, 1)
        assert ray.get(second.call.remote("qwen")) == ("QWEN", True)
        assert ray.get(second.call.remote("qwen")) == ("QWEN", True)
        (first_runs, _), (second_runs, second_stats) = ray.get(
            [first.report.remote(), second.report.remote()]
        )
    finally:
        for actor in (first, second):
            ray.kill(actor)
    assert first_runs == ["qwen"] and second_runs == [], "the second process never ran the tool"
    assert (second_stats["shared_hits"], second_stats["local_hits"], second_stats["misses"]) == (1, 1, 0)
    assert stats["record_path"] == str(record)
    with sqlite3.connect(record) as db:  # written by the actor alone; the processes kept no file open
        assert db.execute("SELECT tool, arguments, content FROM tool_results").fetchall() == [
            ("python.lookup", '{"word":"qwen"}', "QWEN")
        ]
    ray.kill(cache_actor(run_name))


async def test_a_killed_cache_actor_leaves_the_process_its_own_cache(cluster, caplog):
    run_name, runs = f"killed-{uuid.uuid4().hex[:6]}", []

    def lookup(word: str) -> str:
        runs.append(word)
        return word.upper()

    shared = SharedToolCache(run_name, timeout_s=30.0)
    async with ToolSet.from_functions(lookup, shared_cache=shared) as tools:
        assert await shared.wait_started()
        await tools.call("lookup", {"word": "a"})
        assert await tools.call("lookup", {"word": "b"}) is not None and shared.failure is None
        ray.kill(cache_actor(run_name))
        with caplog.at_level(logging.WARNING, logger="rlfactory_nb.cluster.tool_cache"):
            after = [await tools.call("lookup", {"word": word}) for word in ("c", "d", "a")]
    assert [(r.status, r.content, r.cached) for r in after] == [
        ("ok", "C", False),
        ("ok", "D", False),
        ("ok", "A", True),
    ]
    assert runs == ["a", "b", "c", "d"] and shared.failure is not None
    assert len([r for r in caplog.records if "unreachable" in r.message]) == 1, "one warning, not one a call"
    assert shared.stats() is None
