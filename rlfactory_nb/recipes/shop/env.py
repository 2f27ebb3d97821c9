"""A retail support task in the style of tau2-bench: the agent serves a customer over a shop database.

Each episode gets its own SQLite copy of the shop (world.py). The agent reads and changes orders with
four tools bound to the episode; a customer (a simulated user whose goal comes from the row) answers
whenever the agent replies without a tool call. Shop policy lives in the tools: only pending orders
may be cancelled or re-addressed, so some requests must be refused, and then the goal state is the
untouched database.

The reward is 1 only when the episode passes all three of tau2-bench's checks that apply here:
- the database: the orders the agent left equal the goal state, made by replaying the task's gold
  actions on a second fresh copy;
- what the customer was told: every fact of the row's `communicate_info` (for a refused request, the
  order's number and status) appears in what the agent said to the customer, and a refusal says
  that the request cannot be done (`REFUSAL`);
- no forbidden action: no write (cancel, re-address) was attempted on an order the task does not
  change, even one the shop refused.
Without the last two, a refused request's goal is the untouched database, so an agent that said
nothing, or wrote only broken calls, earned 1 on every such row (35 of 63 training rows).

    env = shop_env()                                             # the row's scripted replies
    env = shop_env(user=lambda: rf.UserSimulator(engine=judge))  # a model plays the customer
    agent = rf.Agent(policy, env=env)

The customer is any environment-shaped user: `reset(row, seed=)`, `respond(turn) -> Response`,
`close()` (sync or async), such as `rf.UserSimulator`, which reads the row's `instructions` column.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlfactory_nb.envs.base import Environment, Response, bound_tools
from rlfactory_nb.errors import ArgumentTypeError
from rlfactory_nb.recipes.shop.world import SEED, episode_database, orders_digest
from rlfactory_nb.tools.python import tool
from rlfactory_nb.types import Turn

STOP = "###STOP###"
"""what a customer writes when the conversation is over (tau2-bench's marker)"""
REFUSAL = re.compile(
    r"\b(cannot|can ?not|can[’']t|unable|not (be )?(able|possible)|isn[’']t possible|no longer|too late|won[’']t be able)\b",
    re.IGNORECASE,
)
"""how a refusal reads: the customer of a refused request must hear that it cannot be done"""


class ScriptedCustomer(Environment):
    """The customer of tests and of the CPU demo: says the row's `user_replies` in order, then stops
    (a reply holding the stop marker ends the episode)."""

    def __init__(self) -> None:
        self.replies: list[str] = []
        self.turns = 0

    def reset(self, row: dict[str, Any], *, seed: int) -> None:
        self.replies, self.turns = list(row.get("user_replies") or [STOP]), 0

    def respond(self, turn: Turn) -> Response:
        text = self.replies[min(self.turns, len(self.replies) - 1)]
        self.turns += 1
        content = text.replace(STOP, "").strip()
        return Response([{"role": "user", "content": content}] if content else [], done=STOP in text, speaker="user")


UserFactory = Callable[[], Environment]


def shop_env(user: UserFactory | None = None, seed: int = SEED) -> Callable[[], Shop]:
    """A factory of Shop episodes, each with its own customer from `user` (a class or zero-argument
    factory, e.g. `lambda: rf.UserSimulator(engine=...)`; default: the row's scripted replies)."""
    return functools.partial(Shop, user, seed)


class Shop(Environment):
    """One customer conversation over the episode's own copy of the shop database."""

    def __init__(self, user: UserFactory | None = None, seed: int = SEED):
        if isinstance(user, Environment):
            raise ArgumentTypeError("shop_env(user=...) takes a class or factory: each episode needs its own customer")
        self.customer: Environment = (user or ScriptedCustomer)()
        self.seed = seed
        self.folder: Path | None = None
        self.db: sqlite3.Connection | None = None
        self.goal: tuple[tuple, ...] = ()
        self.actions: list[str] = []
        """the writes the shop carried out, in order ("cancel #1003")"""
        self.attempts: list[tuple[str, int]] = []
        """every write the agent asked for, carried out or refused: (verb, order id)"""
        self.told: list[str] = []
        """what the agent said to the customer (its answers without a tool call)"""
        self.must_tell: list[str] = []
        self.changed_orders: set[int] = set()
        """the orders the task's gold actions change: a write on any other is forbidden"""

    async def reset(self, row: dict[str, Any], *, seed: int) -> None:
        gold = row.get("gold_actions") or []
        await asyncio.to_thread(self._open)
        self.goal = await asyncio.to_thread(goal_state, self.seed, gold)
        self.must_tell = [str(fact) for fact in row.get("communicate_info") or []]
        self.changed_orders = {int(action["arguments"]["order_id"]) for action in gold}
        await _maybe_await(self.customer.reset(row, seed=seed))

    @tool
    def find_orders(self, email: str) -> str:
        """List a customer's orders (id, item, status).

        Args:
            email: the customer's email address
        """
        customer = self._db.execute("SELECT id, name FROM customers WHERE email = ?", (email.strip().lower(),)).fetchone()
        if customer is None:
            return f"Error: no customer with email {email!r}"
        rows = self._db.execute("SELECT id, item, status FROM orders WHERE customer_id = ? ORDER BY id", (customer[0],))
        return f"{customer[1]}: " + "; ".join(f"#{i} {item} ({status})" for i, item, status in rows)

    @tool
    def get_order(self, order_id: int) -> str:
        """Show one order: item, status and shipping address.

        Args:
            order_id: the order number
        """
        row = self._order(order_id)
        return f"Error: no order #{order_id}" if row is None else f"#{order_id} {row[0]} ({row[1]}), ship to {row[2]}"

    @tool
    def cancel_order(self, order_id: int) -> str:
        """Cancel a pending order.

        Args:
            order_id: the order number
        """
        return self._change(order_id, "cancel", "UPDATE orders SET status = 'cancelled' WHERE id = ?", (order_id,))

    @tool
    def change_address(self, order_id: int, address: str) -> str:
        """Change the shipping address of a pending order.

        Args:
            order_id: the order number
            address: the new address
        """
        return self._change(order_id, "re-address", "UPDATE orders SET address = ? WHERE id = ?", (address.strip(), order_id))

    async def respond(self, turn: Turn) -> Response | None:
        self.told.append(turn.text if turn.answer is None else turn.answer)
        return await _maybe_await(self.customer.respond(turn))

    def reward(self) -> float:
        return float(self.goal_reached() and not self.untold() and not self.forbidden())

    def goal_reached(self) -> bool:
        """The database check: the orders equal the goal state."""
        return self.db is not None and orders_digest(self.db) == self.goal

    def untold(self) -> list[str]:
        """The facts the customer had to hear and did not ("refusal" for a refusal never said)."""
        said = " ".join(self.told)
        missing = [fact for fact in self.must_tell if not _mentions(said, fact)]
        refused = not self.changed_orders
        return [*missing, "refusal"] if refused and not REFUSAL.search(said) else missing

    def forbidden(self) -> list[str]:
        """The writes attempted on orders the task does not change."""
        return [f"{verb} #{order}" for verb, order in self.attempts if order not in self.changed_orders]

    def state(self) -> dict[str, Any]:
        return {
            "actions": list(self.actions), "goal_reached": self.goal_reached(),
            "untold": self.untold(), "forbidden": self.forbidden(),
        }

    async def close(self) -> None:
        try:
            await _maybe_await(self.customer.close())
        finally:
            self._close_database()

    def _close_database(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def _open(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="shop-episode-"))
        self.db = episode_database(self.folder, self.seed)

    @property
    def _db(self) -> sqlite3.Connection:
        if self.db is None:
            raise RuntimeError("the shop database is not open: reset() makes it")
        return self.db

    def _order(self, order_id: int) -> tuple | None:
        return self._db.execute("SELECT item, status, address FROM orders WHERE id = ?", (int(order_id),)).fetchone()

    def _change(self, order_id: int, verb: str, sql: str, parameters: tuple) -> str:
        self.attempts.append((verb, int(order_id)))
        row = self._order(order_id)
        if row is None:
            return f"Error: no order #{order_id}"
        if row[1] != "pending":
            return f"Error: order #{order_id} is {row[1]}; only pending orders can be changed"
        self._db.execute(sql, parameters)
        self._db.commit()
        self.actions.append(f"{verb} #{order_id}")
        return f"Done: order #{order_id} " + ("cancelled" if verb == "cancel" else f"now ships to {parameters[0]}")


def goal_state(seed: int, gold_actions: Sequence[dict[str, Any]]) -> tuple[tuple, ...]:
    """The orders table after the task's gold actions, replayed on a fresh copy of the shop."""
    replay = Shop(None, seed)
    replay._open()
    try:
        tools = bound_tools(replay)
        for action in gold_actions:
            tools[action["name"]](**action["arguments"])
        return orders_digest(replay._db)
    finally:
        replay._close_database()


def _mentions(said: str, fact: str) -> bool:
    """Whether `said` states `fact`: a number as a whole number (#1004, 1004), words case-blind.

    >>> _mentions("Order #1004 has shipped.", "1004"), _mentions("Order 10045", "1004"), _mentions("SHIPPED", "shipped")
    (True, False, True)
    """
    if fact.isdigit():
        return re.search(rf"(?<!\d){fact}(?!\d)", said) is not None
    return fact.lower() in said.lower()


async def _maybe_await(value: Any) -> Any:
    """A user's methods may be sync or async (rf.UserSimulator's respond is async)."""
    return await value if inspect.isawaitable(value) else value
