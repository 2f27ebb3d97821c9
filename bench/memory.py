"""Peak memory and time of one policy update on a real-vocabulary model: each memory feature in turn, and TRL.

    python bench/memory.py [--quick] [--rounds 2] [--memory-limit-gib 24]

What a step is: one GRPO policy update (forward, backward, one AdamW step) on a fixed batch of 4 rows
of 2,048 tokens, the last 1,536 of each trained (loss mask 1), float32 on CPU. No rollouts: the batch
is random token ids built directly as a `TrainBatch`, because what grows with model size is the update.
The model is Qwen3-architecture with Qwen3's real 151,936-token vocabulary and random weights (hidden
128, 2 layers, tied embeddings): small enough for a step of about a minute of CPU time on one thread,
while the output layer and the log-softmax over the vocabulary, which dominate a real model's update
memory at long response lengths, are real size. (Hidden 256 took 82 s of CPU a step on today's path,
several times that in wall time on the shared 2-core machine, too long for `make bench`'s budget.)

Variants, each adding one feature to the one before (`VARIANTS`): today's path (all logits of a
micro-batch at once, the 4 rows in one micro-batch), + chunked log-probs, + gradient checkpointing,
+ token-budget micro-batches, + LoRA rank 16; and TRL's GRPOTrainer on the same model and batch with
its memory options on. Every variant runs in a fresh process of its own (its memory high-water mark is
its own), one process at a time, in alternating order over the rounds; a variant's peak is the largest
over its rounds and its time the median. A parent watchdog kills a worker whose resident set passes
`--memory-limit-gib` (the result is then "did not fit"), or when the machine itself runs short of
memory, so the kernel's OOM killer never picks a process that is not ours.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    ROOT,
    current_rss_mib,
    machine_line,
    markdown_table,
    peak_rss_mib,
    section,
    write_result,
)

NAME = "memory"
LORA_RANK = 16
LEARNING_RATE = 1e-5
ADVANTAGES = (1.0, -1.0, 0.5, -0.5)
"""one per row: both signs, so every row's tokens get a gradient"""
LOG_DIR = ROOT / "runs" / "bench-memory"
GIB = 2**30


@dataclass(frozen=True)
class Shape:
    """The model and batch of a run: the real one, or --quick's small one."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    rows: int
    tokens: int
    """tokens per row (prompt + response)"""
    trained: int
    """the last `trained` tokens of each row are sampled ones (loss mask 1)"""
    chunk_tokens: int
    """grpo.logprob_chunk_tokens of the chunked variants"""

    @property
    def kv_heads(self) -> int:
        return max(1, self.heads // 2)

    @property
    def intermediate(self) -> int:
        return 3 * self.hidden


FULL = Shape(
    vocab=151_936, hidden=128, layers=2, heads=2, rows=4, tokens=2048, trained=1536, chunk_tokens=256
)
QUICK = Shape(vocab=512, hidden=32, layers=1, heads=2, rows=4, tokens=64, trained=48, chunk_tokens=16)


@dataclass(frozen=True)
class Variant:
    name: str
    label: str
    overrides: dict[str, Any] = field(default_factory=dict)
    """dotted RunConfig keys on top of `base_config` (ours); empty for TRL"""


def variants(shape: Shape) -> tuple[Variant, ...]:
    """Ours cumulatively (each row adds one feature to the row above), then TRL."""
    steps = [
        ("today", "today's path (all logits at once, the 4 rows in one micro-batch)", {}),
        (
            "chunked",
            f"+ chunked log-probs ({shape.chunk_tokens:,} tokens)",
            {"grpo.logprob_chunk_tokens": shape.chunk_tokens},
        ),
        ("checkpointing", "+ gradient checkpointing", {"model.gradient_checkpointing": True}),
        (
            "token_budget",
            f"+ token budget ({shape.tokens:,} tokens a micro-batch: 1 row)",
            {"grpo.max_tokens_per_micro_batch": shape.tokens},
        ),
        (
            "padding_free",
            "+ padding-free (packed rows within the budget, per-sequence attention)",
            {"grpo.padding_free": True},
        ),
        (
            "lora",
            f"+ LoRA rank {LORA_RANK}: all features",
            {"model.lora": {"rank": LORA_RANK, "alpha": 2 * LORA_RANK}},
        ),
    ]
    result, overrides = [], {}
    for name, label, added in steps:
        overrides = {**overrides, **added}
        result.append(Variant(name, label, overrides))
    trl_label = (
        f"TRL {trl_version() or '(not installed)'} GRPOTrainer: gradient checkpointing, LoRA rank "
        f"{LORA_RANK}, 1 row a micro-batch, its chunked LM head"
    )
    return (*result, Variant("trl", trl_label))


# ---------------------------------------------------------------------- the model and the batch


def random_qwen3(
    vocab: int,
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    head_dim: int | None = None,
    seed: int = 0,
    max_positions: int = 40_960,
) -> Any:
    """A Qwen3ForCausalLM with random (seeded) weights and tied embeddings, as Qwen3 up to 4B has."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim or hidden // heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        bos_token_id=None,
        eos_token_id=vocab - 1,
        pad_token_id=0,
    )
    return Qwen3ForCausalLM(config)


