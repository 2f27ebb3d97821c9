"""One GRPO step, ours vs TRL's GRPOTrainer: same model, prompts, group size, lengths and loss.

    python bench/grpo_step.py [--quick] [--rounds 6]

A step is the whole of it on both sides: sample completions, score them, group-relative advantages,
one optimizer step. Each variant lives in its own worker process (so each has its own memory
high-water mark), and the parent tells them to step in turn, alternating which goes first each
round, so load from anything else on the machine hits both alike. The first step of each is
discarded (allocators, lazy init). Both are single-turn (no tools), on one thread, without vLLM.

What is held equal (and where it cannot be):
- model: the tiny-calculator preset in float32; prompts: calculator questions from the same
  synthetic set (each side draws its own 8 per step); 8 completions per prompt, at most 48 tokens,
  T=1, top-p 1; reward: the same graded closeness of the `<answer>` to the true result.
- loss: DAPO (token-mean over the batch), clip 0.2 / 0.28, no KL (beta 0), one pass (TRL
  num_iterations 1), std-scaled group advantages; AdamW lr 3e-4, constant, no weight decay, grad
  clip 1.0; 64 completions per optimizer step in micro-batches of 16 (TRL: per-device batch 16 x 4
  accumulation steps; ours: mini-batch 64, micro-batch 16).
- TRL's CPU defaults that would make it slower for reasons unrelated to the algorithm are turned
  off: gradient checkpointing and bf16 autocast. Our zero-variance-group filter is off too (TRL
  trains on every group), so both update on all 64 completions.
- Not equal by design: generation. TRL calls `model.generate`; we run our own engine (its own
  sampling loop that also returns each token's logprob). That is part of what is being compared.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
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

NAME = "grpo_step"
VARIANTS = ("ours", "trl")
PROMPTS_PER_STEP = 8
GROUP_SIZE = 8
MAX_NEW_TOKENS = 48
MICRO_BATCH = 16
LEARNING_RATE = 3e-4
PROTOCOL = "@@bench "  # worker lines meant for the parent; anything else a library prints is passed over
LOG_DIR = ROOT / "runs" / "bench-grpo-step"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


# ---------------------------------------------------------------------- the shared reward


def closeness(text: str, truth: str) -> float:
    """1 for the exact result, less the further the final answer's number is from it, 0 without one.

    Graded (unlike exact match) so that groups of this untrained-for-the-task model still differ,
    and both trainers do a real update.

    >>> closeness("<answer>919</answer>", "919"), round(closeness("<answer>819</answer>", "919"), 3)
    (1.0, 0.891)
    >>> closeness("<tool_call>...</tool_call>", "919")
    0.0
    """
    from rlfactory_nb.types import default_answer

    found = _NUMBER.search(default_answer(text))
    if found is None:
        return 0.0
    target = float(truth)
    return max(0.0, 1.0 - abs(float(found.group()) - target) / max(abs(target), 1.0))


def ours_reward(sample: Any) -> float:
    return closeness(sample.final_answer, str(sample.ground_truth))


def trl_reward(completions: list[Any], ground_truth: list[str], **_: Any) -> list[float]:
    """TRL's reward signature: conversational completions are `[{"role": "assistant", "content": ...}]`."""
    texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
    return [closeness(text, truth) for text, truth in zip(texts, ground_truth)]


# ---------------------------------------------------------------------- worker side


def emit(kind: str, **payload: Any) -> None:
    print(PROTOCOL + json.dumps({"kind": kind, **payload}), flush=True)


def wait_for_go() -> None:
    line = sys.stdin.readline()
    if line.strip() != "go":
        raise SystemExit(f"grpo_step worker: expected 'go' from the parent, got {line!r}")


def ours_config(output_dir: str) -> Any:
    from rlfactory_nb.config import RunConfig

    return RunConfig.from_dict(
        {
            "name": "ours",
            "output_dir": output_dir,
            "model": {"name": "tiny-calculator", "engine": "hf", "dtype": "float32", "device": "cpu"},
            "rollout": {"max_turns": 1, "max_new_tokens": MAX_NEW_TOKENS, "temperature": 1.0, "top_p": 1.0},
            "grpo": {
                "steps": 10_000,
                "prompts_per_step": PROMPTS_PER_STEP,
                "group_size": GROUP_SIZE,
                "lr": LEARNING_RATE,
                "loss": "dapo",
                "clip_low": 0.2,
                "clip_high": 0.28,
                "kl_coef": 0.0,
                "filter_zero_variance": False,
                "mini_batch_size": PROMPTS_PER_STEP * GROUP_SIZE,
                "micro_batch_size": MICRO_BATCH,
                "eval_every": 0,
                "trajectories_per_step": 0,
            },
            "cluster": {"backend": "local", "cpus_per_worker": 1},
        }
    )


