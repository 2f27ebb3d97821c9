"""bench/envs_async.py and bench/envs_overhead.py at a small size: both schedules do the same work
(every episode makes its calls and ends), and the overhead paths all answer."""

from bench import envs_async, envs_overhead


async def test_both_schedules_run_every_episode_and_the_barrier_is_not_faster_than_its_bound():
    data = await envs_async.measure(episodes=16, rounds=1)  # `check` inside raises if an episode went wrong
    assert data["episodes"] == 16 and set(data["median_s"]) == {"async", "barrier"}
    assert data["median_s"]["barrier"] >= data["latency_only_s"]["barrier"] * 0.9
    assert data["latency_only_ratio"] >= 1.0
    assert envs_async.report(data, []).startswith("## Environments: 16 concurrent episodes")


async def test_the_overhead_paths_all_answer_and_are_reported():
    data = await envs_overhead.measure(calls=100)
    assert data["calls_per_path"] == 100 and set(data["p50_ms"]) == {"toolset", "default env", "env method", "episode life"}
    assert "overhead over the ToolSet" in envs_overhead.report(data, [])
