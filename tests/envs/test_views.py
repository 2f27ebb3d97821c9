"""The stepper and the trajectory view with an environment: user and environment turns labelled apart
from tool results, the state after each step, the row reaching `reset`, and Reset closing an
episode in progress."""

import pytest

import rlfactory_nb as rf
from rlfactory_nb.engines.testing import ScriptedEngine
from rlfactory_nb.envs import Response
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.rollout.display import format_trajectory
from rlfactory_nb.widgets.trajectory import view_html

CALL = '<tool_call>\n{"name": "guess", "arguments": {"number": 5}}\n</tool_call>'
CLOSED = []


class Guess(rf.Environment):
    """A number game: a tool guesses, the game answers "higher"/"lower" to a plain answer."""

    def reset(self, row, *, seed):
        self.secret, self.guesses = row["secret"], []

    @rf.tool
    def guess(self, number: int) -> str:
        """Guess the number."""
        self.guesses.append(number)
        return "higher" if number < self.secret else "lower" if number > self.secret else "right"

    def respond(self, turn):
        return Response([{"role": "user", "content": "Use the guess tool, <b>please</b>."}], speaker="env")

    def state(self):
        return {"secret": self.secret, "guesses": list(self.guesses)}

    def close(self):
        CLOSED.append(self)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


async def test_the_stepper_shows_environment_turns_labelled_and_the_state_after_each_step(tokenizer):
    engine = ScriptedEngine(tokenizer, {"Find": [CALL, "Is it 5?", CALL]})
    agent = Agent(None, engine=engine, tokenizer=tokenizer, env=Guess, max_turns=3)
    stepper = rf.RolloutStepper(agent, {"messages": [{"role": "user", "content": "Find the number"}], "secret": 7})
    await stepper.next_turn()
    first = stepper.static_html()
    assert "state after this turn" in first and "&quot;guesses&quot;: [\n  5\n ]" in first
    assert "environment Guess" in stepper.status.value
    await stepper.next_turn()
    second = stepper.static_html()
    assert "<b>environment</b>" in second and "(masked)" in second
    assert "Use the guess tool, &lt;b&gt;please&lt;/b&gt;." in second  # escaped, shown apart from tool results
    await stepper.run_to_end()
    assert stepper.done and stepper.trajectory.finish_reason == "max_turns"
    text = format_trajectory(stepper.trajectory)
    assert "[environment, masked] 'Use the guess tool, <b>please</b>.'" in text
    assert text.count('state: {"secret": 7, "guesses": [5]}') == 3  # the last turn's call was not run (max_turns)


async def test_a_simulated_users_turn_is_labelled_as_the_user(tokenizer):
    agent = Agent(None, engine=ScriptedEngine(tokenizer, ["Hello?"]), tokenizer=tokenizer,
                  env=lambda: rf.UserSimulator(replies=["I want a refund. ###STOP###"]))
    traj = await agent.rollout([{"role": "user", "content": "hi"}])
    assert "<b>user (simulated)</b>" in view_html(traj) and "<td>call" not in view_html(traj)
    assert "[user (simulated), masked] 'I want a refund.'" in format_trajectory(traj)
    assert traj.turns[0].replies == [{"role": "user", "content": "I want a refund."}]


async def test_reset_closes_the_episode_in_progress(tokenizer):
    CLOSED.clear()
    agent = Agent(None, engine=ScriptedEngine(tokenizer, {"Find": [CALL]}), tokenizer=tokenizer, env=Guess, max_turns=3)
    stepper = rf.RolloutStepper(agent, {"messages": [{"role": "user", "content": "Find it"}], "secret": 2})
    await stepper.next_turn()
    stepper.reset()
    for _ in range(3):
        await __import__("asyncio").sleep(0.05)
    assert len(CLOSED) == 1 and stepper.trajectory.num_turns == 0 and not stepper.done