async def run_ours(steps: int) -> None:
    from rlfactory_nb.rewards.runner import RewardRunner
    from rlfactory_nb.train.loop import Trainer

    with tempfile.TemporaryDirectory(prefix="bench-grpo-ours-") as folder:
        trainer = Trainer(ours_config(folder), reward=RewardRunner(ours_reward))
        try:
            await trainer.start()
            shapes = record_batch_shapes(trainer.backend)
            emit("ready", rss_mib=current_rss_mib())
            for _ in range(steps):
                wait_for_go()
                started = time.perf_counter()
                row = await trainer.step_once()
                emit(
                    "done",
                    seconds=time.perf_counter() - started,
                    completion_tokens=row["rollout/response_tokens_mean"],
                    reward=row["reward/mean"],
                    generate_s=row["time/rollout_s"],
                    **shapes.pop(),
                )
        finally:
            await trainer.close()


def record_batch_shapes(backend: Any) -> list[dict[str, float]]:
    """Wrap the backend's update so each step reports the width and real length of what it trained on."""
    shapes: list[dict[str, float]] = []
    update = backend.update

    async def recording_update(batch: Any, step: int) -> dict[str, float]:
        shapes.append(
            {
                "batch_width": float(batch.input_ids.shape[1]),
                "sequence_tokens": float(batch.attention_mask.sum()) / batch.input_ids.shape[0],
            }
        )
        return await update(batch, step)

    backend.update = recording_update
    return shapes


def trl_config(output_dir: str, steps: int) -> Any:
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=output_dir,
        max_steps=steps,
        per_device_train_batch_size=MICRO_BATCH,
        gradient_accumulation_steps=PROMPTS_PER_STEP * GROUP_SIZE // MICRO_BATCH,
        num_generations=GROUP_SIZE,
        max_completion_length=MAX_NEW_TOKENS,
        temperature=1.0,
        top_p=1.0,
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
        scale_rewards="group",
        use_vllm=False,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        chat_template_kwargs={"enable_thinking": False},  # as our agent renders prompts
        logging_steps=10_000,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=0,
    )


