"""Supervised warm-start of the tiny calculator model.

GRPO can only reinforce what a policy already does sometimes. A randomly initialized model never
emits a well-formed tool call, so the preset first learns the format from synthetic conversations:
a share of them call the calculator and copy its result, the rest answer directly with a guess.
The model then calls the tool part of the time and is often wrong when it does not: room for RL.

Copying digits (question -> expression, tool result -> answer) is the hard part for a 1M-parameter
model, and a fixed training time sometimes falls short (docs/decisions.md, "Warm-start"), so training runs until a
quality gate passes on held-out questions, within a step budget. Every step draws new questions.

The copy is learned first on short conversations that all call the tool (no tool list in the
system prompt, so every step is cheap and full of digits to copy), then on the real prompts with the
intended mix of calling and guessing. Behind the ~220-token tool list, the few digits to copy are a needle among hundreds of
positions and the attention gradient that finds them is diluted; on short prompts the model learns
the copy sooner, and because RoPE attention is relative, the skill carries over to the long prompt,
where the model then only has to learn to look past the tool list.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlfactory_nb.models.presets import calculator
from rlfactory_nb.rollout.tokens import delta_ids, prompt_ids
from rlfactory_nb.types import Message

HELDOUT_EXCLUDED = 1000
"""the first questions of the task's held-out split (`calculator.dataset("heldout", n)`), never trained on"""


@dataclass(frozen=True)
class WarmStartConfig:
    tool_share: float = 0.4
    """share of conversations that call the calculator (the rest guess)"""
    heldout: int = 48
    """held-out questions the gate is measured on"""
    batch_size: int = 32
    lr: float = 6e-3
    """AdamW peak learning rate (warmup then cosine)"""
    short_prompt_steps: int = 400
    """first steps train on tool conversations only, without the tool list in the system prompt"""
    min_steps: int = 450
    max_steps: int = 1200
    """the budget is in steps, never seconds: a wall-clock limit on a loaded machine (measured: 16
    steps in 900 s at load 16 on 2 cores) cached an untrained preset; steps keep the build deterministic"""
    check_every: int = 50
    gate: float = 0.95
    """stop once both copy accuracies on held-out questions reach this (measured: 1.00 and 1.00 at
    step 700 in 259 s on one thread; 0.985 on 200 questions of the task's held-out split)"""
    seed: int = 0


def encode_conversation(tokenizer: Any, messages: list[Message], tools: list[dict]) -> tuple[list[int], list[int]]:
    """Ids and loss mask of a conversation, assembled turn by turn as a rollout would be."""
    first_reply = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    ids = prompt_ids(tokenizer, messages[:first_reply], tools)
    mask = [0] * len(ids)
    pending: list[Message] = []
    for message in messages[first_reply:]:
        if message["role"] != "assistant":
            pending.append(message)
            continue
        if pending:
            delta = delta_ids(tokenizer, pending)
            ids, mask, pending = ids + delta, mask + [0] * len(delta), []
        reply = tokenizer.encode(message["content"], add_special_tokens=False) + [tokenizer.eos_token_id]
        ids, mask = ids + reply, mask + [1] * len(reply)
    return ids, mask


def draw_batch(
    rng: random.Random, tokenizer: Any, cfg: WarmStartConfig, tools: list[dict] | None, tool_share: float,
    excluded: set[str],
) -> list[tuple[list[int], list[int]]]:
    """`cfg.batch_size` conversations on questions never seen before (almost surely: 2.4M exist).

    Every step draws fresh questions. Recipe 3 drew from a fixed pool of 3,000 conversations: with
    it, held-out result copy was 0.64 after 1,200 steps, against 1.00 at step 900 with fresh ones
    (two threads, 2026-12-04). Questions in `excluded` (the held-out ones) are never trained on."""
    batch = []
    while len(batch) < cfg.batch_size:
        question = calculator.make_question(rng)
        if question.expression in excluded:
            continue
        if rng.random() < tool_share:
            conversation = calculator.tool_conversation(question)
        else:
            conversation = calculator.direct_conversation(question)
        batch.append(encode_conversation(tokenizer, conversation, tools))
    return batch


