"""Task recipes: the prompt, reward and data formats of a published training task.

A recipe lives in the installed package, not in `examples/`, because run configs name its reward
function by module path (`rlfactory_nb.recipes.deepsearch.reward:training_reward`) and that path must
import from wherever the code runs: a notebook kernel in notebooks/, a Ray job's working folder, or
the CLI. `examples/<name>/` keeps only what a user edits: configs, tools file, data.
"""
