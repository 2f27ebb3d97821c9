"""Rows shaped like the datasets people have (issue 50), each driven through an environment run:
rollout, reward, one training step on the tiny random model (`train`, in process) and evaluation.

- GSM8K: `id` + `question` + `answer` (the gold number after "####"); the environment writes the
  prompt from the question, the run's reward reads the `answer` column (no `ground_truth`).
- TRL environment datasets: `prompt` only (messages, or a string); the environment owns the reward.
- OpenAI chat format: `messages` + `tools`; the environment offers the row's tools.
- tau-bench tasks: `id` + `instruction`; a scripted customer opens with the instruction and the
  environment's reward checks what the agent said.

The random tiny model writes noise, so each training reward adds a tie-break on the length of what
it wrote (a thousandth per character): its groups then carry signal and the step trains. Its turns
are cut at `max_new_tokens`, so an environment never sees them answered: where the environment owns
the reward, the training reward is the environment's plus that tie-break, and the evaluation runs
the environment's reward alone (the default reward, which the rows' missing ground truth leaves out).
"""

from __future__ import annotations

import re

import pytest
from tiny_models import random_qwen3, save_with_tokenizer

import rlfactory_nb as rf
from rlfactory_nb.config import RunConfig
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.engines.testing import ScriptedEngine
from rlfactory_nb.envs import Response
from rlfactory_nb.envs.base import env_reward
from rlfactory_nb.errors import DatasetError
from rlfactory_nb.eval import evaluate
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.runtime import Runtime
from rlfactory_nb.train.loop import train
from rlfactory_nb.train.metrics import read_metrics
from rlfactory_nb.types import ToolResult, ToolSpec

from .test_training import config, saved


def tiebreak(text: str) -> float:
    return len(text) / 1000


def env_and_length(sample: rf.Sample) -> float:
    """The environment's reward, with the tie-break."""
    return env_reward(sample) + tiebreak(sample.response)


# --- GSM8K: id + question + answer ---------------------------------------------------------------

GSM8K = [
    {
        "id": "gsm8k-train-0",
        "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
        "in May. How many clips did Natalia sell altogether in April and May?",
        "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 "
        "clips altogether in April and May.\n#### 72",
    },
    {
        "id": "gsm8k-train-1",
        "question": "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of "
        "babysitting. How much did she earn?",
        "answer": "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned "
        "0.2 x 50 = $<<0.2*50=10>>10.\n#### 10",
    },
]


class MathQuestion(rf.Environment):
    """Writes the prompt from the row's question."""

    def reset(self, row, *, seed):
        return [{"role": "user", "content": f"{row['question']} Give the number in <answer></answer>."}]


def gsm8k_correct(sample: rf.Sample) -> float:
    """1 when the final answer is the number after "####" in the row's `answer` column."""
    gold = sample.metadata["answer"].split("####")[-1].strip()
    return float(sample.final_answer == gold) + tiebreak(sample.response)


# --- TRL environment datasets: prompt only ------------------------------------------------------

TRL_PROMPTS = [
    {"prompt": [{"role": "user", "content": "Increment the counter three times, then say done."}]},
    {"prompt": "Increment the counter once."},
]


class IncrementCounter(rf.Environment):
    """TRL's IncrementEnv, as an rf.Environment: a tool increments a counter; the reward is the count."""

    def reset(self, row, *, seed):
        self.count, self.said = 0, ""

    @rf.tool
    def increment(self) -> str:
        """Increment the counter by one."""
        self.count += 1
        return f"count={self.count}"

    def respond(self, turn):  # returns None: the episode ends at an answer
        self.said = turn.text

    def reward(self):
        return float(self.count) + tiebreak(self.said)


# --- OpenAI chat format: messages + tools --------------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
OPENAI_CHAT = [
    {
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": f"What is the weather in {city}?"},
        ],
        "tools": [WEATHER_TOOL],
    }
    for city in ("Paris", "Lima")
]


class RowTools(rf.Environment):
    """Offers the tools the row lists (OpenAI `tools`), answering each call from a canned table."""

    def reset(self, row, *, seed):
        functions = [tool["function"] for tool in row["tools"]]
        self.specs = [ToolSpec(f["name"], f.get("description", ""), f["parameters"]) for f in functions]

    def tool_specs(self):
        return self.specs

    async def call_tools(self, calls):
        return [ToolResult(call.name, "ok", "sunny, 21 C") for call in calls]


