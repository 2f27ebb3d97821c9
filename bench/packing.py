"""Padded vs packed (padding-free) micro-batches on a ragged multi-turn batch: s/step, peak memory, padding.

    python bench/packing.py [--quick] [--steps 2] [--timeout 1200]

What a step is: one GRPO policy update (forward, backward, one AdamW step) on a fixed batch of
16 trajectories whose lengths are lognormal (median 300 tokens, sigma 1; the longest set to
4,000, the tail a tool-heavy agent batch has), each a prompt of a fifth of its tokens and a response
whose middle third is a tool's output (loss mask 0): two assistant turns around it. The model is
Qwen3-architecture with the real 151,936-token vocabulary and random weights (hidden 128, 2 layers,
tied embeddings, as bench/memory.py), float32 on CPU, chunked log-probs on.

Arms, all on the same batch (`ARMS`): padded rows of `micro_batch_size` 4 (`padding_free: false`, padded to
each micro-batch's longest row), padded by the token budget (rows sorted by length, rows x longest
row <= budget), packed (`grpo.padding_free`, rows of <= budget real tokens), and TRL's GRPOTrainer
(`TRL_ARM`, when TRL is installed). Each arm runs in a fresh process of its own (its peak RSS is its
own), one after another.

TRL's GRPO has no padding-free mode: `GRPOConfig` has no `padding_free` field (`SFTConfig` has one;
GRPO's only padding option, `pad_to_multiple_of`, adds padding), and `GRPOTrainer` pads a generation
batch's prompts on the left and completions on the right to the batch's longest of each, then slices
its micro-batches from those tensors as they are (trl/trainer/grpo_trainer.py,
`_generate_and_score_completions` and `_prepare_inputs`). So its best equivalent is its own padded
update on the same batch: the same trajectories, in TRL's layout, replace its generation and scoring
(bench/memory.py's `train_trl`), and its step is its loss, backward and AdamW step, as ours is. On
CPU (no Triton) its fused LM head scores every position through the vocabulary, padding included, so
its CPU figures overstate what it pays on a GPU; `trl_note` says so in the section.

What the CPU measures and what it does not: the chunked output layer's cost is proportional to the
*sampled* tokens in every arm (only they reach it), so packing saves the decoder body's and
attention's work on the padding. A packed row's attention runs per sequence (sdpa on each one's
slice, `rlfactory_nb.models.packed_attention`), so it pays sum(L_i^2) as flash-attention 2's varlen
kernels do on a GPU, not the row's T^2. The GPU figures are for bench/gpu_check.sh (issue #28).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import current_rss_mib, machine_line, markdown_table, peak_rss_mib, section, write_result
from bench.memory import trl_version

NAME = "packing"
MEDIAN_TOKENS, SIGMA, LONGEST, SHORTEST = 300, 1.0, 4000, 16
HEADS = 2
PAD_ID = 0


@dataclass(frozen=True)
class Shape:
    vocab: int
    hidden: int
    layers: int
    rows: int
    budget: int
    """grpo.max_tokens_per_micro_batch of the budget arms"""
    longest: int = LONGEST
    median: int = MEDIAN_TOKENS


FULL = Shape(vocab=151_936, hidden=128, layers=2, rows=16, budget=4096)
QUICK = Shape(vocab=512, hidden=32, layers=1, rows=6, budget=256, longest=200, median=40)

ARMS = {  # padding_free named in every arm: the padded arms stay padded whatever its default
    "padded": (
        "padded, 4 rows a micro-batch (grpo.padding_free: false)",
        {"grpo.micro_batch_size": 4, "grpo.padding_free": False},
    ),
    "padded_budget": (
        "padded, token budget (rows x longest row <= budget)",
        {"grpo.max_tokens_per_micro_batch": "budget", "grpo.padding_free": False},
    ),
    "packed": (
        "packed (grpo.padding_free, <= budget real tokens a row)",
        {"grpo.max_tokens_per_micro_batch": "budget", "grpo.padding_free": True},
    ),
}
TRL_ARM = "trl"
"""TRL's GRPOTrainer, run after `ARMS` when TRL is installed"""