def shared_prefix_length(examples: list[tuple[list[int], list[int]]]) -> int:
    """Tokens every example starts with (the system prompt with the tools)."""
    first = examples[0][0]
    length = min(len(ids) for ids, _ in examples)
    for ids, _ in examples[1:]:
        length = next((i for i in range(length) if ids[i] != first[i]), length)
    return length


def prefix_shared_loss(model: Any, batch: list[tuple[list[int], list[int]]], prefix_length: int, pad_id: int) -> torch.Tensor:
    """Next-token loss on masked tokens, computing the shared prefix once for the whole batch.

    The ~200-token system prompt is the same in every example; running it once and repeating its
    KV cache across the batch makes a step about 3x cheaper than padding full sequences. The output
    layer runs only where a loss applies.
    """
    prefix = torch.tensor([batch[0][0][:prefix_length]])  # (1, P)
    past = model.model(input_ids=prefix, use_cache=True).past_key_values
    past.batch_repeat_interleave(len(batch))
    length = max(len(ids) for ids, _ in batch) - prefix_length
    ids = torch.full((len(batch), length), pad_id)  # (B, L) suffixes, right-padded
    trained = torch.zeros((len(batch), length), dtype=torch.bool)
    for row, (seq, mask) in enumerate(batch):
        ids[row, : len(seq) - prefix_length] = torch.tensor(seq[prefix_length:])
        trained[row, : len(seq) - prefix_length] = torch.tensor(mask[prefix_length:], dtype=torch.bool)
    positions = torch.arange(prefix_length, prefix_length + length).expand(len(batch), length)
    hidden = model.model(input_ids=ids, past_key_values=past, position_ids=positions).last_hidden_state
    # token t is predicted from the hidden state at t - 1; the first suffix token from the prefix's last
    # state, which is never a trained token (the prefix ends inside the user header)
    predicted = trained[:, 1:]
    logits = model.lm_head(hidden[:, :-1][predicted])  # (N, V)
    return torch.nn.functional.cross_entropy(logits, ids[:, 1:][predicted])


def copy_accuracy(model: Any, tokenizer: Any, questions: list[calculator.Question]) -> tuple[float, float]:
    """Greedy copy accuracy on held-out questions: (expression copied into the call, result copied
    into the answer), each with the preceding text forced."""
    tools = [calculator.CALCULATOR_TOOL]
    hole = "@HOLE@"  # survives json.dumps unescaped, unlike control characters
    call_prefix = tokenizer.encode(calculator.call_text(hole).split(hole)[0], add_special_tokens=False)
    answer_prefix = tokenizer.encode(calculator.answer_text(hole).split(hole)[0], add_special_tokens=False)
    call_prompts, answer_prompts = [], []
    for question in questions:
        call_prompts.append(prompt_ids(tokenizer, question.messages(), tools) + call_prefix)
        after_tool = calculator.tool_conversation(question)[:3] + [{"role": "assistant", "content": ""}]
        ids, _ = encode_conversation(tokenizer, after_tool, tools)
        answer_prompts.append(ids[:-1] + answer_prefix)
    wanted_calls = [q.expression + '"' for q in questions]
    wanted_answers = [calculator.answer_text(q.answer).removeprefix("<answer>") for q in questions]
    expressions = greedy(model, tokenizer, call_prompts, _longest(tokenizer, wanted_calls))
    answers = greedy(model, tokenizer, answer_prompts, _longest(tokenizer, wanted_answers))
    expression_ok = sum(text.startswith(wanted) for wanted, text in zip(wanted_calls, expressions))
    result_ok = sum(text.startswith(wanted) for wanted, text in zip(wanted_answers, answers))
    return expression_ok / len(questions), result_ok / len(questions)