def called_a_listed_tool(sample: rf.Sample) -> float:
    listed = {tool["function"]["name"] for tool in sample.metadata["tools"]}
    return float(any(call.name in listed for call in sample.tool_calls)) + tiebreak(sample.response)


# --- tau-bench tasks: id + instruction -----------------------------------------------------------

TAU_TASKS = [
    {
        "id": "retail-0",
        "user_id": "yusuf_rossi_9620",
        "instruction": "You are Yusuf Rossi in 19122. You received your order #W2378156 and wish to exchange "
        "the mechanical keyboard for a similar one but with clicky switches.",
        "actions": [{"name": "find_user_id_by_name_zip", "arguments": {"first_name": "Yusuf", "zip": "19122"}}],
        "outputs": [],
    },
    {
        "id": "retail-1",
        "user_id": "mei_kovacs_8020",
        "instruction": "You are Mei Kovacs in 28236. You want to cancel order #W6390527 because you no "
        "longer need it.",
        "actions": [{"name": "cancel_pending_order", "arguments": {"order_id": "#W6390527"}}],
        "outputs": [],
    },
]


class Customer(rf.Environment):
    """A scripted customer: opens with the task's instruction, names the order once asked, and the
    reward is whether the agent then repeated the order id."""

    def reset(self, row, *, seed):
        self.order = re.search(r"#W\d+", row["instruction"]).group()
        self.asked = False
        return [{"role": "user", "content": f"Hi. {row['instruction']}"}]

    def respond(self, turn):
        if not self.asked:
            self.asked = True
            return Response([{"role": "user", "content": f"It is order {self.order}."}], speaker="user")
        return Response([], done=True, reward=float(self.order in turn.text) + tiebreak(turn.text))


# --- the runs -------------------------------------------------------------------------------------

OWN = {"env_and_length": env_and_length}
SHAPES = {  # rows, environment, training reward, evaluation reward (None: the run's default), overrides
    "gsm8k": (GSM8K, MathQuestion, {"correct": gsm8k_correct}, {"correct": gsm8k_correct}, {}),
    "trl_prompt_only": (TRL_PROMPTS, IncrementCounter, OWN, None, {}),
    "openai_messages_tools": (OPENAI_CHAT, RowTools, {"called": called_a_listed_tool}, {"called": called_a_listed_tool}, {}),
    "tau_bench": (TAU_TASKS, Customer, OWN, None, {"rollout__max_turns": 2}),
}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_with_tokenizer(random_qwen3(0), tmp_path_factory.mktemp("tiny-shapes-qwen3"))


@pytest.mark.slow  # one training step and an evaluation on the tiny model: about 10 s each
@pytest.mark.parametrize("shape", list(SHAPES))
async def test_a_dataset_shape_rolls_out_scores_trains_a_step_and_evaluates(shape, tiny_dir, tmp_path):
    rows, env, reward, eval_reward, overrides = SHAPES[shape]
    options = {"grpo__steps": 1, "grpo__prompts_per_step": 2, "rollout__max_total_tokens": 512, **overrides}
    cfg = config(tiny_dir, tmp_path, **options)  # its reward is the default, which reads a ground truth
    result = await train(cfg, env=env, reward=reward, train_data=rows)

    [row] = read_metrics(cfg.run_dir)
    assert row["groups/trained"] >= 1 and "train/loss" in row, row  # the step updated the policy
    assert row["env/errors"] == 0 and row["groups/env_failed"] == 0
    trajectories = saved(cfg, 1)
    assert len(trajectories) == 8 and len({t["id"] for t in trajectories}) == 8
    for traj in trajectories:
        assert traj["prompt_ids"] and traj["response_ids"] and isinstance(traj["metadata"]["reward"], float)
        assert traj["metadata"]["reward"] > 0  # each reward read what it needed (the tie-break at least)
    check_shape(shape, trajectories)

    report = await evaluate(result.checkpoint, rows, cfg, env=env, reward=eval_reward)
    assert len(report.rows) == len(rows) and all(row.question for row in report.rows)
    if eval_reward is not None:
        assert all(row.sampled_reward > 0 and row.greedy_reward > 0 for row in report.rows)
    else:  # the environment's own reward scored them: the default one, which reads a ground truth, did not run
        assert all(row.sampled_reward == 0.0 for row in report.rows)  # cut-off turns: no move, no reward


