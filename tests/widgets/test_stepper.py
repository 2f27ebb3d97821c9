"""RolloutStepper: one turn per click, the same trajectory agent.rollout makes, errors shown in the view."""

from rollout.scripted import ScriptedEngine  # tests/ is on sys.path (rootdir-relative packages)

from rlfactory_nb.config import RunConfig
from rlfactory_nb.data.objects import RunObjects
from rlfactory_nb.runtime import Runtime
from rlfactory_nb.widgets.stepper import RolloutStepper

from .conftest import CALL, add, scripted_agent

REPLIES = {"2+3": [CALL.format(a=2, b=3), CALL.format(a=5, b=0), "<answer>5</answer>"]}


async def test_steps_reproduce_a_full_rollout(tokenizer, tools):
    agent = scripted_agent(tokenizer, tools, REPLIES, max_turns=4)
    stepper = RolloutStepper(agent, "What is 2+3?")
    assert stepper.trajectory.num_turns == 0 and not stepper.next_button.disabled
    first = await stepper.next_turn()
    assert first.calls[0].name == "add" and first.results[0].content == "5"
    assert stepper.trajectory.num_turns == 1 and "turn 1 of at most 4" in stepper.status.value
    await stepper.run_to_end()
    assert stepper.done and stepper.next_button.disabled and stepper.run_button.disabled
    whole = await scripted_agent(tokenizer, tools, REPLIES, max_turns=4).rollout([{"role": "user", "content": "What is 2+3?"}])
    stepped = stepper.trajectory
    assert (stepped.response_ids, stepped.loss_mask, stepped.finish_reason) == (whole.response_ids, whole.loss_mask, whole.finish_reason)
    assert stepped.num_turns == 3


async def test_turn_limit_ends_the_trajectory_like_rollout(tokenizer, tools):
    agent = scripted_agent(tokenizer, tools, REPLIES, max_turns=2)
    stepper = RolloutStepper(agent, [{"role": "user", "content": "What is 2+3?"}])
    await stepper.run_to_end()
    assert stepper.trajectory.finish_reason == "max_turns" and stepper.trajectory.num_turns == 2


async def test_reset_starts_over(tokenizer, tools):
    stepper = RolloutStepper(scripted_agent(tokenizer, tools, REPLIES), "What is 2+3?")
    await stepper.next_turn()
    old = stepper.trajectory
    stepper.reset()
    assert stepper.trajectory is not old and stepper.trajectory.num_turns == 0 and not stepper.done


def test_buttons_run_turns_and_errors_land_in_the_output(tokenizer):
    """Clicked with no loop running (a plain script), the work runs to completion in the click."""
    stepper = RolloutStepper(scripted_agent(tokenizer, None, {"hi": ["<answer>hello</answer>"]}), "hi")
    stepper.next_button.click()
    assert stepper.trajectory.num_turns == 1 and stepper.done and not stepper._busy
    stepper.agent._engine = None
    stepper.agent.policy = None  # the next turn cannot find an engine: it must fail visibly
    stepper.reset_button.click()
    stepper.next_button.click()
    errors = "".join(output.get("text", "") for output in stepper.errors.outputs)
    assert "AttributeError" in errors and not stepper._busy


async def test_a_runtime_is_stepped_with_its_agent(tokenizer):
    """`RolloutStepper(runtime, prompt)`: the run's tools and limits, the same turns as its Agent."""
    cfg = RunConfig(name="x").replace({"rollout.max_turns": 4})
    runtime = await Runtime.from_config(cfg, RunObjects.of(tools=[add]), engine=ScriptedEngine(tokenizer, REPLIES)).start()
    try:
        stepper = RolloutStepper(runtime, "What is 2+3?")
        await stepper.run_to_end()
        assert stepper.agent.tools is runtime.tools and stepper.trajectory.num_turns == 3
        assert stepper.trajectory.turns[0].results[0].content == "5"
    finally:
        await runtime.close()
