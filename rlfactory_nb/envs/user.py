"""`UserSimulator`: a user, played by a model, who answers when the agent answers without a tool call.

Tasks in the style of tau2-bench have a customer with a goal the agent must find out by asking:
the row says what the user wants ("you want order #12 cancelled, and you only know your email"),
and the user model plays that part turn by turn until it is satisfied (it writes the stop marker)
or a turn limit ends the dialogue.

    user = rf.UserSimulator(engine=cluster.engine("Qwen/Qwen3-8B", kind="vllm"), instructions="goal")
    user = rf.UserSimulator(base_url="http://localhost:8000/v1", model="Qwen/Qwen3-8B")
    user = rf.UserSimulator(replies=["My email is a@b.c", "Yes, cancel it. ###STOP###"])   # scripted

It is an Environment: `env=lambda: rf.UserSimulator(engine=...)` is a dialogue task on its own, and a
stateful environment (a shop) holds one per episode and hands it `reset` and `respond`. The model it
runs on is any engine (a `cluster.engine(...)` handle, `policy.engine("hf")` of a frozen copy) or an
OpenAI-compatible endpoint, through the chat client the judge uses (engines/chat_client.py). Each
reply is sampled with a seed derived from the episode's seed and the user's turn, so a run's users
say the same things again. What the user says enters the agent's tokens masked (it is not the
policy's text), and its tokens and latency are counted in the step's metrics (`env/user_tokens`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from rlfactory_nb.engines.chat_client import chat_client
from rlfactory_nb.engines.chat_types import ChatClient, ChatSettings
from rlfactory_nb.envs.base import Environment, Response
from rlfactory_nb.errors import ConfigError
from rlfactory_nb.seeds import request_seed
from rlfactory_nb.types import Message, Turn

STOP = "###STOP###"
"""what the user writes when the dialogue is over (tau2-bench's convention)"""

SYSTEM_PROMPT = (
    "You are a user talking to a customer-service agent. Follow your instructions and reveal "
    "information only when the agent asks for it. Write short, natural messages. When your goal is "
    "met, or cannot be met, end your message with {stop}.\n\nInstructions:\n{instructions}"
)


_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)


class UserSimulator(Environment):
    """A simulated user; see the module docstring.

    `instructions`: the row's column holding the user's instructions, or a function (row) -> text;
    `system_prompt`: the user model's system prompt, with `{instructions}` and `{stop}` in it;
    `max_turns`: replies after which the dialogue ends even without the stop marker;
    `replies`: a scripted user instead of a model (the i-th reply answers the i-th answer);
    `client`: a chat client to share across episodes instead of one made from engine / base_url."""

    def __init__(
        self,
        engine: Any = None,
        *,
        base_url: str | None = None,
        model: str | None = None,
        tokenizer: Any = None,
        client: ChatClient | None = None,
        replies: Sequence[str] | None = None,
        instructions: str | Callable[[dict[str, Any]], str] = "instructions",
        system_prompt: str = SYSTEM_PROMPT,
        stop: str = STOP,
        max_turns: int = 8,
        temperature: float = 1.0,
        max_tokens: int = 256,
        timeout_s: float = 60.0,
    ):
        sources = sum(x is not None for x in (engine, base_url, client, replies))
        if sources != 1:
            raise ConfigError(
                "UserSimulator needs exactly one of engine= (an engine or cluster.engine(...) handle), "
                f"base_url= with model= (an endpoint), client= or replies= (a scripted user); got {sources}"
            )
        if max_turns < 1:
            raise ConfigError(f"UserSimulator max_turns must be at least 1, got {max_turns}")
        self.replies = list(replies) if replies is not None else None
        self._owns_client = client is None and self.replies is None
        if self._owns_client:
            settings = ChatSettings(temperature=temperature, max_tokens=max_tokens, timeout_s=timeout_s, max_retries=1)
            client = chat_client(engine=engine, base_url=base_url, model=model, tokenizer=tokenizer, settings=settings)
        self.client = client
        self.instructions = instructions
        self.system_prompt = system_prompt
        self.stop = stop
        self.max_turns = max_turns
        self.history: list[Message] = []
        """the dialogue from the user's side: its own messages are "assistant", the agent's "user\""""
        self.turns = 0
        self.seed = 0

    def reset(self, row: dict[str, Any], *, seed: int) -> None:
        """Read the instructions off the row; the row's prompt is the user's opening message."""
        text = self.instructions(row) if callable(self.instructions) else str(row.get(self.instructions, ""))
        system = self.system_prompt.format(instructions=text, stop=self.stop)
        opening = [{"role": "assistant", "content": m["content"]} for m in row.get("messages", []) if m.get("role") == "user"]
        self.history = [{"role": "system", "content": system}, *opening]
        self.turns, self.seed = 0, seed

    async def respond(self, turn: Turn) -> Response:
        """The user's reply to the agent's answer (its text outside reasoning); done at the stop
        marker or after `max_turns` replies."""
        answer = turn.answer if turn.answer is not None else turn.text
        self.history.append({"role": "user", "content": answer})
        started = time.perf_counter()
        text, tokens = await self._reply()
        self.turns += 1
        finished = self.stop in text or self.turns >= self.max_turns
        text = text.replace(self.stop, "").strip()
        tokens = len(text.split()) if tokens is None else tokens  # a scripted user: its words
        self.history.append({"role": "assistant", "content": text})
        info = {"user_tokens": tokens, "user_s": time.perf_counter() - started}
        return Response([{"role": "user", "content": text}], done=finished, speaker="user", info=info)

    async def _reply(self) -> tuple[str, int | None]:
        if self.replies is not None:
            return (self.replies[self.turns] if self.turns < len(self.replies) else self.stop), None
        assert self.client is not None
        before = self.client.usage.completion_tokens
        reply = await self.client.complete(self.history, seed=request_seed(self.seed, self.turns))
        return _THINK.sub("", reply.text).strip(), self.client.usage.completion_tokens - before

    def state(self) -> dict[str, Any]:
        return {"user_turns": self.turns}

    async def close(self) -> None:
        if self._owns_client and self.client is not None:
            await self.client.aclose()
