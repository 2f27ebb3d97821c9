"""Shop: a retail support task in the style of tau2-bench, with state and a simulated customer.

- `world`: the shop database (customers, orders) generated from a seed; one SQLite copy per episode;
- `env`: the `Shop` environment (tools that read and change orders under the shop's policy, a
  customer who answers from the row, a reward with tau2-bench's checks: the final database against
  the goal state, the facts the customer must be told, no forbidden writes);
- `build_data`: the tasks of examples/shop/data/*.jsonl, written from the seed.

The runnable example is `examples/shop/` (config and data).
"""
