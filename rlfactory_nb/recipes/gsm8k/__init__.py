"""GSM8K: grade-school math word problems, solved with the calculator tool, scored by the `#### n`
answer (`rf.rewards.gsm8k`).

- `synthetic`: GSM8K-style problems from templates, seeded, with solutions in GSM8K's own format,
  so the example runs offline (`synthetic:gsm8k`, `synthetic:gsm8k-heldout`);
- `convert`: the real GSM8K (its JSONL or a `save_to_disk` folder, `question`/`answer` columns) to
  the verl layout that training reads; verl's own GSM8K parquet trains as it is.

The runnable example is `examples/gsm8k/`.
"""