def run_trl(steps: int) -> None:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from rlfactory_nb.data.rows import load_rows
    from rlfactory_nb.models.policy import Policy

    policy = Policy.load("tiny-calculator", device="cpu", dtype="float32")
    rows = load_rows("synthetic:calculator", 4096)
    dataset = Dataset.from_list(
        [{"prompt": row["messages"], "ground_truth": row["ground_truth"]} for row in rows]
    )

    widths: list[int] = []
    lengths: list[float] = []
    generate_s: list[float] = []

    class RecordingGRPOTrainer(GRPOTrainer):
        """Records the width and real length of each micro-batch the loss runs on."""

        def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            widths.append(inputs["prompt_ids"].shape[1] + inputs["completion_ids"].shape[1])
            real = inputs["prompt_mask"].sum() + inputs["completion_mask"].sum()
            lengths.append(float(real) / inputs["prompt_ids"].shape[0])
            return super().compute_loss(model, inputs, *args, **kwargs)

        def _generate_single_turn(self, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return super()._generate_single_turn(*args, **kwargs)
            finally:
                generate_s.append(time.perf_counter() - started)

    class Lockstep(TrainerCallback):
        """Start each optimizer step when the parent says so; report its time when it ends."""

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            emit("ready", rss_mib=current_rss_mib())

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            wait_for_go()
            self.started = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            seconds = time.perf_counter() - self.started
            metrics = trainer._metrics["train"]  # TRL's per-step buffers (logging is off until the end)
            emit(
                "done",
                seconds=seconds,
                completion_tokens=_last(metrics.get("completions/mean_length")),
                reward=_last(metrics.get("reward")),
                batch_width=float(max(widths)),
                sequence_tokens=statistics.mean(lengths),
                generate_s=sum(generate_s),
            )
            widths.clear()
            lengths.clear()
            generate_s.clear()

    with tempfile.TemporaryDirectory(prefix="bench-grpo-trl-") as folder:
        trainer = RecordingGRPOTrainer(
            model=policy.model,
            reward_funcs=trl_reward,
            args=trl_config(folder, steps),
            train_dataset=dataset,
            processing_class=policy.tokenizer,
            callbacks=[Lockstep()],
        )
        trainer.train()


def _last(values: list[float] | None) -> float | None:
    return float(values[-1]) if values else None


def worker_main(variant: str, steps: int) -> None:
    import asyncio

    import torch

    torch.set_num_threads(1)
    if variant == "ours":
        asyncio.run(run_ours(steps))
    else:
        run_trl(steps)
    emit("final", peak_rss_mib=peak_rss_mib())


# ---------------------------------------------------------------------- parent side


class Worker:
    """One variant's process, driven a step at a time over its stdin/stdout."""

    def __init__(self, variant: str, steps: int, log: IO[str]):
        env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
        self.variant = variant
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--worker", variant, "--steps", str(steps)],
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
                    raise RuntimeError(f"{self.variant} worker sent {message['kind']!r}, expected {kind!r}")
                return message
        raise RuntimeError(
            f"{self.variant} worker exited (code {self.process.wait()}) before sending {kind!r}: see {LOG_DIR}"
        )

    def step(self) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        return self.read("done")


def drive(rounds: int) -> dict[str, Any]:
    """Start both workers, step them alternately `rounds + 1` times, collect timings and memory."""
    steps = rounds + 1
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    logs = {variant: (LOG_DIR / f"{variant}.log").open("w") for variant in VARIANTS}
    workers = {variant: Worker(variant, steps, logs[variant]) for variant in VARIANTS}
    results: dict[str, dict[str, Any]] = {variant: {"steps": []} for variant in VARIANTS}
    try:
        for variant, worker in workers.items():
            results[variant]["ready_rss_mib"] = worker.read("ready")["rss_mib"]
        for round_index in range(steps):
            order = VARIANTS if round_index % 2 == 0 else VARIANTS[::-1]  # ABBA: neither always goes first
            for variant in order:
                done = workers[variant].step()
                results[variant]["steps"].append(done)
                print(
                    f"  round {round_index} {variant:<4} {done['seconds']:6.2f} s  "
                    f"{done['completion_tokens'] or 0:5.1f} tokens/completion  reward {done['reward'] or 0:.3f}"
                )
        for variant, worker in workers.items():
            results[variant]["peak_rss_mib"] = worker.read("final")["peak_rss_mib"]
            worker.process.wait(timeout=120)
    finally:
        for worker in workers.values():
            if worker.process.poll() is None:
                worker.process.kill()
        for log in logs.values():
            log.close()
    return summarize(results, rounds)


def summarize(results: dict[str, dict[str, Any]], rounds: int) -> dict[str, Any]:
    summary: dict[str, Any] = {"rounds": rounds, "variants": {}}
    for variant, result in results.items():
        kept = result["steps"][1:]  # the first step warms up
        summary["variants"][variant] = {
            "median_step_s": statistics.median(step["seconds"] for step in kept),
            "step_s": [step["seconds"] for step in result["steps"]],
            "mean_completion_tokens": statistics.mean(step["completion_tokens"] or 0 for step in kept),
            "mean_reward": statistics.mean(step["reward"] or 0 for step in kept),
            "median_generate_s": statistics.median(step["generate_s"] for step in kept),
            "mean_batch_width": statistics.mean(step["batch_width"] for step in kept),
            "mean_sequence_tokens": statistics.mean(step["sequence_tokens"] for step in kept),
            "ready_rss_mib": result["ready_rss_mib"],
            "peak_rss_mib": result["peak_rss_mib"],
        }
    ours, trl = summary["variants"]["ours"], summary["variants"]["trl"]
    summary["trl_over_ours_time"] = trl["median_step_s"] / ours["median_step_s"]
    summary["trl_over_ours_generate"] = trl["median_generate_s"] / ours["median_generate_s"]
    summary["trl_over_ours_peak_rss"] = trl["peak_rss_mib"] / ours["peak_rss_mib"]
    return summary


def trl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trl")
    except PackageNotFoundError:
        return ""


def markdown(data: dict[str, Any], argv: list[str], machine: str) -> str:
    ours, trl = data["variants"]["ours"], data["variants"]["trl"]
    rows = [
        [
            name,
            f"{v['median_step_s']:.2f}",
            f"{v['median_generate_s']:.2f}",
            f"{v['mean_completion_tokens']:.1f}",
            f"{v['mean_sequence_tokens']:.0f} / {v['mean_batch_width']:.0f}",
            f"{v['ready_rss_mib']:.0f}",
            f"{v['peak_rss_mib']:.0f}",
        ]
        for name, v in (("rlfactory-nb", ours), (f"TRL {data['trl_version']} GRPOTrainer", trl))
    ]
    rows.append(
        [
            "TRL / ours",
            f"{data['trl_over_ours_time']:.2f}x",
            f"{data['trl_over_ours_generate']:.2f}x",
            "",
            "",
            "",
            f"{data['trl_over_ours_peak_rss']:.2f}x",
        ]
    )
    header = [
        "trainer",
        "median s/step",
        "of it generating (s)",
        "sampled tokens/completion",
        "trained tokens/row, real / padded",
        "RSS after setup (MiB)",
        "peak RSS (MiB)",
    ]
    title = "One GRPO step: rlfactory-nb vs TRL GRPOTrainer (same model, prompts and loss)"
    return section(title, "bench/grpo_step.py", argv, machine, markdown_table(header, rows), explain(data))


def explain(data: dict[str, Any]) -> list[str]:
    ours, trl = data["variants"]["ours"], data["variants"]["trl"]
    bullets = [
        (
            f"- A step: {PROMPTS_PER_STEP} prompts x {GROUP_SIZE} completions (at most {MAX_NEW_TOKENS} "
            "tokens, T=1), reward, group advantages, one AdamW step on all 64 in micro-batches of 16; DAPO "
            "loss, clip 0.2/0.28, no KL; single-turn, no tools, no vLLM, one thread each. Median of "
            f"{data['rounds']} steps per variant, run alternately (ABBA order), first step discarded."
        ),
        (
            "- Memory: each variant runs in its own process; 'after setup' is its resident set before the "
            "first step, 'peak' is the process's high-water mark (getrusage ru_maxrss), imports and model "
            "included."
        ),
        (
            "- Generation: ours is our engine's own sampling loop, which also returns each token's logprob "
            "(the PPO ratio's old logprob, so no extra forward pass); TRL calls `model.generate` (timed "
            "around its `_generate_single_turn`). Sampled lengths differ only by sampling."
        ),
        (
            "- TRL settings changed from its defaults for parity: `gradient_checkpointing=False`, "
            "`bf16=False`, constant learning rate, `chat_template_kwargs={'enable_thinking': False}`."
        ),
    ]
    if data["trl_over_ours_time"] < 1:
        bullets.append(
            f"- Where we are slower ({1 / data['trl_over_ours_time']:.2f}x TRL's time): our update runs "
            "the output layer and a full-vocabulary log-softmax at every position of a row, prompt "
            "included; TRL keeps only the completion positions (`logits_to_keep`). And our rows are "
            f"longer: {ours['mean_sequence_tokens']:.0f} real tokens (padded to "
            f"{ours['mean_batch_width']:.0f}) vs TRL's {trl['mean_sequence_tokens']:.0f} (padded to "
            f"{trl['mean_batch_width']:.0f}), because with no tools this preset often writes a malformed "
            "tool call, and our agent appends the parse-error feedback to the trajectory even on its "
            "last allowed turn: masked out of the loss, but still run through forward and backward."
        )
    if data["trl_over_ours_generate"] < 1:
        bullets.append(
            f"- Generation is slower too ({1 / data['trl_over_ours_generate']:.2f}x TRL's): the gap is in "
            "our hf engine's decode loop (per-row seeded sampling over the sorted vocabulary, in Python) "
            "against `model.generate`; this benchmark does not break it down further."
        )
    return bullets


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 measured steps per variant")
    parser.add_argument("--rounds", type=int, default=6, help="measured steps per variant (plus 1 warm-up)")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds = min(args.rounds, 3)
    return args


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.worker:
        worker_main(args.worker, args.steps)
        return
    version = trl_version()
    if not version:
        print("TRL is not installed (pip install -e '.[bench]'): nothing to compare against; skipped")
        return
    machine = machine_line()
    data = drive(args.rounds)
    data["trl_version"] = version
    text = markdown(data, argv, machine)
    write_result(NAME, data, text)
    print(text)


if __name__ == "__main__":
    main()