def lengths(shape: Shape, seed: int = 0) -> list[int]:
    """Lognormal trajectory lengths (median `shape.median`), clipped, the longest set to `longest`.

    >>> lengths(QUICK)[:3], max(lengths(QUICK))
    ([200, 30, 16], 200)
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    draws = torch.randn(shape.rows, generator=generator) * SIGMA + math.log(shape.median)
    values = [int(min(max(round(math.exp(float(d))), SHORTEST), shape.longest)) for d in draws]
    values[max(range(len(values)), key=values.__getitem__)] = shape.longest
    return values


def rollouts(shape: Shape) -> tuple[list[Any], list[float]]:
    """The ragged trajectories and their advantages: prompt a fifth, tool output the middle third of each
    response (loss mask 0)."""
    import torch

    from rlfactory_nb.types import Trajectory

    generator = torch.Generator().manual_seed(1)
    trajectories = []
    for total in lengths(shape):
        prompt = min(total - 1, 3 + total // 5)
        ids = torch.randint(1, shape.vocab - 1, (total,), generator=generator).tolist()
        response = total - prompt
        mask = [1] * response
        mask[response // 3 : 2 * response // 3] = [0] * (2 * response // 3 - response // 3)
        old = [-math.log(shape.vocab)] * sum(mask)  # a random model's log-prob, within a few hundredths
        trajectories.append(Trajectory(ids[:prompt], ids[prompt:], mask, old))
    advantages = [1.0 if row % 2 else -1.0 for row in range(shape.rows)]
    return trajectories, advantages


def bench_batch(shape: Shape) -> Any:
    """`rollouts` as our trainer takes them: one `TrainBatch`, rows padded on the right."""
    from rlfactory_nb.train.batch import build_batch

    return build_batch(*rollouts(shape), pad_id=PAD_ID)


def bench_model(shape: Shape) -> Any:
    """bench/memory.py's random Qwen3, seeded: the same weights in every arm's process."""
    from bench.memory import random_qwen3

    return random_qwen3(shape.vocab, shape.hidden, shape.layers, HEADS, HEADS // 2, 3 * shape.hidden)


def config(shape: Shape, arm: str) -> Any:
    from rlfactory_nb.config import RunConfig

    base = {
        "name": "bench-packing",
        "model": {"name": "random-qwen3", "dtype": "float32", "device": "cpu"},
        "grpo": {
            "loss": "dapo",
            "lr": 1e-5,
            "mini_batch_size": shape.rows,
            "logprob_chunk_tokens": 1024,
        },
    }
    overrides = {k: shape.budget if v == "budget" else v for k, v in ARMS[arm][1].items()}
    return RunConfig.from_dict(base, overrides)


def worker(arm: str, shape: Shape, steps: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    if arm == TRL_ARM:
        return trl_worker(shape, steps)
    from rlfactory_nb.train.trainable import TrainingSetup
    from rlfactory_nb.train.update import UpdateSettings, make_optimizer, policy_update

    cfg = config(shape, arm)
    cpu = torch.device("cpu")
    head = timed_output_layer()
    model = TrainingSetup.from_config(cfg, cpu).prepare(bench_model(shape))
    settings, optimizer, batch = (
        UpdateSettings.from_config(cfg, cpu),
        make_optimizer(model, cfg),
        bench_batch(shape),
    )
    ready = current_rss_mib()
    seconds, cpu_seconds, head_seconds, metrics = [], [], [], {}
    for step in range(steps):
        started, cpu_started, head_started = time.perf_counter(), time.process_time(), head["cpu_s"]
        metrics = policy_update(model, optimizer, batch, settings, step + 1)
        seconds.append(time.perf_counter() - started)
        cpu_seconds.append(time.process_time() - cpu_started)
        head_seconds.append(head["cpu_s"] - head_started)
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "output_layer_cpu_seconds": head_seconds,
        "ready_rss_mib": ready,
        "peak_rss_mib": peak_rss_mib(),
        "padding_tokens": metrics["train/padding_tokens"],
        "real_tokens": int(batch.attention_mask.sum()),
        "sampled_tokens": int(batch.loss_mask.sum()),
        "loss": metrics["train/loss"],
    }


def trl_inputs(trajectories: list[Any], advantages: list[float]) -> dict[str, Any]:
    """The trajectories as TRL's `_generate_and_score_completions` returns a generation batch, padded
    with TRL's own `pad` as it pads: prompts on the left, responses on the right, each to the batch's
    longest; the tool outputs (our loss mask 0) are its `tool_mask`, our old log-probs its
    `old_per_token_logps`, and `num_items_in_batch` counts the sampled tokens (its DAPO normalizer)."""
    import torch
    from trl.trainer.utils import pad

    def padded(rows: list[list[Any]], side: str, value: float = 0, dtype: Any = torch.long) -> Any:
        return pad([torch.tensor(row, dtype=dtype) for row in rows], padding_value=value, padding_side=side)

    old = []
    for trajectory in trajectories:  # one log-prob per sampled token: onto the mask == 1 positions
        logprobs = iter(trajectory.logprobs)
        old.append([next(logprobs) if sampled else 0.0 for sampled in trajectory.loss_mask])
    tool_mask = padded([t.loss_mask for t in trajectories], "right", value=1)  # TRL pads it with 1
    completion_mask = padded([[1] * len(t.response_ids) for t in trajectories], "right")
    return {
        "prompt_ids": padded([t.prompt_ids for t in trajectories], "left", PAD_ID),
        "prompt_mask": padded([[1] * len(t.prompt_ids) for t in trajectories], "left"),
        "completion_ids": padded([t.response_ids for t in trajectories], "right", PAD_ID),
        "completion_mask": completion_mask,
        "tool_mask": tool_mask,
        "old_per_token_logps": padded(old, "right", dtype=torch.float32),
        "advantages": torch.tensor(advantages),
        "num_items_in_batch": (completion_mask * tool_mask).sum(),
    }


def trl_worker(shape: Shape, steps: int) -> dict[str, Any]:
    """TRL's GRPOTrainer on the same weights and trajectories (bench/memory.py's `train_trl`), with
    bench/memory.py's `trl_config` (parity with ours) less gradient checkpointing, which no arm here
    uses; its padding counted from the attention masks its model is called with."""
    import tempfile

    from bench import memory

    trajectories, advantages = rollouts(shape)
    fixed = trl_inputs(trajectories, advantages)
    model = bench_model(shape)
    padding: list[int] = []
    model.register_forward_pre_hook(
        lambda module, args, kwargs: padding.append(int((kwargs["attention_mask"] == 0).sum())),
        with_kwargs=True,
    )
    events: dict[str, list[dict[str, float]]] = {"ready": [], "step": []}
    trl_shape = memory.Shape(
        vocab=shape.vocab,
        hidden=shape.hidden,
        layers=shape.layers,
        heads=HEADS,
        rows=shape.rows,
        tokens=shape.longest,
        trained=max(len(t.response_ids) for t in trajectories),  # its max_completion_length
        chunk_tokens=0,  # unused: TRL's LM head chunks by itself
    )
    with tempfile.TemporaryDirectory(prefix="bench-packing-trl-") as folder:
        args = memory.trl_config(trl_shape, folder, steps, gradient_checkpointing=False)
        trainer = memory.train_trl(model, fixed, args, lambda kind, **payload: events[kind].append(payload))
    return {
        "seconds": [step["seconds"] for step in events["step"]],
        "cpu_seconds": [step["cpu_seconds"] for step in events["step"]],
        "ready_rss_mib": events["ready"][0]["rss_mib"],
        "peak_rss_mib": peak_rss_mib(),
        "padding_tokens": sum(padding) / steps,
        "real_tokens": int(fixed["prompt_mask"].sum() + fixed["completion_mask"].sum()),
        "sampled_tokens": int(fixed["num_items_in_batch"]),
        "loss": trainer.state.log_history[-1]["train_loss"],  # the mean over its steps
        "micro_batches": len(padding) // steps,
    }


def run_arm(arm: str, quick: bool, steps: int, timeout_s: float) -> dict[str, Any]:
    command = [sys.executable, __file__, "--worker", arm, "--steps", str(steps)] + (
        ["--quick"] if quick else []
    )
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        return {"status": f"failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}"}
    return {"status": "ok", **json.loads(done.stdout.strip().splitlines()[-1])}


def timed_output_layer() -> dict[str, float]:
    """Add up the CPU time of the chunked output layer's forward and backward (the vocabulary's
    matmuls and softmax, the same sampled tokens in every arm) in the returned dict's "cpu_s"."""
    from rlfactory_nb.engines.logprobs import _ChunkedTokenStats

    spent = {"cpu_s": 0.0}

    def timed(original: Any) -> Any:
        def run(*args: Any) -> Any:
            started = time.process_time()
            try:
                return original(*args)
            finally:
                spent["cpu_s"] += time.process_time() - started

        return staticmethod(run)

    for name in ("forward", "backward"):
        setattr(_ChunkedTokenStats, name, timed(getattr(_ChunkedTokenStats, name)))
    return spent


