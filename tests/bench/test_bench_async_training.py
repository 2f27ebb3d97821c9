"""bench/async_training.py: its settings differ only in max_staleness (and the ratio cap it needs),
and its summary and section from fake metrics rows."""

from bench import async_training


def test_settings_differ_only_in_the_staleness_bound():
    args = async_training.parse_args(["--quick"])
    engine, sync, one, two = (async_training.run_config(args, s) for s in ("sync-engine", "0", "1", "2"))
    assert [c.grpo.max_staleness for c in (engine, sync, one, two)] == [0, 0, 1, 2]
    assert engine.grpo.truncate_ratio is None and sync.grpo.truncate_ratio == one.grpo.truncate_ratio == 2.0
    assert one.replace({"grpo.max_staleness": 0}).grpo == sync.grpo  # the bound alone differs
    assert sync.replace({"grpo.truncate_ratio": None}).grpo == engine.grpo
    assert sync.cluster == one.cluster and sync.cluster.backend == "ray"
    assert (sync.cluster.num_engines, sync.cluster.num_workers, sync.cluster.cpus_per_worker) == (1, 1, 1)
    assert len({engine.run_dir, sync.run_dir, one.run_dir, two.run_dir}) == 4


def metrics(step_s: float, busy: float) -> list[dict]:
    rows = [{"step": 0, "time": 100.0, "eval/greedy_reward/mean": 0.25, "eval/sampled_reward/mean": 0.2}]
    for step in (1, 2):
        rows.append(
            {
                "step": step,
                "time": 100.0 + step * step_s,
                "time/step_s": step_s + (5.0 if step == 2 else 0.0),
                "time/eval_s": 5.0 if step == 2 else None,
                "async/staleness_mean": 0.5,
                "async/engine_busy_share": busy,
                "reward/mean": 0.3,
                **({"eval/greedy_reward/mean": 0.5, "eval/sampled_reward/mean": 0.4} if step == 2 else {}),
            }
        )
    for row in rows:  # metrics rows leave out what a step did not measure
        if row.get("time/eval_s") is None:
            row.pop("time/eval_s", None)
    return rows


def test_steps_per_minute_leave_out_the_evaluations_and_the_section_compares_with_synchronous():
    sync = async_training.summary(async_training.table_rows(metrics(30.0, 0.5), 100.0, "0"))
    one = async_training.summary(async_training.table_rows(metrics(15.0, 0.9), 100.0, "1"))
    assert sync["steps_per_min"] == 2.0 and one["steps_per_min"] == 4.0  # 2 steps in 60 s and in 30 s
    assert sync["engine_idle_share"] == 0.5 and one["engine_idle_share"] == 0.1
    assert (one["greedy_first"], one["greedy_last"]) == (0.25, 0.5)
    text = async_training.markdown({"0": sync, "1": one}, ["--steps", "2"], "Machine: test.", plotted=False)
    assert "python bench/async_training.py --steps 2" in text
    assert "| max_staleness 1 | 4.0 | 2.00x | 10% | 0.5 | 0.250 -> 0.500 | 0.400 |" in text
