"""A program stands where an rf.Agent does: the RewardLab, the RolloutStepper (one step = one model
call), rf.evaluate, a run's Runtime (from the kernel or `rollout.program` in the config), and it
travels by value like a reward function."""

from __future__ import annotations

import cloudpickle

import rlfactory_nb as rf
from rlfactory_nb.config import RunConfig
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.programs import AgentProgram
from rlfactory_nb.runtime import Runtime
from tests.programs.conftest import CALCULATOR_SCHEMA, ReplayEngine, call_text
from tests.programs.test_openai_client import tool_loop

ROWS = [{"messages": [{"role": "user", "content": f"What is {n}+1?"}], "ground_truth": str(n + 1)} for n in (1, 2)]
REPLIES = [call_text("calculator", {"expression": "1+1"}), "<answer>2</answer>"]


def answered_two(sample: rf.Sample) -> float:
    return float(sample.final_answer == "2") + 0.5 * len(sample.tool_calls)


async def test_the_reward_lab_samples_and_scores_a_program(tiny_policy):
    engine = ReplayEngine(tiny_policy.tokenizer, REPLIES, by_turn=True)
    program = AgentProgram(tool_loop, engine=engine, tokenizer=tiny_policy.tokenizer)
    lab = rf.RewardLab(program, ROWS, {"two": answered_two}, group_size=2)
    await lab.sample(n_prompts=1)
    assert [[o.score for o in group] for group in lab.outcomes] == [[1.5, 1.5]]  # sees the call and the answer


async def test_the_stepper_steps_one_model_call_at_a_time(replay):
    program, engine = replay(REPLIES, tool_loop)
    stepper = rf.RolloutStepper(program, ROWS[0])
    turn = await stepper.next_turn()
    assert len(engine.prompts) == 1 and turn.calls[0].name == "calculator" and not stepper.done
    assert stepper.trajectory.num_turns == 1 and sum(stepper.trajectory.loss_mask) == len(engine.sampled[0])
    await stepper.next_turn()
    assert len(engine.prompts) == 2 and stepper.trajectory.num_turns == 2
    final = await stepper.run_to_end()
    assert stepper.done and final.metadata["final_answer"] == "<answer>2</answer>" and len(engine.prompts) == 2
    assert "turn 2 of at most 4" in stepper.status.value


async def test_evaluate_takes_a_program(tiny_policy):
    async def one_call(row, llm):
        reply = await llm.client().chat.completions.create(model=llm.model, messages=row["messages"], tools=[CALCULATOR_SCHEMA])
        return reply.choices[0].message.content or "called a tool"

    cfg = RunConfig.from_dict({"name": "eval-program", "rollout": {"max_new_tokens": 24}})
    report = await rf.evaluate(tiny_policy, ROWS, cfg, agent=AgentProgram(one_call), reward=answered_two)
    trajectories = report.trajectories["greedy"]
    assert len(report.rows) == 2 and all(t.metadata["program"]["calls"] == 1 for t in trajectories)
    assert all(len(t.turns[0].text) > 0 for t in trajectories)


def test_a_runtime_binds_the_program_to_the_runs_limits_and_sampling(tiny_policy):
    engine = ReplayEngine(tiny_policy.tokenizer, ["x"])
    cfg = RunConfig.from_dict({
        "name": "r", "rollout": {"program": "tests.programs.test_openai_client:tool_loop", "max_turns": 2,
                                  "max_new_tokens": 7, "temperature": 0.5},
    })
    runtime = Runtime.from_config(cfg, None, tiny_policy, engine=engine)
    bound = runtime.agent(temperature=0.0)
    assert isinstance(bound, AgentProgram) and bound.fn is tool_loop
    assert (bound.max_turns, bound.settings.rollout.limits.max_new_tokens, bound.settings.rollout.sampling.temperature) == (2, 7, 0.0)
    assert bound.settings.request_sampling is False and bound.engine is engine


def test_a_program_travels_by_value_with_the_runs_objects():
    async def kernel_program(row, llm):  # defined in a test body: not importable by name
        return "from the kernel"

    objects = RunObjects.of(agent=AgentProgram(kernel_program, max_calls=3, timeout_s=9))
    back = RunObjects.loads(objects.dumps())
    assert back.agent.settings.rollout.limits.max_turns == 3 and back.agent.settings.timeout_s == 9
    assert back.agent.fn.__code__.co_code == kernel_program.__code__.co_code
    assert cloudpickle.loads(cloudpickle.dumps(back.agent)).max_turns == 3


def test_a_config_program_that_cannot_load_fails_before_any_engine():
    import pytest

    from rlfactory_nb.errors import ConfigError

    cfg = RunConfig.from_dict({"name": "r", "rollout": {"program": "tests.programs.test_openai_client:no_such_program"}})
    with pytest.raises(ConfigError, match="no_such_program"):
        Runtime.from_config(cfg)


async def test_the_trajectory_view_says_where_segments_began_and_why(replay):
    async def two_histories(row, llm):
        client = llm.client()
        await client.chat.completions.create(model=llm.model, messages=row["messages"])
        await client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": "start over"}])
        return "x"

    program, _ = replay(["a", "b"], two_histories)
    traj = await program.rollout(ROWS[0])
    html = rf.Trajectory.view(traj).static_html()
    assert "2 call(s), 0 merged, 1 new segment(s)" in html
    assert "1: first call; 2: history rewritten at call 1" in html
