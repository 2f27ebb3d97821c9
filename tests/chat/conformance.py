"""What every model family must do, as helpers that each family's tests call with its own data.

- `family_tokenizer`: the tiny Qwen BPE carrying the family's added tokens and its reference template
  (skips when the reference folder is absent), so the real token assembly runs on that family's ids.
- `rollout_against_render`: a 3-turn rollout whose engine replays the texts the family's template
  renders, through the real ToolSet and token assembly; the ids must equal the template's full
  render except where the family record says the template rewrites history.
- `assert_bounded` / `assert_linear`: hostile model text never raises and costs linear time.
- `train_one_step`: one GRPO step on a random-weight model over the family's tokenizer.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from tiny_models import tiny_run_config
from transformers import Qwen3Config, Qwen3ForCausalLM

import rlfactory_nb as rf
from rlfactory_nb.chat import ChatFormat, ParseResult, ToolCallParser
from rlfactory_nb.engines.testing import ScriptedEngine
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.types import Sample, Trajectory
from tests.chat.templates import template_text

HERE = Path(__file__).resolve().parent


def family_tokenizer(
    template_name: str,
    added_tokens: Sequence[tuple[str, bool]],
    eos_token: str,
    bos_token: str | None = None,
    pad_token: str | None = None,
) -> Any:
    """The tiny BPE with the family's (text, special) added tokens and reference template."""
    return build_tokenizer(
        added_tokens=added_tokens,
        eos_token=eos_token,
        pad_token=pad_token or eos_token,
        bos_token=bos_token,
        template=template_text(template_name),
    )


@rf.tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@rf.tool
def get_time(zone: str) -> str:
    """The time in a time zone."""
    return f"12:00 in {zone}"


WEATHER_TOOLS = (get_weather, get_time)


def ReplayEngine(tokenizer: Any, turns: Sequence[tuple[str, str]]) -> ScriptedEngine:
    """Replies with fixed sampled texts, one per `generate` call, each followed by its end token
    (a turn that calls a tool may end with another token than the last one: Llama's `<|eom_id|>`)."""
    return ScriptedEngine(tokenizer, [text + end for text, end in turns])


async def rollout_against_render(
    tokenizer: Any,
    chat_format: str | ChatFormat,
    turns: Sequence[tuple[str, str]],
    question: str = "What is the weather in Paris, and the time there?",
    enable_thinking: bool = False,
    tools: Sequence[Any] = WEATHER_TOOLS,
) -> Trajectory:
    """Run `turns` (sampled text, end token) as one trajectory with real tools and token assembly.

    Asserts the mask convention (1 exactly on the replayed ids) and that the drift check found the
    ids equal to a full render, or different only where the family's record says (`expected`)."""
    engine = ReplayEngine(tokenizer, turns)
    toolset = rf.ToolSet.from_functions(*tools)
    await toolset.start()
    try:
        agent = Agent(
            None, toolset, engine=engine, tokenizer=tokenizer, chat_format=chat_format,
            enable_thinking=enable_thinking, max_turns=len(turns), max_total_tokens=4096, drift="warn",
        )
        traj = await agent.rollout([{"role": "user", "content": question}])
    finally:
        await toolset.stop()
    sampled = [i for i, m in zip(traj.response_ids, traj.loss_mask) if m]
    expected: list[int] = []
    for text, end in turns[: traj.num_turns]:
        expected += tokenizer.encode(text, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids(end)]
    assert sampled == expected, "loss_mask is 1 exactly on the sampled ids"
    assert len(traj.loss_mask) == len(traj.response_ids) and sum(traj.loss_mask) == len(traj.logprobs)
    drift_ok = traj.metadata["drift_position"] == -1 or agent.drift_count == 0
    assert drift_ok, f"the rollout's ids differ from the full render at {traj.metadata['drift_position']}"
    return traj


def final_answer(traj: Trajectory) -> str:
    return Sample.from_trajectory(traj).final_answer


def assert_bounded(parser: ToolCallParser, text: str, seconds: float = 5.0) -> ParseResult:
    """`parser.parse(text)` returns (never raises) within `seconds`."""
    started = time.perf_counter()
    result = parser.parse(text)
    elapsed = time.perf_counter() - started
    assert isinstance(result, ParseResult)
    assert elapsed < seconds, f"parse took {elapsed:.1f} s"
    return result


def assert_linear(parser: ToolCallParser, make: Callable[[int], str], n: int = 20_000) -> None:
    """Parsing 4x the hostile text costs at most ~8x (linear with a loaded machine's noise; a
    quadratic parser costs 16x)."""
    small, large = make(n), make(4 * n)
    timings = []
    gc.collect()
    gc.disable()  # a collection of the whole suite's heap inside one timing is noise, not the parser's cost
    try:
        for text in (small, large):
            best = float("inf")
            for _ in range(3):
                started = time.perf_counter()
                parser.parse(text)
                best = min(best, time.perf_counter() - started)
            timings.append(best)
    finally:
        gc.enable()
    assert timings[1] < max(8 * timings[0], 0.05), f"{timings[0]:.3f} s for n, {timings[1]:.3f} s for 4n"


def truncations(text: str, tokenizer: Any) -> list[str]:
    """`text` cut at every token boundary (what a token limit can leave)."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    return [tokenizer.decode(ids[:n], skip_special_tokens=False) for n in range(len(ids))]


def train_one_step(tokenizer: Any, tmp_path: Path, chat_format: str = "auto") -> dict[str, Any]:
    """One GRPO step of a random tiny model over `tokenizer` (its template picks the family when
    `chat_format` is auto); returns the step's metrics row."""
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=1024,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    folder = tmp_path / "model"
    Qwen3ForCausalLM(config).float().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    rewards = HERE.parent / "train" / "scripted_rewards.py"
    cfg = tiny_run_config(
        folder, tmp_path / "runs", f"{rewards}:first_token",
        grpo__steps=1, rollout__max_new_tokens=8, rollout__max_total_tokens=1024,
        rollout__chat_format=chat_format,
    )
    result = rf.train_sync(cfg)
    assert result.step == 1
    row = result.metrics
    assert row["train/optimizer_steps"] == 1 and torch.isfinite(torch.tensor(row["train/loss"]))
    return row