def bench_model(shape: Shape) -> Any:
    return random_qwen3(
        shape.vocab,
        shape.hidden,
        shape.layers,
        shape.heads,
        shape.kv_heads,
        shape.intermediate,
        max_positions=shape.tokens,
    )


def bench_batch(shape: Shape) -> Any:
    """`rows` rows of `tokens` random ids, the last `trained` of each sampled (seeded, the same everywhere).

    The old logprobs are a uniform distribution's, -log(vocab): what a random-weight model assigns
    within a few hundredths, so the PPO ratio starts near 1 and clipping leaves the gradient alone.
    """
    import math

    import torch

    from rlfactory_nb.train.batch import TrainBatch

    generator = torch.Generator().manual_seed(0)
    size = (shape.rows, shape.tokens)
    input_ids = torch.randint(1, shape.vocab - 1, size, generator=generator)
    loss_mask = torch.zeros(size, dtype=torch.bool)
    loss_mask[:, shape.tokens - shape.trained :] = True
    return TrainBatch(
        input_ids=input_ids,
        attention_mask=torch.ones(size, dtype=torch.long),
        loss_mask=loss_mask,
        old_logprobs=torch.where(loss_mask, -math.log(shape.vocab), 0.0),
        advantages=torch.tensor(ADVANTAGES[: shape.rows] * (shape.rows // len(ADVANTAGES) + 1))[: shape.rows],
    )


def base_config(shape: Shape, overrides: dict[str, Any]) -> Any:
    """Today's path, as a RunConfig: every memory feature off, the whole batch one micro-batch."""
    from rlfactory_nb.config import RunConfig

    base = {
        "name": "bench-memory",
        "model": {
            "name": "random-qwen3",
            "dtype": "float32",
            "device": "cpu",
            "gradient_checkpointing": False,
            "lora": None,
        },
        "grpo": {
            "loss": "dapo",
            "clip_low": 0.2,
            "clip_high": 0.28,
            "kl_coef": 0.0,
            "lr": LEARNING_RATE,
            "mini_batch_size": shape.rows,
            "micro_batch_size": shape.rows,
            "logprob_chunk_tokens": None,
            "max_tokens_per_micro_batch": None,
            "padding_free": False,
        },
    }
    return RunConfig.from_dict(base, overrides)


def state_bytes(model: Any, optimizer: Any) -> dict[str, int]:
    """Bytes of the gradients and of the optimizer state now held, and the trained parameter count."""
    import torch

    trained = [p for p in model.parameters() if p.requires_grad]
    grads = sum(p.grad.numel() * p.grad.element_size() for p in trained if p.grad is not None)
    moments = sum(
        value.numel() * value.element_size()
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor) and value.dim() > 0  # the step counter is a scalar
    )
    return {
        "grad_bytes": grads,
        "optimizer_bytes": moments,
        "trained_params": sum(p.numel() for p in trained),
    }


# ---------------------------------------------------------------------- worker side


class Report:
    """The worker's side of the result file: one JSON object a line, flushed at once (a killed worker
    leaves what it had written)."""

    def __init__(self, path: Path):
        self.handle = path.open("a")

    def __call__(self, kind: str, **payload: Any) -> None:
        self.handle.write(json.dumps({"kind": kind, **payload}) + "\n")
        self.handle.flush()


def run_ours(variant: Variant, shape: Shape, steps: int, report: Report) -> None:
    import torch

    from rlfactory_nb.train.trainable import TrainingSetup
    from rlfactory_nb.train.update import UpdateSettings, make_optimizer, policy_update

    cfg = base_config(shape, variant.overrides)
    cpu = torch.device("cpu")
    model = TrainingSetup.from_config(cfg, cpu).prepare(bench_model(shape))  # LoRA, checkpointing
    settings = UpdateSettings.from_config(cfg, cpu)
    optimizer = make_optimizer(model, cfg)
    batch = bench_batch(shape)
    report("ready", rss_mib=current_rss_mib())
    for step in range(steps):
        started, cpu_started = time.perf_counter(), time.process_time()
        policy_update(model, optimizer, batch, settings, step + 1)  # training steps count from 1
        report("step", seconds=time.perf_counter() - started, cpu_seconds=time.process_time() - cpu_started)
    report("state", **state_bytes(model, optimizer))


def trl_config(shape: Shape, output_dir: str, steps: int, gradient_checkpointing: bool = True) -> Any:
    """The same update as ours, one row a micro-batch: DAPO token mean, clip 0.2/0.28, no KL, AdamW."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=output_dir,
        max_steps=steps,
        per_device_train_batch_size=1,
        gradient_accumulation_steps=shape.rows,
        num_generations=shape.rows,
        max_completion_length=shape.trained,
        learning_rate=LEARNING_RATE,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        loss_type="dapo",
        epsilon=0.2,
        epsilon_high=0.28,
        beta=0.0,
        num_iterations=1,
        use_vllm=False,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=gradient_checkpointing,
        logging_steps=10_000,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=0,
    )


def train_trl(
    model: Any, fixed: dict[str, Any], args: Any, report: Callable[..., None], peft_config: Any = None
) -> Any:
    """Train TRL's GRPOTrainer `args.max_steps` steps on `fixed`, a generation batch as TRL's
    `_generate_and_score_completions` returns one: generation and scoring are replaced by it, so a step
    is TRL's update alone (its chunked LM head, its loss, its optimizer), as ours is. Reports "ready"
    once set up and "step" after each optimizer step; returns the trainer."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from rlfactory_nb.models.presets.tokenizer import build_tokenizer

    class FixedBatchGRPOTrainer(GRPOTrainer):
        def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
            return {key: value.clone() for key, value in fixed.items()}

    class Timing(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            report("ready", rss_mib=current_rss_mib())

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.started, self.cpu_started = time.perf_counter(), time.process_time()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            seconds, cpu_seconds = time.perf_counter() - self.started, time.process_time() - self.cpu_started
            report("step", seconds=seconds, cpu_seconds=cpu_seconds)

    prompts = [{"prompt": "unused: the batch is fixed"}] * (args.generation_batch_size * (args.max_steps + 1))
    trainer = FixedBatchGRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **_: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_list(prompts),
        processing_class=build_tokenizer(),
        peft_config=peft_config,
        callbacks=[Timing()],
    )
    trainer.train()
    return trainer


def run_trl(shape: Shape, steps: int, report: Report) -> None:
    """TRL's trainer on our batch (`train_trl`), with LoRA and gradient checkpointing as ours has them."""
    import torch
    from peft import LoraConfig

    batch = bench_batch(shape)
    prompt = shape.tokens - shape.trained
    fixed = {
        "prompt_ids": batch.input_ids[:, :prompt],
        "prompt_mask": batch.attention_mask[:, :prompt],
        "completion_ids": batch.input_ids[:, prompt:],
        "completion_mask": batch.attention_mask[:, prompt:],
        "advantages": batch.advantages,
        "num_items_in_batch": batch.loss_mask.sum(),
    }
    lora = LoraConfig(
        r=LORA_RANK,
        lora_alpha=2 * LORA_RANK,
        lora_dropout=0.0,
        target_modules="all-linear",  # what ours adapts when model.lora.target_modules is unset
        task_type="CAUSAL_LM",
    )
    with tempfile.TemporaryDirectory(prefix="bench-memory-trl-") as folder:
        trainer = train_trl(bench_model(shape), fixed, trl_config(shape, folder, steps), report, lora)
        with torch.no_grad():
            report("state", **state_bytes(trainer.model, trainer.optimizer))


def worker_main(name: str, shape: Shape, steps: int, result: Path) -> None:
    import torch

    torch.set_num_threads(1)
    report = Report(result)
    if name == "trl":
        run_trl(shape, steps, report)
    else:
        variant = next(v for v in variants(shape) if v.name == name)
        run_ours(variant, shape, steps, report)
    report("final", peak_rss_mib=peak_rss_mib())


# ---------------------------------------------------------------------- parent side


def _status_kib(pid: int, key: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return float("inf")


@dataclass
class Outcome:
    """One worker process: what it reported, or how it ended."""

    variant: str
    status: str = "ok"
    """"ok", or why there is no figure: "did not fit in N GiB", "machine out of memory", "failed (exit N)"."""
    seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)
    """the worker's CPU time (user + system) a step: steadier than wall time on shared cores"""
    ready_rss_mib: float | None = None
    peak_rss_mib: float | None = None
    state: dict[str, int] | None = None


def run_worker(
    variant: str, quick: bool, steps: int, limit_gib: float, reserve_gib: float, timeout_s: float
) -> Outcome:
    """Start one worker, watch its memory until it exits, and read what it wrote."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    result = LOG_DIR / f"{variant}.jsonl"
    result.unlink(missing_ok=True)
    command = [sys.executable, __file__, "--worker", variant, "--steps", str(steps), "--result", str(result)]
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    outcome = Outcome(variant)
    largest_kib = 0
    with (LOG_DIR / f"{variant}.log").open("w") as log:
        process = subprocess.Popen(
            command + (["--quick"] if quick else []), stdout=log, stderr=log, env=env, cwd=ROOT
        )
        started = time.monotonic()
        while process.poll() is None:
            largest_kib = max(largest_kib, _status_kib(process.pid, "VmHWM") or 0)
            rss_gib = (_status_kib(process.pid, "VmRSS") or 0) / 2**20
            if rss_gib > limit_gib:
                outcome.status = f"did not fit in {limit_gib:g} GiB"
            elif available_gib() < reserve_gib:
                outcome.status = f"machine out of memory at {rss_gib:.1f} GiB (other processes included)"
            elif time.monotonic() - started > timeout_s:
                outcome.status = f"timed out after {timeout_s:.0f} s"
            if outcome.status != "ok":
                process.kill()
                break
            time.sleep(0.05)
        code = process.wait()
    if outcome.status == "ok" and code != 0:
        outcome.status = f"failed (exit {code}): see {LOG_DIR / (variant + '.log')}"
    for line in result.read_text().splitlines() if result.exists() else []:
        message = json.loads(line)
        if message["kind"] == "ready":
            outcome.ready_rss_mib = message["rss_mib"]
        elif message["kind"] == "step":
            outcome.seconds.append(message["seconds"])
            outcome.cpu_seconds.append(message["cpu_seconds"])
        elif message["kind"] == "state":
            outcome.state = {k: v for k, v in message.items() if k != "kind"}
        elif message["kind"] == "final":
            outcome.peak_rss_mib = message["peak_rss_mib"]
    if outcome.peak_rss_mib is None and largest_kib:
        outcome.peak_rss_mib = largest_kib / 1024  # killed: the high-water mark the watchdog last saw
    return outcome


def drive(names: list[str], args: argparse.Namespace) -> dict[str, list[Outcome]]:
    """Every variant once per round, one process at a time, the order reversed every other round."""
    outcomes: dict[str, list[Outcome]] = {name: [] for name in names}
    for round_index in range(args.rounds):
        order = names if round_index % 2 == 0 else names[::-1]
        for name in order:
            if outcomes[name] and outcomes[name][-1].status.startswith(("did not fit", "failed")):
                continue  # the same process would fail the same way again
            outcome = run_worker(
                name, args.quick, args.steps, args.memory_limit_gib, args.reserve_gib, args.worker_timeout
            )
            outcomes[name].append(outcome)
            seconds = ", ".join(f"{s:.1f}" for s in outcome.seconds) or "-"
            peak = f"{outcome.peak_rss_mib:.0f}" if outcome.peak_rss_mib else "-"
            print(
                f"  round {round_index} {name:<14} {outcome.status:<10} s/step {seconds}  peak {peak} MiB",
                flush=True,
            )
    return outcomes


def summarize(
    outcomes: dict[str, list[Outcome]], shape: Shape, rounds: int, limit_gib: float
) -> dict[str, Any]:
    """Per variant: median step time over rounds, largest peak RSS, state bytes; then the goal ratios."""
    summary: dict[str, Any] = {
        "shape": shape.__dict__,
        "rounds": rounds,
        "memory_limit_gib": limit_gib,
        "variants": {},
    }
    for name, runs in outcomes.items():
        good = [run for run in runs if run.status == "ok"]
        failed = [run.status for run in runs if run.status != "ok"]
        times = [s for run in good for s in run.seconds]
        cpu_times = [s for run in good for s in run.cpu_seconds]
        summary["variants"][name] = {
            "status": failed[0] if failed else "ok",
            "median_step_s": statistics.median(times) if times else None,
            "median_cpu_s": statistics.median(cpu_times) if cpu_times else None,
            "step_s": times,
            "cpu_s": cpu_times,
            "peak_rss_mib": max((run.peak_rss_mib for run in good if run.peak_rss_mib), default=None),
            "killed_at_rss_mib": max(
                (run.peak_rss_mib or 0 for run in runs if run.status != "ok"), default=None
            ),
            "ready_rss_mib": max((run.ready_rss_mib for run in good if run.ready_rss_mib), default=None),
            "state": next((run.state for run in good if run.state), None),
        }
    summary["goals"] = goals(summary["variants"])
    return summary


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator and denominator else None


def _state_total(entry: dict[str, Any]) -> float | None:
    state = entry.get("state")
    return state["grad_bytes"] + state["optimizer_bytes"] if state else None


def goals(by_name: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets: all features on vs today's peak (<= 0.35x) and TRL's (<= 0.5x), step time
    <= 1.3x today's, and LoRA's gradient + optimizer bytes <= 0.05x full fine-tuning's."""
    all_on, today, trl = by_name.get("lora", {}), by_name.get("today", {}), by_name.get("trl", {})
    full = by_name.get("token_budget", {})  # the same features, full fine-tuning
    return {
        "peak_vs_today": _ratio(all_on.get("peak_rss_mib"), today.get("peak_rss_mib")),
        "peak_vs_trl": _ratio(all_on.get("peak_rss_mib"), trl.get("peak_rss_mib")),
        "time_vs_today": _ratio(all_on.get("median_cpu_s"), today.get("median_cpu_s")),
        "wall_time_vs_today": _ratio(all_on.get("median_step_s"), today.get("median_step_s")),
        "lora_state_vs_full": _ratio(_state_total(all_on), _state_total(full)),
    }


TARGETS = {"peak_vs_today": 0.35, "peak_vs_trl": 0.5, "time_vs_today": 1.3, "lora_state_vs_full": 0.05}


def _mib(value: float | None) -> str:
    return f"{value:,.0f}" if value else "-"


def markdown(data: dict[str, Any], labels: dict[str, str], argv: list[str], machine: str) -> str:
    by_name = data["variants"]
    today, trl = by_name.get("today", {}), by_name.get("trl", {})
    rows = []
    for name, entry in by_name.items():
        state = _state_total(entry)
        if entry["status"] == "ok":
            seconds, cpu, peak = (
                f"{entry['median_step_s']:.1f}",
                f"{entry['median_cpu_s']:.1f}",
                _mib(entry["peak_rss_mib"]),
            )
        else:
            seconds, cpu, peak = entry["status"], "-", f"killed at {_mib(entry['killed_at_rss_mib'])}"
        rows.append(
            [
                labels[name],
                seconds,
                cpu,
                _times(_ratio(entry["median_cpu_s"], today.get("median_cpu_s"))),
                peak,
                _times(_ratio(entry["peak_rss_mib"], today.get("peak_rss_mib"))),
                _times(_ratio(entry["peak_rss_mib"], trl.get("peak_rss_mib"))),
                _mib(entry["ready_rss_mib"]),
                f"{state / 2**20:,.1f}" if state else "-",
            ]
        )
    header = [
        "variant",
        "s/step (wall)",
        "CPU s/step",
        "CPU time vs today",
        "peak RSS (MiB)",
        "peak vs today",
        "peak vs TRL",
        "RSS before the step (MiB)",
        "gradients + AdamW state (MiB)",
    ]
    title = "Memory of one policy update: chunked log-probs, checkpointing, token budget, LoRA vs TRL"
    return section(title, "bench/memory.py", argv, machine, markdown_table(header, rows), explain(data))


def _times(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "-"


def explain(data: dict[str, Any]) -> list[str]:
    shape = Shape(**data["shape"])
    limit = data["memory_limit_gib"]
    bullets = [
        (
            f"- One update (forward, backward, one AdamW step) of a Qwen3-architecture model with random "
            f"weights: vocabulary {shape.vocab:,}, hidden {shape.hidden}, {shape.layers} layer(s), tied "
            f"embeddings; {shape.rows} rows of {shape.tokens:,} tokens, the last {shape.trained:,} of each "
            "trained; DAPO loss, clip 0.2/0.28, no KL; float32, one thread. Each variant adds one feature "
            "to the row above; every one runs in a fresh process of its own, one at a time, in alternating "
            f"order over {data['rounds']} round(s): median step time, largest peak."
        ),
        (
            "- Peak RSS is the worker process's high-water mark (getrusage ru_maxrss): imports, model, "
            "optimizer and the step; 'before the step' is its resident set once set up. A worker is "
            f"stopped when its resident set passes {limit:g} GiB: that is its result ('did not fit')."
        ),
        (
            "- TRL runs its own update on the same model weights and batch: its generation and scoring "
            "are replaced by the fixed batch (`_generate_and_score_completions`), so its step is its "
            "loss, backward and optimizer step, as ours is. TRL 1.x always computes log-probs and "
            "entropy through its chunked, fused LM head (a torch path on CPU); its Liger kernels are "
            "deprecated and need Triton (GPU), so they are off."
        ),
    ]
    verdicts = []
    for key, text in (
        ("peak_vs_today", "all features' peak vs today's"),
        ("peak_vs_trl", "all features' peak vs TRL's"),
        ("time_vs_today", "all features' CPU time a step vs today's"),
        ("lora_state_vs_full", "LoRA's gradients + AdamW state vs full fine-tuning's (token-budget row)"),
    ):
        value, target = data["goals"][key], TARGETS[key]
        if value is None:
            verdicts.append(f"{text}: not measured (a variant has no figure)")
        else:
            verdicts.append(
                f"{text} {value:.3g}x (goal <= {target}x: {'met' if value <= target else 'not met'})"
            )
    bullets.append("- Goals: " + "; ".join(verdicts) + ".")
    return bullets


# ---------------------------------------------------------------------- entry point


def trl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trl")
    except PackageNotFoundError:
        return ""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small vocabulary and short rows, 1 round")
    parser.add_argument("--rounds", type=int, default=1, help="processes per variant (alternating order)")
    parser.add_argument("--steps", type=int, default=1, help="update steps in each process")
    parser.add_argument(
        "--memory-limit-gib", type=float, default=24.0, help="a worker above this did not fit"
    )
    parser.add_argument(
        "--reserve-gib",
        type=float,
        default=0.75,
        help="stop a worker when the machine has less than this free",
    )
    parser.add_argument(
        "--worker-timeout", type=float, default=900.0, help="seconds before a worker is stopped"
    )
    parser.add_argument("--only", nargs="+", help="run only these variants (names in the JSON figures)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds = 1
    return args


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    shape = QUICK if args.quick else FULL
    if args.worker:
        worker_main(args.worker, shape, args.steps, args.result)
        return
    all_variants = variants(shape)
    names = [v.name for v in all_variants if (not args.only or v.name in args.only)]
    if not trl_version() and "trl" in names:
        print("TRL is not installed (pip install -e '.[bench]'): its row is left out")
        names.remove("trl")
    machine = machine_line()
    data = summarize(drive(names, args), shape, args.rounds, args.memory_limit_gib)
    labels = {v.name: v.label for v in all_variants}
    text = markdown(data, labels, argv, machine)
    write_result(NAME, data, text)
    print(text)


if __name__ == "__main__":
    main()
