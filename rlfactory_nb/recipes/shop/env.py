"""A retail support task in the style of tau2-bench: the agent serves a customer over a shop database.

Each episode gets its own SQLite copy of the shop (world.py). The agent reads and changes orders with
four tools bound to the episode; a customer (a simulated user whose goal comes from the row) answers
whenever the agent replies without a tool call; the reward compares the database the agent left with
the goal state, made by replaying the task's gold actions on a second fresh copy (as tau2-bench
does). Shop policy lives in the tools: only pending orders may be cancelled or re-addressed, so some
requests must be refused, and then the goal state is the untouched database.

    env = shop_env()                        # the customer replays the row's scripted replies
    env = shop_env(user=rf.UserSimulator(engine=...))   # or any simulated user (see `Customer`)
    agent = rf.Agent(policy, env=env)
"""

from __future__ import annotations

import functools
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from rlfactory_nb.envs.base import Environment, Response, bound_tools
from rlfactory_nb.recipes.shop.world import SEED, episode_database, orders_digest
from rlfactory_nb.tools.python import tool
from rlfactory_nb.types import Message, Turn

STOP = "###STOP###"
"""what a customer writes when the conversation is over (tau2-bench's marker)"""


class Customer(Protocol):
    """Who answers the agent: `reply(row, conversation) -> Response` (done when the customer stops)."""

    def reply(self, row: dict[str, Any], conversation: Sequence[Message]) -> Response: ...


class ScriptedCustomer:
    """The customer of tests and of `make demo`: says the row's `user.replies` in order, then stops."""

    def reply(self, row: dict[str, Any], conversation: Sequence[Message]) -> Response:
        replies = list((row.get("user") or {}).get("replies") or [STOP])
        said = sum(1 for m in conversation if m["role"] == "user") - 1  # the opening request is the row's
        text = replies[min(max(said, 0), len(replies) - 1)]
        done = STOP in text
        content = text.replace(STOP, "").strip()
        return Response([{"role": "user", "content": content}] if content else [], done=done, speaker="user")


def shop_env(user: Customer | Callable[[], Customer] | None = None, seed: int = SEED) -> Callable[[], Shop]:
    """A factory of Shop episodes answered by `user` (default: the row's scripted replies)."""
    return functools.partial(Shop, user, seed)


class Shop(Environment):
    """One customer conversation over the episode's own copy of the shop database."""

    def __init__(self, user: Customer | Callable[[], Customer] | None = None, seed: int = SEED):
        self.customer = _customer(user)
        self.seed = seed
        self.folder: Path | None = None
        self.db: sqlite3.Connection | None = None
        self.goal: tuple[tuple, ...] = ()
        self.row: dict[str, Any] = {}
        self.conversation: list[Message] = []
        self.actions: list[str] = []

    def reset(self, row: dict[str, Any], *, seed: int) -> None:
        self.row = row
        self.conversation = [dict(m) for m in row.get("messages", [])]  # type: ignore[misc]
        self._open()
        self.goal = goal_state(self.seed, row.get("gold_actions") or [])

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

    def respond(self, turn: Turn) -> Response:
        self.conversation.append({"role": "assistant", "content": turn.answer if turn.answer is not None else turn.text})
        response = self.customer.reply(self.row, self.conversation)
        self.conversation.extend(response.messages)
        return response

    def reward(self) -> float:
        return float(self.db is not None and orders_digest(self.db) == self.goal)

    def state(self) -> dict[str, Any]:
        return {"actions": list(self.actions), "goal_reached": bool(self.reward())}

    def close(self) -> None:
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
    replay = Shop(ScriptedCustomer(), seed)
    replay._open()
    try:
        tools = bound_tools(replay)
        for action in gold_actions:
            tools[action["name"]](**action["arguments"])
        return orders_digest(replay._db)
    finally:
        replay.close()


def _customer(user: Customer | Callable[[], Customer] | None) -> Customer:
    if user is None:
        return ScriptedCustomer()
    if isinstance(user, type) or not hasattr(user, "reply"):
        return user()  # type: ignore[operator]  # a class or factory: one customer per episode
    return user  # type: ignore[return-value]
