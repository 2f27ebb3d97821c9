"""The GPU check's body (run it through bench/gpu_check.sh): GRPO steps of a Qwen3-1.7B-shaped model.

    bash bench/gpu_check.sh [--out DIR]      # one CUDA GPU: Qwen3-1.7B shape, full vocabulary
    bash bench/gpu_check.sh --cpu-smoke      # a tiny shape on CPU, to test the script itself

Modes, each on a fresh model with the same random weights (seed 0), bfloat16 compute:
    full         full fine-tuning over a float32 master (weights + AdamW state), 2 steps
    lora         LoRA rank 16 (base frozen in bfloat16, adapters float32), 2 steps
    bf16-master  full fine-tuning with bfloat16 weights and AdamW state, 1 step: the contrast for
                 the fraction of weights one step at lr 1e-6 changes (issue 20)
with gradient checkpointing, chunked log-probs and token-budget micro-batches on. Then the packing
check (issue #28): one policy update of the same model shape on a fixed ragged batch (16
trajectories, lognormal lengths with median 300 and a 4,000-token tail: `bench/packing.py`'s batch),
padded and then packed (`grpo.padding_free`), with flash-attention 2's varlen kernels when flash-attn
is installed, else per-sequence sdpa. It records each layout's update time, peak memory and padding
tokens, and the largest gap between the two layouts' per-token log-probs (bf16 compute).

A step is the training loop's, from its parts (`rlfactory_nb.train.loop.Trainer.step_once` reads the
same): rollouts on the hf engine (sharing the trained model, so the weight sync is a no-op) ->
rewards -> group advantages -> `LocalBackend.update`. The Trainer itself is not used because its
imports reach `mcp` (rewards.judge -> tools), which the GPU machine lacks; nothing here needs it. The
reward is a stand-in (a hash of the sampled ids): random weights cannot solve a task, and the check
measures memory, time and whether weights move, not learning.

The tokenizer has Qwen3's id layout without Qwen's BPE data (none on the GPU machine): ids 0-255 are
the bytes as in Qwen's ranks, fillers up to 151,643, then Qwen3's added tokens at 151,643+ (so
`<|im_end|>` is 151,645) and the model's 151,936-row embedding.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import peak_rss_mib
from bench.memory import random_qwen3

QWEN3_BPE_RANKS = 151_643


@dataclass(frozen=True)
class CheckShape:
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    prompts: int
    """prompts per step"""
    group: int
    """samples per prompt"""
    max_new_tokens: int
    token_budget: int
    """grpo.max_tokens_per_micro_batch"""


QWEN3_1_7B = CheckShape(
    vocab=151_936, hidden=2048, layers=28, heads=16, kv_heads=8, head_dim=128, intermediate=6144,
    prompts=8, group=8, max_new_tokens=256, token_budget=8192,
)  # fmt: skip
CPU_SMOKE = CheckShape(
    vocab=1024, hidden=64, layers=2, heads=2, kv_heads=1, head_dim=32, intermediate=128,
    prompts=2, group=2, max_new_tokens=8, token_budget=128,
)  # fmt: skip

MODES = (
    # name, LoRA rank, master dtype, steps
    ("full", None, "float32", 2),
    ("lora", 16, "float32", 2),
    ("bf16-master", None, "bfloat16", 1),
)
LEARNING_RATE = 1e-6


def full_vocab_tokenizer(vocab: int) -> Any:
    """A byte-level tokenizer with Qwen3's id layout and chat template, built without any data file:
    text encodes byte by byte (no merges), every id up to the added tokens decodes to a filler."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from rlfactory_nb.models.presets.tokenizer import ADDED_TOKENS, _byte_to_unicode, chat_template

    ranks = min(QWEN3_BPE_RANKS, vocab - len(ADDED_TOKENS))
    to_unicode = _byte_to_unicode()
    pieces = [to_unicode[byte] for byte in range(256)]
    pieces += ["".join(to_unicode[b] for b in f"<{rank}>".encode()) for rank in range(256, ranks)]
    core = Tokenizer(models.BPE(vocab={piece: rank for rank, piece in enumerate(pieces)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.add_tokens([AddedToken(text, special=special, normalized=False) for text, special in ADDED_TOKENS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = chat_template()
    return tokenizer


def run_config(shape: CheckShape, device: str, lora_rank: int | None, master: str) -> Any:
    from rlfactory_nb.config import RunConfig

    return RunConfig.from_dict(
        {
            "name": "gpu-check",
            "model": {
                "name": "random-qwen3",
                "dtype": "bfloat16",
                "master_dtype": master,
                "device": device,
                "gradient_checkpointing": True,
                "lora": None if lora_rank is None else {"rank": lora_rank, "alpha": 2 * lora_rank},
            },
            "rollout": {"max_turns": 1, "max_new_tokens": shape.max_new_tokens, "temperature": 1.0},
            "grpo": {
                "prompts_per_step": shape.prompts,
                "group_size": shape.group,
                "lr": LEARNING_RATE,
                "loss": "dapo",
                "kl_coef": 0.0,
                "filter_zero_variance": False,
                "mini_batch_size": shape.prompts * shape.group,
                "micro_batch_size": shape.prompts * shape.group,
                "max_tokens_per_micro_batch": shape.token_budget,
            },
            "cluster": {"backend": "local"},
        }
    )


def stand_in_reward(response_ids: list[int]) -> float:
    """In [0, 1), different for different samples, the same for the same ones."""
    return zlib.crc32(str(response_ids).encode()) / 2**32


def check_model(shape: CheckShape, device: torch.device) -> Any:
    """The check's random Qwen3 (seed 0, float32) of `shape`, built on `device`."""
    with torch.device(device):
        return random_qwen3(
            shape.vocab, shape.hidden, shape.layers, shape.heads, shape.kv_heads, shape.intermediate,
            head_dim=shape.head_dim,
        )  # fmt: skip


class Memory:
    """Peak memory of the device the check runs on: CUDA's allocator, or the process RSS on CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def reset(self) -> None:
        """Start a mode's peak afresh (CUDA only: a process's RSS high-water mark cannot be reset)."""
        gc.collect()  # the previous mode's model and optimizer, should a reference cycle hold them
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def peak_gib(self) -> float:
        self.sync()
        return torch.cuda.max_memory_allocated() / 2**30 if self.cuda else peak_rss_mib() / 1024

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


async def run_mode(
    shape: CheckShape,
    device: torch.device,
    mode: tuple[str, int | None, str, int],
    tokenizer: Any,
    memory: Memory,
) -> list[dict[str, Any]]:
    """`steps` GRPO steps of one mode on a fresh model; one record a step."""
    from rlfactory_nb.algo.advantages import group_advantages
    from rlfactory_nb.models.policy import Policy
    from rlfactory_nb.models.presets import calculator
    from rlfactory_nb.rollout.agent import Agent
    from rlfactory_nb.rollout.groups import rollout_groups
    from rlfactory_nb.train.batch import build_batch
    from rlfactory_nb.train.local import LocalBackend
    from rlfactory_nb.train.trainable import TrainingSetup

    name, lora_rank, master, steps = mode
    cfg = run_config(shape, device.type, lora_rank, master)
    memory.reset()
    model = check_model(shape, device).to(getattr(torch, master))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    policy = Policy(model=model, tokenizer=tokenizer, path=Path("random-qwen3"), name="random-qwen3")
    policy.model = TrainingSetup.from_config(cfg, device).prepare(policy.model)
    backend = LocalBackend(cfg, policy)
    # Random weights sample byte tokens that are not valid UTF-8, so a re-render of the conversation never
    # matches the sampled ids: the drift check has nothing to say here.
    agent = Agent(
        policy, None, max_turns=1, max_new_tokens=shape.max_new_tokens, engine=backend.engine, drift="off"
    )
    rows = calculator.dataset("train", shape.prompts * steps)
    records = []
    try:
        for step in range(steps):
            before = _trainable_copy(policy.model) if step == 0 else None
            memory.sync()
            started = time.perf_counter()
            groups = await rollout_groups(
                agent, rows[step * shape.prompts : (step + 1) * shape.prompts], shape.group
            )
            memory.sync()
            generate_s = time.perf_counter() - started
            trajectories = [traj for group in groups for traj in group]
            rewards = torch.tensor([[stand_in_reward(t.response_ids) for t in group] for group in groups])
            batch = build_batch(trajectories, group_advantages(rewards).flatten(), tokenizer.pad_token_id)
            update_started = time.perf_counter()
            metrics = await backend.update(batch, step + 1)  # training steps count from 1
            await backend.sync_weights()
            memory.sync()
            ended = time.perf_counter()
            generated = sum(len(t.response_ids) for t in trajectories)
            record = {
                "mode": name,
                "step": step,
                "step_s": ended - started,
                "generate_s": generate_s,
                "update_s": ended - update_started,
                "generated_tokens": generated,
                "generated_tokens_per_s": generated / generate_s,
                "peak_gib": memory.peak_gib(),
                "grad_norm": metrics.get("train/grad_norm"),
            }
            if before is not None:
                record["changed_fraction"] = _changed_fraction(policy.model, before)
            records.append(record)
            print(_line(record), flush=True)
    finally:
        await backend.close()
    return records


def packed_attention(device: torch.device) -> str:
    """flash-attention 2 when it can run (CUDA and the flash-attn package), else sdpa (a padding-free
    setup runs it per sequence)."""
    if device.type != "cuda":
        return "sdpa"
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return "sdpa"
    return "flash_attention_2"


def run_packing(shape: CheckShape, device: torch.device, memory: Memory, smoke: bool) -> list[dict[str, Any]]:
    """One update padded, then one packed, of the same weights on `bench/packing.py`'s ragged batch:
    both within the token budget (padded: rows x longest row; packed: real tokens a row)."""
    from dataclasses import replace

    from bench import packing
    from rlfactory_nb.train.trainable import TrainingSetup
    from rlfactory_nb.train.update import UpdateSettings, make_optimizer, policy_update, token_stats

    batch_shape = replace(packing.QUICK if smoke else packing.FULL, vocab=shape.vocab)
    batch = packing.bench_batch(batch_shape)
    attention = packed_attention(device)
    records, logprobs = [], {}
    for layout in ("padded", "packed"):
        cfg = run_config(shape, device.type, None, "float32")
        cfg = type(cfg).from_dict(cfg.to_dict(), {"grpo.padding_free": layout == "packed"})
        memory.reset()
        model = check_model(shape, device)
        model.set_attn_implementation(attention)
        model = TrainingSetup.from_config(cfg, device).prepare(model).train()
        settings = UpdateSettings.from_config(cfg, device)
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
            logprobs[layout], _ = token_stats(model, batch.to(device), settings, entropy_grad=False)
        optimizer = make_optimizer(model, cfg)
        memory.sync()
        started = time.perf_counter()
        metrics = policy_update(model, optimizer, batch, settings, step=1)
        memory.sync()
        record = {
            "mode": f"update-{layout}",
            "step": 0,
            "attention": model.config._attn_implementation,
            "update_s": time.perf_counter() - started,
            "peak_gib": memory.peak_gib(),
            "padding_tokens": metrics["train/padding_tokens"],
            "real_tokens": int(batch.attention_mask.sum()),
        }
        if layout == "packed":
            gap = (logprobs["packed"] - logprobs["padded"])[batch.loss_mask.to(device)].abs()
            record.update(logprob_gap_max=float(gap.max()), logprob_gap_mean=float(gap.mean()))
        records.append(record)
        print(_packing_line(record), flush=True)
        del model, optimizer
    return records


def _packing_line(record: dict[str, Any]) -> str:
    gap = (
        f", log-prob gap to padded max {record['logprob_gap_max']:.4f} mean {record['logprob_gap_mean']:.5f}"
        if "logprob_gap_max" in record
        else ""
    )
    return (
        f"{record['mode']:<15} {record['attention']}: update {record['update_s']:.2f} s, peak "
        f"{record['peak_gib']:.2f} GiB, {record['padding_tokens']:.0f} padding of {record['real_tokens']} "
        f"real tokens{gap}"
    )


def _trainable_copy(model: Any) -> dict[str, torch.Tensor]:
    """The trainable weights as they are now, on the CPU (kept off the device so the peak is the step's)."""
    return {name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters() if p.requires_grad}


def _changed_fraction(model: Any, before: dict[str, torch.Tensor]) -> float:
    """The share of trainable weights whose value differs from `before`."""
    changed = total = 0
    for name, parameter in model.named_parameters():
        if name in before:
            changed += int((parameter.detach().cpu() != before[name]).sum())
            total += parameter.numel()
    return changed / max(total, 1)


def _line(record: dict[str, Any]) -> str:
    changed = (
        f"  changed {record['changed_fraction']:.1%} of trainable weights"
        if "changed_fraction" in record
        else ""
    )
    return (
        f"{record['mode']:<12} step {record['step']}: {record['step_s']:6.1f} s (generate {record['generate_s']:.1f}, "
        f"update {record['update_s']:.1f}), {record['generated_tokens_per_s']:7.0f} generated tokens/s, "
        f"peak {record['peak_gib']:.2f} GiB{changed}"
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="a tiny shape on CPU (what the test runs)")
    parser.add_argument("--out", type=Path, default=os.environ.get("OUT"), help="write gpu_check.json here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    smoke = args.cpu_smoke or os.environ.get("GPU_CHECK_CPU_SMOKE") == "1"
    if not smoke and not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device visible to torch; for the CPU test run use --cpu-smoke")
    shape, device = (CPU_SMOKE, torch.device("cpu")) if smoke else (QWEN3_1_7B, torch.device("cuda"))
    where = "CPU (smoke shape)" if smoke else torch.cuda.get_device_name(0)
    print(
        f"gpu_check: {where}; vocabulary {shape.vocab:,}, hidden {shape.hidden}, {shape.layers} layers",
        flush=True,
    )
    tokenizer = full_vocab_tokenizer(shape.vocab)
    memory = Memory(device)
    started = time.perf_counter()
    records = [
        record for mode in MODES for record in asyncio.run(run_mode(shape, device, mode, tokenizer, memory))
    ]
    records += run_packing(shape, device, memory, smoke)
    print(f"gpu_check: done in {time.perf_counter() - started:.0f} s", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        summary = {"device": where, "shape": shape.__dict__, "torch": torch.__version__, "records": records}
        (args.out / "gpu_check.json").write_text(json.dumps(summary, indent=2) + "\n")
    return records


if __name__ == "__main__":
    main()