def _longest(tokenizer: Any, texts: list[str]) -> int:
    """Tokens enough to generate any of `texts` (plus one, in case a merge differs at its end).

    Too short a budget fails every long answer however well it is copied: with 10 tokens, every
    6-digit product's "</answer>" was cut off and counted wrong, and the gate read 0.7 for a
    model that copied all of them (found 2026-12-04)."""
    return 1 + max(len(tokenizer.encode(text, add_special_tokens=False)) for text in texts)


@torch.no_grad()
def greedy(model: Any, tokenizer: Any, prompts: list[list[int]], max_new_tokens: int) -> list[str]:
    """Greedy continuations of a batch of prompts (left-padded)."""
    length = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), length), tokenizer.pad_token_id)
    attention = torch.zeros((len(prompts), length), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, length - len(prompt) :] = torch.tensor(prompt)
        attention[row, length - len(prompt) :] = 1
    out = model.generate(
        ids,
        attention_mask=attention,
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return [tokenizer.decode(row[length:]) for row in out]


def warm_start(
    model: Any, tokenizer: Any, cfg: WarmStartConfig = WarmStartConfig(), log: Callable[[str], None] = print,
    stop_at: int | None = None,
) -> dict[str, float]:
    """Train `model` in place until the copy gate passes or the budget ends; returns final metrics.

    `stop_at`: end after that many steps instead, on the same schedule (the learning rate still
    decays over `cfg.max_steps`), so the result is the full build's state at that step: how the
    weak preset is made without changing `cfg`, whose fields are in tiny-calculator's recipe hash."""
    last = cfg.max_steps if stop_at is None else min(stop_at, cfg.max_steps)
    torch.manual_seed(cfg.seed)
    heldout = calculator.questions(cfg.heldout, seed=cfg.seed + 200)
    excluded = {q.expression for q in heldout} | {
        q.expression for q in calculator.questions(HELDOUT_EXCLUDED, seed=calculator.HELDOUT_SEED)
    }
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.95))
    rng = random.Random(cfg.seed)
    start, step, metrics = time.monotonic(), 0, {"expression_copy": 0.0, "result_copy": 0.0}
    while step < last:
        model.train()
        for group in optimizer.param_groups:
            group["lr"] = _schedule(step, cfg)
        if step < cfg.short_prompt_steps:
            batch = draw_batch(rng, tokenizer, cfg, None, 1.0, excluded)
        else:
            batch = draw_batch(rng, tokenizer, cfg, [calculator.CALCULATOR_TOOL], cfg.tool_share, excluded)
        loss = prefix_shared_loss(model, batch, shared_prefix_length(batch), tokenizer.pad_token_id)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        if step % cfg.check_every == 0:
            model.eval()
            expression, result = copy_accuracy(model, tokenizer, heldout)
            metrics = {"expression_copy": expression, "result_copy": result, "loss": loss.item(), "step": step}
            log(f"warm-start step {step}: loss {loss.item():.3f}, copy accuracy expression {expression:.2f} "
                f"result {result:.2f} ({time.monotonic() - start:.0f} s)")
            if step >= cfg.min_steps and min(expression, result) >= cfg.gate:
                break
    model.eval()
    return {**metrics, "seconds": time.monotonic() - start, "step": step}


def _schedule(step: int, cfg: WarmStartConfig) -> float:
    warmup = 30
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, cfg.max_steps - warmup))
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def save_build(path: Path, model: Any, tokenizer: Any, metrics: dict[str, Any]) -> Path:
    """Save a preset build to `path` through a staging folder beside it, so a crash leaves no
    half-built cache entry; `metrics` go to warm_start.json."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}-"))
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    (staging / "warm_start.json").write_text(json.dumps(metrics, indent=2))
    if path.exists():
        shutil.rmtree(path)
    staging.rename(path)
    return path
