"""Guess: a number-guessing game where the environment answers "higher" or "lower".

A stateful task small enough for the embedded tiny model to learn on 2 CPU cores: the secret lives in
the episode, the model answers with a number, the environment replies, and the reward is whether
(and how fast) the number was found. `env` holds the environment, `data` the rows of
examples/guess/data/*.jsonl. The same game is served as an OpenEnv MCP environment by
examples/guess/openenv_server.py.
"""
