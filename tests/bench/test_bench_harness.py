"""The benchmark harness: result files, BENCHMARKS.md assembly, the runner, and the pure parts of
the engine, GRPO-step and learning benchmarks. The measurements themselves run under `make bench`."""

from __future__ import annotations

import doctest
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import __main__ as harness
from bench import _common, engines, grpo_step

HAS_TRL = importlib.util.find_spec("trl") is not None


def test_machine_line_names_cores_ram_cpu_and_load():
    line = _common.machine_line()
    pattern = (
        r"Machine: \d+ CPU cores \(.+\), (\d+ GiB RAM|RAM unknown), Python [\d.]+, "
        r"OMP_NUM_THREADS=\S+, load average at start [\d.]+, [\d.]+, [\d.]+\.$"
    )
    assert re.match(pattern, line), line


def test_common_doctests_pass():
    assert doctest.testmod(_common).failed == 0


def test_write_result_writes_figures_and_section(tmp_path):
    path = _common.write_result("demo", {"ratio": 2.5}, "## Demo\n\n| a |\n", results_dir=tmp_path)
    assert path.read_text() == "## Demo\n\n| a |\n"
    record = json.loads((tmp_path / "demo.json").read_text())
    assert record["name"] == "demo" and record["ratio"] == 2.5 and "measured_at" in record


def test_write_result_rejects_a_section_without_a_title(tmp_path):
    with pytest.raises(ValueError, match="must start with '## <title>'"):
        _common.write_result("demo", {}, "no title", results_dir=tmp_path)
    assert not (tmp_path / "demo.md").exists()


def test_assemble_puts_header_summary_then_sections_in_order(tmp_path):
    (tmp_path / "b.md").write_text("## B section\n")
    (tmp_path / "a.md").write_text("## A section\n")
    outcomes = [harness.Outcome("b", "ok", 12.0), harness.Outcome("c", "failed (exit 2)", 3.0)]
    text = harness.assemble(outcomes, tmp_path, order=("a", "b", "c", "d"))
    assert text.startswith("# Benchmarks\n")
    assert text.index("## A section") < text.index("## B section")
    assert "| a | not rerun (section from an earlier run) | |" in text
    assert "| b | ok | 12 s |" in text
    assert "| c | failed (exit 2) | 3 s |" in text
    assert "| d | not rerun | |" in text


FAKE_OK = """
import sys
from pathlib import Path
results = Path(__file__).parent / "results"
results.mkdir(exist_ok=True)
(results / "warmstart_prefix.md").write_text("## Fake warm-start\\n\\nargs: " + " ".join(sys.argv[1:]) + "\\n")
"""


def test_main_runs_each_script_and_rebuilds_benchmarks_md(tmp_path):
    bench_dir, results = tmp_path / "bench", tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    (bench_dir / "warmstart_prefix.py").write_text(FAKE_OK)
    (bench_dir / "engines.py").write_text("import sys; sys.exit(3)\n")
    (results / "engines.md").write_text("## Stale engines section from an old run\n")
    output = tmp_path / "BENCHMARKS.md"

    code = harness.main(["--quick", "--output", str(output)], bench_dir=bench_dir, results_dir=results)

    text = output.read_text()
    assert code == 1  # engines failed
    assert "## Fake warm-start\n\nargs: --quick" in text  # ran, with --quick passed through
    assert "Stale engines section" not in text and not (results / "engines.md").exists()
    assert "| engines | failed (exit 3) |" in text
    assert "| grpo_step | skipped: grpo_step.py not found |" in text


def test_main_runs_only_the_named_subset(tmp_path, capsys):
    bench_dir, results = tmp_path / "bench", tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    (bench_dir / "warmstart_prefix.py").write_text(FAKE_OK)
    (results / "learning.md").write_text("## Learning from an earlier run\n")
    output = tmp_path / "BENCHMARKS.md"

    assert (
        harness.main(["warmstart_prefix", "--output", str(output)], bench_dir=bench_dir, results_dir=results)
        == 0
    )

    text = output.read_text()
    assert "`python -m bench warmstart_prefix`" in text
    assert "| learning | not rerun (section from an earlier run) | |" in text
    assert text.index("## Fake warm-start") < text.index("## Learning from an earlier run")
    with pytest.raises(SystemExit):
        harness.main(["no_such_bench"], bench_dir=bench_dir, results_dir=results)
    assert "unknown benchmark" in capsys.readouterr().err


def test_side_by_side_discards_warmup_and_rejects_unknown_variants():
    runs = _common.SideBySide(["ours", "peer"], warmup=1)
    runs.run({"ours": lambda: None, "peer": lambda: None}, rounds=2)
    assert len(runs.samples["ours"]) == 3 and len(runs.kept("ours")) == 2
    with pytest.raises(KeyError, match="unknown variant"):
        runs.add("other", 1.0)


# ---------------------------------------------------------------------- engines


class _FakeEngine:
    def __init__(self, length: int):
        self.length = length

    async def generate(self, prompt_ids, sampling):
        from rlfactory_nb.engines import Generation

        return Generation([1] * self.length, [0.0] * self.length, "length")


async def test_timed_round_counts_every_generated_token():
    tokens, seconds = await engines.timed_round(_FakeEngine(5), [[1, 2]] * 16, sampling=None)
    assert tokens == 80 and seconds >= 0


