"""Float32 master weights under bfloat16 compute: autocast over float32 parameters vs an explicit copy.

    python bench/master_weights.py [--quick] [--rounds 3]

Issue #20 asks for float32 master weights wherever compute runs in bfloat16, and for the local and
DDP backends leaves two ways open: keep the parameters float32 and run forward and backward under
`torch.autocast` (what `rlfactory_nb.models.precision` does), or keep the model in bfloat16 and give
the optimizer a float32 copy (gradients copied bf16 -> fp32 before the step, weights copied back
after it), as Megatron and DeepSpeed do. This measures both, with float32 everywhere and bfloat16
AdamW without a master (the broken baseline) beside them:

    fp32      float32 parameters, float32 arithmetic
    autocast  float32 parameters, forward and backward under autocast(bfloat16) (ours)
    master    bfloat16 parameters for forward and backward; AdamW steps a float32 copy
    bf16      bfloat16 parameters and AdamW on them directly (no master)

A step is forward, backward and one AdamW step (lr 1e-6, no weight decay, so only gradients move a
weight) of a token-mean cross-entropy on a fixed random batch, with a Qwen3-architecture model of
random weights, rounded to bfloat16 as a published checkpoint's are (that matters: a float32 weight
between two bfloat16 values flips its rounding for a small step, one on the grid does not). Each variant lives in its own worker process (its own memory high-water mark); the
parent has them step in turn, rotating which goes first, so load from elsewhere hits all alike, and
discards each one's first step. "Changed" is the fraction of the trained (master) weights that differ
after the first step from before it: what a real learning rate leaves of an update.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

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

NAME = "master_weights"
VARIANTS = ("fp32", "autocast", "master", "bf16")
LABELS = {
    "fp32": "float32 everywhere",
    "autocast": "autocast bf16 over fp32 parameters (ours)",
    "master": "bf16 model + explicit fp32 master copy",
    "bf16": "bf16 parameters and AdamW, no master",
}
LEARNING_RATE = 1e-6
PROTOCOL = "@@bench "
LOG_DIR = ROOT / "runs" / "bench-master-weights"


@dataclass(frozen=True)
class Shape:
    """The model and batch: the real run's, or --quick's tiny one."""

    vocab: int
    hidden: int
    layers: int
    intermediate: int
    rows: int
    tokens: int


FULL = Shape(vocab=32_768, hidden=512, layers=4, intermediate=1536, rows=1, tokens=16)
QUICK = Shape(vocab=2048, hidden=64, layers=2, intermediate=192, rows=2, tokens=32)


# ---------------------------------------------------------------------- worker side


def emit(kind: str, **payload: Any) -> None:
    print(PROTOCOL + json.dumps({"kind": kind, **payload}), flush=True)


def build_model(shape: Shape) -> Any:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=max(1, shape.hidden // 64),
        num_key_value_heads=max(1, shape.hidden // 128),
        head_dim=min(64, shape.hidden),
        max_position_embeddings=shape.tokens,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    model = Qwen3ForCausalLM(config).float().train()
    with torch.no_grad():
        for parameter in model.parameters():  # start where a bfloat16 checkpoint (Qwen3's) starts
            parameter.copy_(parameter.to(torch.bfloat16))
    return model


class Stepper:
    """One variant's training step over a model; `trained` are the weights AdamW updates."""

    def __init__(self, variant: str, shape: Shape):
        import torch

        from rlfactory_nb.models.precision import FLOAT32, Precision, apply_dtypes

        self.variant = variant
        model = build_model(shape)
        generator = torch.Generator().manual_seed(1)
        self.input_ids = torch.randint(0, shape.vocab, (shape.rows, shape.tokens), generator=generator)
        bfloat16 = Precision(torch.bfloat16, torch.bfloat16)  # the model itself in bfloat16
        self.precision = {"fp32": FLOAT32, "autocast": Precision(torch.bfloat16, torch.float32)}.get(
            variant, bfloat16
        )
        self.model = apply_dtypes(model, self.precision)
        self.parameters = [p for p in self.model.parameters() if p.requires_grad]
        if variant == "master":
            self.trained = [p.detach().float().clone().requires_grad_() for p in self.parameters]
        else:
            self.trained = self.parameters
        self.optimizer = torch.optim.AdamW(self.trained, lr=LEARNING_RATE, weight_decay=0.0)

    def loss(self) -> Any:
        import torch

        from rlfactory_nb.models.precision import autocast

        with autocast(torch.device("cpu"), self.precision):
            logits = self.model(input_ids=self.input_ids).logits  # (B, T, V)
        targets = self.input_ids[:, 1:]
        logprobs = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # (B, T-1, V)
        return -logprobs.gather(-1, targets.unsqueeze(-1)).mean()  # token mean

    def step(self) -> float:
        import torch

        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss()
        loss.backward()
        if self.variant == "master":
            for master, parameter in zip(self.trained, self.parameters):
                master.grad = parameter.grad.float()
                parameter.grad = None
        self.optimizer.step()
        if self.variant == "master":
            with torch.no_grad():
                for master, parameter in zip(self.trained, self.parameters):
                    parameter.copy_(master)
        return float(loss.detach())

    def snapshot(self) -> list[Any]:
        return [tensor.detach().clone() for tensor in self.trained]

    def changed_fraction(self, before: list[Any], tensors: list[Any] | None = None) -> float:
        tensors = self.trained if tensors is None else tensors
        changed = sum(int((new.detach() != old).sum()) for new, old in zip(tensors, before))
        return changed / sum(old.numel() for old in before)


