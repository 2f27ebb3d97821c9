"""The two trainers of bench/time_to_reward.py, each trained until its held-out greedy reward reaches a
target or its training time reaches a cap, and the TRL side's pieces (tool, game, config).

Each worker runs in its own process (one thread) and writes one JSON record: the curve of held-out
evaluations (step, training seconds so far, greedy and sampled reward, eval seconds) and where the
training time went. Training time excludes the evaluations and the setup before the first step.
Both sides are evaluated the same way: `rf.evaluate` on the weights the trainer holds, with the
example's config (its held-out rows, tools or environment, reward and seed).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rlfactory_nb as rf
from rlfactory_nb.config import RunConfig
from rlfactory_nb.models.policy import Policy
from rlfactory_nb.recipes.guess.env import Guess
from rlfactory_nb.types import Turn

TASKS: dict[str, dict[str, Any]] = {
    "calculator": {"target": 0.9, "eval_every": 1, "trl_max_completion": 160, "kl": 0.0},
    "guess": {"target": 0.70, "eval_every": 10, "trl_max_completion": 160, "kl": 0.05},
}
"""per task: the held-out greedy target, steps between evaluations, TRL's budget for a whole
multi-turn completion (ours: max_new_tokens per turn x max_turns, 48 x 3 and 8 x 3), its KL coefficient
(the example config's: 0.05 anchors the guessing game)"""
MICRO_BATCH = 16
MINI_BATCH = 32
"""ours: grpo.micro_batch_size and mini_batch_size (the defaults); TRL: per-device batch 16 x 2
accumulation steps per optimizer step, 8 micro-batches generated at once (steps_per_generation)"""


def task_config(task: str, seed: int, output_dir: str) -> RunConfig:
    """The example's config, as `rlfactory-nb train examples/<task>/config.yaml grpo.seed=<seed>` runs it,
    with the evaluations and checkpoints taken over by this bench."""
    overrides = {"name": f"race-{task}-{seed}", "output_dir": output_dir, "grpo.seed": seed, "grpo.steps": 100_000,
                 "grpo.eval_every": 0, "grpo.checkpoint_every": 0, "grpo.mini_batch_size": MINI_BATCH,
                 "grpo.micro_batch_size": MICRO_BATCH, "grpo.trajectories_per_step": 0}
    return rf.example(task).config(overrides)


def held_out(policy: Policy, cfg: RunConfig) -> dict[str, float]:
    report = rf.evaluate_sync(policy, cfg=cfg, label="race")
    return {"greedy": report.greedy_reward, "sampled": report.sampled_reward}


class Race:
    """The clock and the curve of one run: training seconds exclude evaluations."""

    def __init__(self, task: str, cap_s: float, target: float | None = None):
        self.task, self.cap_s = task, cap_s
        self.target = TASKS[task]["target"] if target is None else target
        self.curve: list[dict[str, float]] = []
        self.train_s = 0.0
        self.reached_s: float | None = None
        self._since: float | None = None

    def resume(self) -> None:
        self._since = time.perf_counter()

    def pause(self) -> None:
        if self._since is not None:
            self.train_s += time.perf_counter() - self._since
            self._since = None

    def over_cap(self) -> bool:
        running = time.perf_counter() - self._since if self._since is not None else 0.0
        return self.train_s + running >= self.cap_s

    def evaluate(self, step: int, policy: Policy, cfg: RunConfig) -> bool:
        """Evaluate (off the clock); True when the run should stop: target reached or cap spent."""
        self.pause()
        started = time.perf_counter()
        scores = held_out(policy, cfg)
        point = {"step": step, "train_s": round(self.train_s, 2), **scores, "eval_s": round(time.perf_counter() - started, 2)}
        self.curve.append(point)
        print(f"  {self.task} step {step:4d} train {self.train_s:7.1f} s  greedy {scores['greedy']:.3f}  "
              f"sampled {scores['sampled']:.3f}  (eval {point['eval_s']:.1f} s)", flush=True)
        if scores["greedy"] >= self.target and self.reached_s is None:
            self.reached_s = self.train_s
        stop = self.reached_s is not None or (step > 0 and self.train_s >= self.cap_s)  # step 0: before training
        if not stop:
            self.resume()
        return stop

    def record(self, **extra: Any) -> dict[str, Any]:
        return {"task": self.task, "target": self.target, "cap_s": self.cap_s, "reached_s": self.reached_s,
                "train_s": round(self.train_s, 2), "curve": self.curve, **extra}


# ---------------------------------------------------------------------- ours


async def run_ours(task: str, seed: int, cap_s: float, every: int, folder: str, target: float | None = None) -> dict[str, Any]:
    from rlfactory_nb.train.loop import Trainer

    cfg = task_config(task, seed, folder)
    trainer = Trainer(cfg)
    race, times = Race(task, cap_s, target), {}
    try:
        await trainer.start()
        await asyncio.to_thread(race.evaluate, 0, trainer.policy, cfg)
        while True:
            row = await trainer.step_once()
            for key, value in row.items():
                if key.startswith("time/") and key.endswith("_s"):
                    times[key] = times.get(key, 0.0) + float(value)
            due = trainer.step % every == 0 or race.over_cap()  # the cap ends a run with an evaluation
            if due and await asyncio.to_thread(race.evaluate, trainer.step, trainer.policy, cfg):
                break
    finally:
        race.pause()
        await trainer.close()
    return race.record(trainer="ours", seed=seed, steps=trainer.step, seconds_by_key={k: round(v, 2) for k, v in times.items()})


# ---------------------------------------------------------------------- TRL's pieces


class SchemaTool(dict):
    """A tool for TRL given as its JSON spec (what the chat template renders: transformers takes a dict
    as the spec itself) that TRL can also call by name. Lets TRL show the tiny-calculator preset the
    exact tool spec it was warm-started on, where a Python function would render a spec of its own."""

    def __init__(self, spec: dict[str, Any], function: Callable[..., Any]):
        super().__init__(spec)
        self.__name__ = spec["function"]["name"]
        self._function = function

    def __call__(self, **arguments: Any) -> Any:
        return self._function(**arguments)


def calculator_tool() -> SchemaTool:
    from rlfactory_nb.models.presets.calculator import CALCULATOR_TOOL
    from rlfactory_nb.tools.servers.calculator import evaluate

    return SchemaTool(CALCULATOR_TOOL, lambda expression: evaluate(str(expression)))


class GuessGame:
    """The guessing game (recipes/guess: the same Guess environment, rules and reward) as a TRL
    `environment_factory` class. TRL continues an episode only on a tool call, so a guess is a call to
    `guess`, answered by the game's hint; the completion's final answer, when the game is still on,
    is played as the last guess (so a model that never calls the tool still plays one guess)."""

    def __init__(self) -> None:
        self.game = Guess()

    def reset(self, **row: Any) -> None:
        self.game.reset({**row, "draw_secret": False}, seed=0)  # TRL has no per-episode seed: the row's secret

    def guess(self, number: int) -> str:
        """Guess the secret number; the reply says whether it is higher or lower.

        Args:
            number: the guess, a number in the range the question gives
        """
        if self.over:
            return "The game is over."
        response = self.game.respond(Turn(text=str(number), answer=str(number)))
        return response.messages[0]["content"]

    @property
    def over(self) -> bool:
        return self.game.solved or len(self.game.guesses) >= self.game.max_guesses

    def _final_answer(self, text: str) -> float:
        """Play the completion's final answer as a guess if the game is on; the game's reward."""
        if not self.over:
            self.game.respond(Turn(text=text, answer=text))
        return self.game.reward()


def last_text(completion: Any) -> str:
    return completion[-1]["content"] if isinstance(completion, list) else str(completion)


def calculator_reward(completions: list[Any], ground_truth: list[str], **_: Any) -> list[float]:
    """The example's reward (`rewards.functions:exact_match`) on the completion's last message."""
    from rlfactory_nb.rewards.functions import exact_match
    from rlfactory_nb.rewards.samples import make_sample

    return [exact_match(make_sample(last_text(c), ground_truth=truth)) for c, truth in zip(completions, ground_truth)]


def guess_reward(completions: list[Any], environments: list[GuessGame], **_: Any) -> list[float]:
    return [env._final_answer(last_text(c)) for c, env in zip(completions, environments)]


def trl_tokenizer(policy: Policy) -> Any:
    """The preset's tokenizer with TRL's copy of Qwen3's own chat template: the presets' template
    renders the same text (tests/bench/test_bench_time_to_reward.py checks a tool conversation), but TRL
    recognizes only its own copies when it needs a prefix-preserving training template and a parser."""
    from trl.chat_template_utils import qwen3_chat_template

    policy.tokenizer.chat_template = qwen3_chat_template
    return policy.tokenizer


def trl_args(task: str, seed: int, folder: str, cfg: RunConfig) -> Any:
    from trl import GRPOConfig

    grpo = cfg.grpo
    return GRPOConfig(
        output_dir=folder, max_steps=1_000_000, seed=seed,
        per_device_train_batch_size=MICRO_BATCH, gradient_accumulation_steps=MINI_BATCH // MICRO_BATCH,
        steps_per_generation=grpo.prompts_per_step * grpo.group_size // MICRO_BATCH,
        num_generations=grpo.group_size, max_completion_length=TASKS[task]["trl_max_completion"],
        max_tool_calling_iterations=cfg.rollout.max_turns - 1, temperature=cfg.rollout.temperature, top_p=1.0,
        learning_rate=grpo.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=grpo.max_grad_norm, loss_type=grpo.loss, epsilon=grpo.clip_low, epsilon_high=grpo.clip_high,
        beta=grpo.kl_coef, num_iterations=1, scale_rewards="group", use_vllm=False, use_cpu=True, bf16=False,
        gradient_checkpointing=False, chat_template_kwargs={"enable_thinking": False},
        logging_steps=1_000_000, save_strategy="no", report_to="none", disable_tqdm=True,
    )


def trl_trainer(task: str, seed: int, folder: str, cfg: RunConfig, policy: Policy, callbacks: list[Any]) -> Any:
    from datasets import Dataset
    from trl import GRPOTrainer

    rows = _train_rows(cfg)
    args = trl_args(task, seed, folder, cfg)
    common = {"model": policy.model, "args": args, "processing_class": trl_tokenizer(policy), "callbacks": callbacks}
    if task == "calculator":
        dataset = Dataset.from_list([{"prompt": r["messages"], "ground_truth": str(r["ground_truth"])} for r in rows])
        return GRPOTrainer(reward_funcs=calculator_reward, train_dataset=dataset, tools=[calculator_tool()], **common)
    dataset = Dataset.from_list([{"prompt": r["messages"], "low": r["low"], "high": r["high"], "secret": r["secret"]} for r in rows])
    return GRPOTrainer(reward_funcs=guess_reward, train_dataset=dataset, environment_factory=GuessGame, **common)


def _train_rows(cfg: RunConfig) -> list[dict[str, Any]]:
    from rlfactory_nb.data.rows import load_rows

    return load_rows(cfg.data.train)


def run_trl(task: str, seed: int, cap_s: float, every: int, folder: str, target: float | None = None) -> dict[str, Any]:
    import torch
    from transformers import TrainerCallback

    cfg = task_config(task, seed, folder)
    torch.manual_seed(seed)
    policy = Policy.load(cfg.model.name, device="cpu", dtype="float32", log=lambda _: None)
    # the same live model, with the preset's own tokenizer (TRL's gets another chat template)
    eval_policy = dataclasses.replace(policy, tokenizer=Policy.load(cfg.model.name, device="cpu", log=lambda _: None).tokenizer)
    race, optimizer_steps = Race(task, cap_s, target), (cfg.grpo.prompts_per_step * cfg.grpo.group_size) // MINI_BATCH
    generate_s: list[float] = []

    class Clock(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            race.evaluate(0, eval_policy, cfg)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            at_step = state.global_step % optimizer_steps == 0
            if at_step and (state.global_step % (every * optimizer_steps) == 0 or race.over_cap()):
                was_training = policy.model.training
                if race.evaluate(state.global_step // optimizer_steps, eval_policy, cfg):
                    control.should_training_stop = True
                policy.model.train(was_training)

    trainer = trl_trainer(task, seed, folder, cfg, policy, [Clock()])
    generate = trainer._generate

    def timed_generate(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            generate_s.append(time.perf_counter() - started)

    trainer._generate = timed_generate
    trainer.train()
    race.pause()
    steps = trainer.state.global_step // optimizer_steps
    return race.record(trainer="trl", seed=seed, steps=steps, seconds_by_key={"generate_and_tools_s": round(sum(generate_s), 2)})


def worker_main(trainer: str, task: str, seed: int, cap_s: float, every: int, out: Path, target: float | None = None) -> None:
    import tempfile

    import torch

    torch.set_num_threads(1)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"bench-race-{trainer}-") as folder:
        if trainer == "ours":
            record = asyncio.run(run_ours(task, seed, cap_s, every, folder, target))
        else:
            record = run_trl(task, seed, cap_s, every, folder, target)
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    record["process_cpu_s"] = round(usage.ru_utime + usage.ru_stime, 1)  # whole process: setup and evals too
    record["process_wall_s"] = round(time.perf_counter() - started, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
