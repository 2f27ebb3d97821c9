"""Write the shop's tasks (data/train.jsonl, data/heldout.jsonl) from the seed database.

    python -m rlfactory_nb.recipes.shop.build_data

Each row is one customer with one request: cancel a pending order, send a pending order to a new
address, or cancel an order that has already shipped (which the agent must refuse: its goal state is
the untouched database, and the customer must be told why). The row carries the opening messages, the
customer's instructions and scripted replies (`instructions`, read by rf.UserSimulator, and
`user_replies`), the gold actions that define the goal state (`gold_actions`), and, as in
tau2-bench, the facts the agent must tell the customer (`communicate_info`: for a refused request,
the order's number and status).
Customers are split between train and held-out, so held-out tasks concern customers never trained on.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

from rlfactory_nb.recipes.shop.world import SEED, address, template

SYSTEM = (
    "You are a shop support agent. Use the tools to look up and change orders. "
    "Only pending orders can be cancelled or re-addressed. When a request cannot be done, tell the "
    "customer the order number, its status and that it cannot be changed."
)
THANKS = "Thanks, that is all. ###STOP###"
DATA = Path(__file__).resolve().parents[3] / "examples" / "shop" / "data"
"""where the tasks are written: the runnable example's folder in this checkout"""
HELDOUT_EVERY = 5
"""every fifth customer is held out"""


def tasks(seed: int = SEED) -> tuple[list[dict], list[dict]]:
    rng = random.Random(f"shop-tasks:{seed}")
    db = template(seed)
    train, heldout = [], []
    for customer_id, name, email in db.execute("SELECT id, name, email FROM customers ORDER BY id").fetchall():
        orders = db.execute("SELECT id, item, status FROM orders WHERE customer_id = ?", (customer_id,)).fetchall()
        counts = Counter(item for _, item, _ in orders)
        for order_id, item, status in orders:
            if counts[item] > 1:
                continue  # "my kettle order" must name one order
            row = task(rng, name, email, order_id, item, status)
            (heldout if customer_id % HELDOUT_EVERY == 0 else train).append(row)
    return train, heldout


def task(rng: random.Random, name: str, email: str, order_id: int, item: str, status: str) -> dict:
    if status == "pending" and rng.random() < 0.5:
        new_address = address(rng)
        kind, ask = "re-address", f"please send my {item} order to {new_address}"
        gold = [{"name": "change_address", "arguments": {"order_id": order_id, "address": new_address}}]
        goal = f"the {item} order (#{order_id}) ships to {new_address}"
    else:
        kind, ask = "cancel", f"please cancel my {item} order"
        feasible = status == "pending"
        gold = [{"name": "cancel_order", "arguments": {"order_id": order_id}}] if feasible else []
        goal = f"the {item} order (#{order_id}) is cancelled" if feasible else "nothing changes: the order has shipped"
    tell = [] if gold else [str(order_id), status]
    opening = f"Hi, I am {email}; {ask}."
    return {
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": opening}],
        "task": kind,
        "gold_actions": gold,
        "communicate_info": tell,
        "ground_truth": goal,
        "instructions": (
            f"You are {name} ({email}), a shop customer. Your request: {ask}. Answer the agent's "
            f"questions briefly and confirm when asked. When the request is done or refused, thank "
            f"the agent and end with ###STOP###."
        ),
        "user_replies": ["Yes, please go ahead.", THANKS],
    }


def main() -> None:
    folder = DATA
    folder.mkdir(exist_ok=True)
    for split, rows in zip(("train", "heldout"), tasks(), strict=True):
        path = folder / f"{split}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        print(f"{path}: {len(rows)} tasks, {Counter(r['task'] for r in rows)}")


if __name__ == "__main__":
    main()