def label(arm: str) -> str:
    if arm == TRL_ARM:
        return f"TRL {trl_version() or '(not installed)'} GRPOTrainer, padded (1 row a micro-batch)"
    return ARMS[arm][0]


def _versus(value: float, base: float | None) -> str:
    return f"{value / base:.2f}x" if base else "-"


def summary_rows(shape: Shape, results: dict[str, dict[str, Any]]) -> list[list[str]]:
    padded, trl = (results.get(arm, {}) for arm in ("padded", TRL_ARM))
    base_cpu = min(padded["cpu_seconds"]) if padded.get("status") == "ok" else None
    base_body = body_cpu(padded)
    base_peak = padded["peak_rss_mib"] if padded.get("status") == "ok" else None
    trl_peak = trl["peak_rss_mib"] if trl.get("status") == "ok" else None
    rows = []
    for arm, entry in results.items():
        if entry["status"] != "ok":
            rows.append([label(arm), entry["status"], *["-"] * 9])
            continue
        cpu, peak, body = min(entry["cpu_seconds"]), entry["peak_rss_mib"], body_cpu(entry)
        rows.append(
            [
                label(arm),
                f"{min(entry['seconds']):.1f}",
                f"{cpu:.1f}",
                _versus(cpu, base_cpu),
                "-" if body is None else f"{body:.1f}",
                "-" if body is None else _versus(body, base_body),
                f"{peak:,.0f}",
                _versus(peak, base_peak),
                _versus(peak, trl_peak),
                f"{entry['ready_rss_mib']:,.0f}",
                f"{entry['padding_tokens']:,.0f}",
            ]
        )
    return rows