def by_id(trajectories: list[dict]) -> list[tuple[dict, dict]]:
    """Each tau-bench trajectory with the task its row's `id` names."""
    tasks = {task["id"]: task for task in TAU_TASKS}
    return [(traj, tasks[traj["metadata"]["id"]]) for traj in trajectories]


def check_shape(shape: str, trajectories: list[dict]) -> None:
    """What each shape's rows must have reached: their columns in the metadata, their prompt."""
    tokenizer = build_tokenizer()
    first_prompt = tokenizer.decode(trajectories[0]["prompt_ids"])
    if shape in ("gsm8k", "tau_bench"):  # the row's id stays a column; the environment wrote the prompt
        ids = {t["metadata"]["id"] for t in trajectories}
        assert ids == {row["id"] for row in (GSM8K if shape == "gsm8k" else TAU_TASKS)}
        assert ("clips" in first_prompt or "Weng" in first_prompt) if shape == "gsm8k" else "You are" in first_prompt
    if shape == "trl_prompt_only":
        assert all("ground_truth" not in t["metadata"] for t in trajectories)
        assert set(trajectories[0]["metadata"]["reward_components"]) == {"env_and_length", "env"}
        assert "increment" in first_prompt
    if shape == "openai_messages_tools":
        assert "get_weather" in first_prompt and "You are a helpful assistant." in first_prompt
        assert all(t["metadata"]["tools"] == [WEATHER_TOOL] for t in trajectories)
    if shape == "tau_bench":
        assert all(t["metadata"]["actions"] for t in trajectories)
        assert all(t["messages"][0] == {"role": "user", "content": f"Hi. {task['instruction']}"} for t, task in by_id(trajectories))


def test_rows_without_a_ground_truth_train_on_the_environments_reward_and_are_refused_without_one():
    """The default reward (exact_match) reads a ground truth: prompt-only rows leave it out where an
    environment owns the reward, and are refused before any model loads where none does."""
    cfg = RunConfig(name="shapes")
    with_env = Runtime.from_config(cfg, RunObjects.of(train_data=TRL_PROMPTS, env=IncrementCounter))
    assert list(with_env.reward.functions) == ["env"]
    with pytest.raises(DatasetError, match="no 'ground_truth' column.*exact_match.*reward of your own.*env="):
        _ = Runtime.from_config(cfg, RunObjects.of(train_data=TRL_PROMPTS)).reward
    with pytest.raises(DatasetError, match="train_data row 1: missing column 'messages'.*question, answer.*convert"):
        Runtime.from_config(cfg, RunObjects.of(train_data=GSM8K)).train_rows()
    assert Runtime.from_config(cfg, RunObjects.of(train_data=GSM8K, env=MathQuestion)).train_rows()[0]["messages"] == []


async def test_a_row_without_a_prompt_needs_an_environment_that_writes_one():
    tokenizer = build_tokenizer()
    engine = ScriptedEngine(tokenizer, ["ok"])
    written = await rf.Agent(None, tokenizer=tokenizer, engine=engine, env=MathQuestion).rollout(GSM8K[0])
    assert written.messages[0]["content"].startswith("Natalia sold clips") and written.metadata["id"] == "gsm8k-train-0"
    silent = await rf.Agent(None, tokenizer=tokenizer, engine=engine, env=rf.Environment).rollout(GSM8K[0])
    assert silent.finish_reason == "error" and not silent.response_ids and len(engine.prompts) == 1  # no request
    assert silent.metadata["env_error"]["kind"] == "reset" and "reset() wrote none" in silent.metadata["env_error"]["message"]
    with pytest.raises(DatasetError, match="needs a 'messages' column.*env="):
        await rf.Agent(None, tokenizer=tokenizer, engine=engine).rollout(GSM8K[0])
