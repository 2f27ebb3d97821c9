"""Smoke tests of the rollout benchmarks on tiny workloads: the figures they report must be sane.

No __init__.py in this folder on purpose: as a package it would be named `bench` and shadow the
repository's bench/ scripts imported here.
"""

import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import rollout_overlap, tool_calls
from bench.latency_server import delay_s


def test_latency_is_seeded_per_call_with_a_long_tail():
    draws = [
        delay_s({"expression": f"{i}*7"}, seed=3, median_s=0.2, sigma=0.7, cap_s=3.0) for i in range(4000)
    ]
    again = [
        delay_s({"expression": f"{i}*7"}, seed=3, median_s=0.2, sigma=0.7, cap_s=3.0) for i in range(4000)
    ]
    assert draws == again  # every strategy sees the same latency for the same call
    assert statistics.median(draws) == pytest.approx(0.2, rel=0.1)
    tail = sorted(draws)[int(0.99 * len(draws))]
    assert 3.0 < tail / 0.2 < 8.0  # lognormal sigma 0.7: p99 about 5x the median
    assert max(draws) <= 3.0


async def test_strategies_sample_the_same_trajectories_and_respect_the_lower_bound(tiny_policy):
    # A fixed 300 ms per call makes the scheduling visible in wall time despite a noisy machine.
    latency_s = 0.3
    workload = rollout_overlap.Workload(
        prompts=4, group_size=2, median_ms=latency_s * 1000, sigma=0.0, rounds=1
    )
    records = await rollout_overlap.measure(workload, tiny_policy, log=lambda line: None)
    by_name = {r.strategy: r for r in records}
    assert set(by_name) == set(rollout_overlap.LABELS)
    assert {r.trajectories for r in records} == {8}
    assert len({r.fingerprint for r in records}) == 1, "schedulers must sample identical trajectories"
    calls = by_name["c"].calls
    assert calls >= 1, "the workload makes no tool call: the benchmark would measure nothing"
    assert {r.calls for r in records} == {calls}
    # Each run's bound (slowest trajectory's generate + tool time, engine busy time) is measured in
    # that run, so it never exceeds that run's wall time. Across strategies the bound would compare
    # runs a few seconds apart on shared cores, too noisy to assert.
    for record in records:
        assert record.lower_bound_s <= record.wall_s and record.engine_busy_s <= record.wall_s, record
        assert record.lower_bound_s >= latency_s, "a trajectory that called the tool waited for it"
    # (a) really calls one at a time: its wall time holds every call's latency end to end.
    assert by_name["a"].wall_s >= calls * latency_s
    assert by_name["b"].cache_misses == 0 and by_name["b+cache"].cache_misses >= 1
    data = rollout_overlap.figures(records, workload)
    assert data["same_trajectories_in_every_run"]
    assert data["ratio_c_over_lower_bound"] >= 1.0
    text = rollout_overlap.markdown(data, "    python bench/rollout_overlap.py", "Machine: test")
    assert text.startswith("## ") and "(b)/(c)" in text


def test_percentiles_in_milliseconds():
    figures = tool_calls.percentiles([0.002] * 98 + [0.050, 0.090])
    assert figures["p50_ms"] == pytest.approx(2.0)
    assert figures["p99_ms"] == pytest.approx(90.0)


async def test_mcp_round_trip_costs_more_than_a_direct_call_and_one_session_overlaps_calls():
    fast, slow = tool_calls.mcp_toolset(0, cache=False), tool_calls.mcp_toolset(100.0, cache=False)
    await fast.start()
    await slow.start()
    try:
        warm = {"expression": "1+1"}
        await fast.call("calculator", warm)
        await slow.call("calculator", warm)

        async def direct(i):
            return tool_calls.evaluate(tool_calls.expression(i))

        async def over_mcp(i):
            return await fast.call("calculator", {"expression": tool_calls.expression(i)})

        latency = await tool_calls.call_latencies({"direct": direct, "mcp": over_mcp}, calls=30)
        assert latency["direct"]["p50_ms"] < latency["mcp"]["p50_ms"]
        assert latency["mcp"]["p50_ms"] <= latency["mcp"]["p99_ms"]
        one = await tool_calls.throughput(slow, concurrency=1, total=4)
        eight = await tool_calls.throughput(slow, concurrency=8, total=16)
        assert one <= 10.5  # a 100 ms tool, one caller: at most 10 calls/s
        assert eight > 3 * one  # calls overlap inside one stdio session (ideal: 8x)
    finally:
        await fast.stop()
        await slow.stop()