def markdown(
    shape: Shape, results: dict[str, dict[str, Any]], argv: list[str], machine: str, trl: str
) -> str:
    header = [
        "arm",
        "s/step (wall)",
        "CPU s/step",
        "CPU vs padded",
        "of it outside the output layer (s)",
        "that vs padded",
        "peak RSS (MiB)",
        "peak vs padded",
        "peak vs TRL",
        "RSS before the step (MiB)",
        "padding tokens/step",
    ]
    sample = next((entry for entry in results.values() if entry["status"] == "ok"), {})
    sizes = lengths(shape)
    notes = [
        (
            f"- One update (forward, backward, AdamW) of a random Qwen3-architecture model: vocabulary "
            f"{shape.vocab:,}, hidden {shape.hidden}, {shape.layers} layers; {shape.rows} trajectories, "
            f"lognormal lengths (median {shape.median}, sigma {SIGMA}, longest {shape.longest:,}): "
            f"{', '.join(map(str, sorted(sizes)))}; {sample.get('real_tokens', 0):,} real tokens, "
            f"{sample.get('sampled_tokens', 0):,} sampled. Budget {shape.budget:,} tokens; DAPO; float32 "
            "on CPU, one thread, chunked log-probs (1,024); each arm a fresh process, best of its steps."
        ),
        (
            "- The output layer (the vocabulary) sees only sampled tokens in every arm, so packing saves "
            "the decoder body's and attention's work on padding; a packed row's attention runs per "
            "sequence (sdpa on each one's slice), so it pays the sum of each sequence's L^2, as "
            "flash-attention 2's varlen kernels do on a GPU. At this shape (hidden 128, 2 layers) that "
            "output layer is most of a step; in a real model the body is (Qwen3-0.6B: about 3/4 of a "
            "token's work), so the column outside the output layer is the ratio a real model approaches. "
            "The output layer's CPU time is measured inside each arm's step (its forward and backward)."
        ),
        (
            "- Wall time follows the machine's load (the load average above); CPU s/step (the worker's "
            "user + system time) is the figure to compare across arms."
        ),
        trl,
        goals(results),
    ]
    title = "Padding-free micro-batches: padded vs packed on a ragged multi-turn batch"
    return section(
        title, "bench/packing.py", argv, machine, markdown_table(header, summary_rows(shape, results)), notes
    )


def body_cpu(entry: dict[str, Any]) -> float | None:
    """CPU s of the arm's best step outside the output layer (the decoder body, attention, AdamW):
    what packing changes. None for TRL (its head is its own) or an arm without figures."""
    if entry.get("status") != "ok" or "output_layer_cpu_seconds" not in entry:
        return None
    best = min(range(len(entry["cpu_seconds"])), key=entry["cpu_seconds"].__getitem__)
    return entry["cpu_seconds"][best] - entry["output_layer_cpu_seconds"][best]