def test_engine_summary_and_section_report_the_ratio_and_a_missing_vllm():
    args = engines.parse_args(["--quick"])
    samples = {(name, batch): [(batch * 10, 0.5)] for name in ("hf", "vllm") for batch in engines.BATCH_SIZES}
    samples.update({("vllm", 64): [(640, 0.25)], ("vllm", 1): [(10, 1.0)]})
    data = engines.summarize(samples, ["hf", "vllm"], None, args, 1_000_000)
    assert data["rows"][-1]["vllm_over_hf"] == pytest.approx(2.0)
    text = engines.markdown(data, ["--quick"], "Machine: test.")
    assert text.startswith("## ") and "| 64 | 1280 | 10.0 | 2560 | 10.0 | 2.00x |" in text
    assert "Where hf is ahead (1 concurrent)" in text and "Where vLLM is ahead (16, 64 concurrent)" in text

    hf_only = engines.summarize(samples, ["hf"], "vllm is not importable: no module", args, 1_000_000)
    text = engines.markdown(hf_only, [], "Machine: test.")
    assert "vllm / hf" not in text and "vLLM not measured: vllm is not importable" in text


# ---------------------------------------------------------------------- GRPO step


def test_closeness_reward_is_graded_and_zero_without_an_answer():
    assert grpo_step.closeness("<answer>919</answer>", "919") == 1.0
    assert 0 < grpo_step.closeness("<answer>900</answer>", "919") < 1
    assert grpo_step.closeness("<answer>-5000</answer>", "919") == 0.0
    assert grpo_step.closeness('<tool_call>{"name": "calculator"}</tool_call>', "919") == 0.0


def test_trl_reward_reads_conversational_completions():
    completions = [[{"role": "assistant", "content": "<answer>12</answer>"}], "<answer>10</answer>"]
    assert grpo_step.trl_reward(completions, ground_truth=["12", "12"], trainer_state=None) == [
        1.0,
        pytest.approx(1 - 2 / 12),
    ]


def test_grpo_summary_ratios_skip_the_warmup_step():
    def steps(seconds):
        return [
            {
                "seconds": s,
                "completion_tokens": 20.0,
                "reward": 0.1,
                "generate_s": 0.5,
                "batch_width": 70.0,
                "sequence_tokens": 50.0,
            }
            for s in seconds
        ]

    results = {
        "ours": {"steps": steps([30.0, 2.0, 2.0]), "ready_rss_mib": 400.0, "peak_rss_mib": 1000.0},
        "trl": {"steps": steps([30.0, 3.0, 3.0]), "ready_rss_mib": 700.0, "peak_rss_mib": 1500.0},
    }
    data = grpo_step.summarize(results, rounds=2)
    assert data["trl_over_ours_time"] == pytest.approx(1.5)
    assert data["trl_over_ours_peak_rss"] == pytest.approx(1.5)
    data["trl_version"] = "test"
    assert "| TRL / ours | 1.50x |" in grpo_step.markdown(data, [], "Machine: test.")


def test_our_grpo_config_matches_the_comparison():
    cfg = grpo_step.ours_config("/tmp/unused")
    assert (cfg.grpo.loss, cfg.grpo.kl_coef, cfg.grpo.filter_zero_variance) == ("dapo", 0.0, False)
    assert cfg.grpo.mini_batch_size == grpo_step.PROMPTS_PER_STEP * grpo_step.GROUP_SIZE
    assert (cfg.rollout.max_turns, cfg.tools.config, cfg.cluster.backend) == (1, None, "local")


@pytest.mark.skipif(not HAS_TRL, reason="trl is not installed (pip install -e '.[bench]')")
def test_trl_config_matches_ours_on_the_installed_trl(tmp_path):
    config = grpo_step.trl_config(str(tmp_path), steps=3)
    assert config.generation_batch_size == grpo_step.PROMPTS_PER_STEP * grpo_step.GROUP_SIZE
    assert config.steps_per_generation == config.gradient_accumulation_steps  # one update per generation
    assert (config.loss_type, config.beta, config.num_iterations) == ("dapo", 0.0, 1)
    assert not config.gradient_checkpointing and not config.bf16 and not config.use_vllm


# ---------------------------------------------------------------------- learning


def test_learning_section_has_a_before_after_table():
    from bench import learning

    rows = [
        {
            "step": step,
            "wall_s": 10.0 * step,
            "train_reward": "" if step == 0 else 0.3,
            "eval_sampled_reward": reward,
            "eval_greedy_reward": reward,
            "eval_tool_call_rate": 0.5,
        }
        for step, reward in ((0, 0.2), (2, 0.4))
    ]
    table = learning.before_after(rows)
    assert "| held-out metric (64 prompts) | step 0 | step 2 |" in table
    assert "| reward, sampled (T=1) | 0.200 | 0.400 |" in table
    data = {"steps": 2, "wall_s": 40.0, "seconds_per_step": 10.0, "peak_rss_mib": 900, "before": rows[0]}
    text = learning.markdown(data, table, True, ["--quick"], "Machine: test.", Path("runs/bench-learning"))
    assert text.startswith("## ") and "learning.png" in text and "python bench/learning.py --quick" in text