def worker_main(variant: str, shape: Shape, steps: int) -> None:
    import torch

    torch.set_num_threads(1)
    stepper = Stepper(variant, shape)
    emit("ready", rss_mib=current_rss_mib())
    for index in range(steps):
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("master_weights worker: expected 'go' from the parent")
        if index == 0:
            before = stepper.snapshot()
            compute_before = [p.detach().clone() for p in stepper.parameters]
        started = time.perf_counter()
        loss = stepper.step()
        seconds = time.perf_counter() - started
        extra = {}
        if index == 0:
            extra["changed"] = stepper.changed_fraction(before)
            extra["compute_changed"] = stepper.changed_fraction(compute_before, stepper.parameters)
            del before, compute_before
        emit("done", seconds=seconds, loss=loss, **extra)
    emit("final", peak_rss_mib=peak_rss_mib(), parameters=sum(p.numel() for p in stepper.parameters))


# ---------------------------------------------------------------------- parent side


class Worker:
    """One variant's process, stepped over its stdin/stdout."""

    def __init__(self, variant: str, quick: bool, steps: int, log: IO[str]):
        env = dict(os.environ, OMP_NUM_THREADS="1")
        command = [sys.executable, __file__, "--worker", variant, "--steps", str(steps)]
        self.variant = variant
        self.process = subprocess.Popen(
            [*command, *(["--quick"] if quick else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
            cwd=ROOT,
        )

    def read(self, kind: str) -> dict[str, Any]:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(PROTOCOL):
                message = json.loads(line[len(PROTOCOL) :])
                if message["kind"] != kind:
                    raise RuntimeError(f"{self.variant} sent {message['kind']!r}, expected {kind!r}")
                return message
        raise RuntimeError(
            f"{self.variant} worker exited ({self.process.wait()}) before {kind!r}: see {LOG_DIR}"
        )

    def step(self) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        return self.read("done")


def drive(rounds: int, quick: bool) -> dict[str, Any]:
    """Start every worker, step them in rotating order `rounds + 1` times, collect the figures."""
    steps = rounds + 1
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    logs = {variant: (LOG_DIR / f"{variant}.log").open("w") for variant in VARIANTS}
    workers = {variant: Worker(variant, quick, steps, logs[variant]) for variant in VARIANTS}
    results: dict[str, dict[str, Any]] = {variant: {"steps": []} for variant in VARIANTS}
    try:
        for variant, worker in workers.items():
            results[variant]["ready_rss_mib"] = worker.read("ready")["rss_mib"]
        for round_index in range(steps):
            shift = round_index % len(VARIANTS)
            for variant in VARIANTS[shift:] + VARIANTS[:shift]:
                done = workers[variant].step()
                results[variant]["steps"].append(done)
                print(f"  round {round_index} {variant:<8} {done['seconds']:6.2f} s  loss {done['loss']:.4f}")
        for variant, worker in workers.items():
            results[variant].update(worker.read("final"))
            worker.process.wait(timeout=60)
    finally:
        for worker in workers.values():
            if worker.process.poll() is None:
                worker.process.kill()
        for log in logs.values():
            log.close()
    return summarize(results, rounds, QUICK if quick else FULL)


def summarize(results: dict[str, dict[str, Any]], rounds: int, shape: Shape) -> dict[str, Any]:
    variants = {}
    for variant, result in results.items():
        first, kept = result["steps"][0], result["steps"][1:]
        variants[variant] = {
            "median_step_s": statistics.median(step["seconds"] for step in kept),
            "step_s": [step["seconds"] for step in result["steps"]],
            "changed_fraction": first["changed"],
            "compute_copy_changed_fraction": first["compute_changed"],
            "first_loss": first["loss"],
            "last_loss": result["steps"][-1]["loss"],
            "ready_rss_mib": result["ready_rss_mib"],
            "peak_rss_mib": result["peak_rss_mib"],
        }
    parameters = results[VARIANTS[0]]["parameters"]
    return {"rounds": rounds, "shape": asdict(shape), "parameters": parameters, "variants": variants}


def markdown(data: dict[str, Any], argv: list[str], machine: str) -> str:
    base = data["variants"]["fp32"]
    rows = [
        [
            LABELS[name],
            f"{v['median_step_s']:.2f}",
            f"{v['median_step_s'] / base['median_step_s']:.2f}x",
            f"{v['ready_rss_mib']:.0f}",
            f"{v['peak_rss_mib']:.0f}",
            f"{100 * v['changed_fraction']:.1f}%",
            f"{v['first_loss'] - v['last_loss']:.4f}",
        ]
        for name, v in data["variants"].items()
    ]
    header = [
        "variant",
        "median s/step",
        "vs fp32",
        "RSS after setup (MiB)",
        "peak RSS (MiB)",
        "changed by one step",
        "loss drop, first to last step",
    ]
    shape = data["shape"]
    master = data["variants"]["master"]
    bullets = [
        (
            f"- Model: Qwen3 architecture, random weights, {data['parameters'] / 1e6:.1f} M parameters (hidden "
            f"{shape['hidden']}, {shape['layers']} layers, FFN {shape['intermediate']}, vocabulary "
            f"{shape['vocab']:,}, tied embeddings); batch {shape['rows']} x {shape['tokens']} tokens; token-mean "
            f"cross-entropy; AdamW lr {LEARNING_RATE:g}, no weight decay; one thread per worker. Median of "
            f"{data['rounds']} steps after one warm-up, variants stepped in rotating order."
        ),
        (
            "- 'Changed by one step': the fraction of the weights AdamW steps (for the master variant, the "
            "float32 copy) that differ after the first step. The master variant's bfloat16 working copy, "
            f"which forward and the engines see, changed in {100 * master['compute_copy_changed_fraction']:.1f}% "
            "of its entries: small steps accumulate in the master until they cross a bfloat16 rounding step."
        ),
        (
            f"- 'Loss drop': the loss of the first step minus that of the last (each computed before its "
            f"step's update, on the same batch), so what {data['rounds']} updates did to what the forward "
            "computes."
        ),
        (
            "- Memory per parameter, before activations: float32 and autocast 16 bytes (weights, gradients, "
            "two AdamW moments); the explicit master 18-20 (bf16 weights, fp32 copy, fp32 gradients and "
            "moments, plus bf16 gradients until each is copied); bf16 without master 8. Peak RSS includes "
            "the interpreter, torch and transformers (about the 'after setup' figure less the model), and the transient peaks of "
            "backward, which are narrower in bfloat16, so the measured gaps are smaller than these."
        ),
        (
            "- Speed: a CPU without bfloat16 instructions (AVX2 here) runs bfloat16 matmuls far slower "
            "than float32 (at 2 x 64 tokens an autocast step took 75 s, float32 3.3 s), hence the tiny "
            "batch; the bfloat16 rows' times say nothing about a GPU. Autocast against the master copy "
            "is the comparison to read: both run the same bfloat16 matmuls; autocast also casts every "
            "weight to bfloat16 in each forward and keeps norms and the embedding lookup in float32, the "
            "master copies gradients and weights once per optimizer step."
        ),
    ]
    title = "Float32 master weights under bfloat16 compute: autocast vs an explicit master copy"
    return section(title, "bench/master_weights.py", argv, machine, markdown_table(header, rows), bullets)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny model, 2 measured steps per variant")
    parser.add_argument("--rounds", type=int, default=3, help="measured steps per variant (plus 1 warm-up)")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds = min(args.rounds, 2)
    return args


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.worker:
        worker_main(args.worker, QUICK if args.quick else FULL, args.steps)
        return
    machine = machine_line()
    started = time.perf_counter()
    data = drive(args.rounds, args.quick)
    data.update(wall_s=time.perf_counter() - started, machine=machine)
    text = markdown(data, argv, machine)
    write_result(NAME, data, text)
    print(text)


if __name__ == "__main__":
    main()