def goals(results: dict[str, dict[str, Any]]) -> str:
    """The issue's targets: packed CPU s/step <= 0.6x padded, no padding, packed peak <= 0.5x TRL's."""
    padded, packed, trl = (results.get(arm, {}) for arm in ("padded", "packed", TRL_ARM))
    if packed.get("status") != "ok":
        return "- Goals: not measured (the packed arm has no figure)."

    def verdict(met: bool) -> str:
        return "met" if met else "not met"

    if padded.get("status") == "ok":
        ratio = min(packed["cpu_seconds"]) / min(padded["cpu_seconds"])
        speed = f"packed CPU s/step {ratio:.2f}x padded (goal <= 0.6x: {verdict(ratio <= 0.6)})"
        body, base = body_cpu(packed), body_cpu(padded)
        if body is not None and base:
            speed += f", {body / base:.2f}x outside the output layer"
    else:
        speed = "packed vs padded s/step: not measured (the padded arm has no figure)"
    left = packed["padding_tokens"]
    padding = f"padding tokens {left:,.0f} (goal 0: {verdict(not left)})"
    if trl.get("status") == "ok":
        ratio = packed["peak_rss_mib"] / trl["peak_rss_mib"]
        peak = f"packed peak {ratio:.2f}x TRL's (goal <= 0.5x: {verdict(ratio <= 0.5)})"
    else:
        peak = "packed peak vs TRL's: not measured (no TRL figure)"
    return f"- Goals: {speed}; {padding}; {peak}."


def trl_note(shape: Shape) -> str:
    """What TRL's arm is, or why it is missing."""
    if not trl_version():
        return "- TRL: not installed on this machine (pip install -e '.[bench]'), so its arm is left out."
    return (
        f"- TRL {trl_version()}: GRPO has no padding-free mode (`GRPOConfig` has no `padding_free`; "
        "`pad_to_multiple_of` only adds padding), so its best equivalent is its padded update: "
        "`GRPOTrainer` pads a generation batch's prompts on the left and completions on the right to the "
        "batch's longest of each and slices micro-batches from those tensors untrimmed "
        "(trl/trainer/grpo_trainer.py). The same weights and trajectories replace its generation and "
        "scoring (tool outputs its `tool_mask`, our old log-probs its `old_per_token_logps`), so its step "
        "is its loss, backward and AdamW step. Changed from GRPOConfig's defaults for parity only: "
        "learning_rate 1e-5, constant schedule, epsilon_high 0.28, gradient checkpointing off, "
        f"per_device_train_batch_size 1 and gradient_accumulation_steps = num_generations = {shape.rows} "
        "(the batch one optimizer step), float32 on CPU, seed 0. One row a micro-batch is TRL's best: "
        "each micro-batch is as wide as the batch's longest prompt plus longest completion whatever its "
        "rows, so more rows a micro-batch leave its padding as it is and raise its peak. Its padding is "
        "counted from the attention masks its model is called with. Without Triton (on CPU) its fused LM "
        "head scores every position of every row, prompt and padding too, through the vocabulary "
        "(trl/kernels/chunked_logprob.py `_use_triton`, trl/trainer/utils.py `add_fused_lm_head`): nearly "
        "all of its CPU time here, and its logits held for a whole row; on a CUDA GPU it scores only the "
        "completion tokens (tool outputs included). Importing TRL imports vLLM when it is installed "
        "(use_vllm off or not): part of its RSS before the step."
    )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small vocabulary and short rows")
    parser.add_argument("--steps", type=int, default=2, help="update steps per arm (best is kept)")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds before an arm is stopped")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    shape = QUICK if args.quick else FULL
    if args.worker:
        print(json.dumps(worker(args.worker, shape, args.steps)))
        return
    machine = machine_line()
    results = {}
    for arm in [*ARMS, TRL_ARM]:
        if arm == TRL_ARM and not trl_version():
            results[arm] = {"status": "not installed (pip install -e '.[bench]')"}
        else:
            results[arm] = run_arm(arm, args.quick, args.steps, args.timeout)
        print(f"  {arm:<14} {json.dumps(results[arm])}", flush=True)
    text = markdown(shape, results, argv, machine, trl_note(shape))
    write_result(NAME, {"shape": shape.__dict__, "lengths": lengths(shape), "arms": results}, text)
    print(text)


if __name__ == "__main__":
    main()
