"""rlfactory-nb: Jupyter-first RL post-training (GRPO) of tool-using LLM agents.

A user gives a tool config (MCP servers or Python functions) and a reward function; everything else
is here, inspectable from a notebook:

    import rlfactory_nb as rf
    tools = rf.ToolSet.from_config("examples/calculator/tools.yaml"); await tools.start()
    policy = rf.Policy.load("tiny-calculator")
    agent = rf.Agent(policy, tools, parser="qwen3", max_turns=4, max_new_tokens=256)
    traj = await agent.rollout([{"role": "user", "content": "What is 123*456?"}])

The names below are the public API; notebooks import nothing else.
"""

import importlib
from typing import Any

__version__ = "0.1.0"

# Public name -> the module that defines it. Imported on first use: `import rlfactory_nb` stays
# cheap, which matters for every tool server started as `python -m rlfactory_nb.tools.servers.X`
# (importing torch and transformers up front cost each one ~10 s here).
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(["parsing", "rewards"], ""),
    **dict.fromkeys(
        ["group_advantages", "register_loss", "turn_advantages", "zero_variance_groups"], "algo"
    ),
    **dict.fromkeys(
        ["ClusterConfig", "ConfigError", "DataConfig", "GRPOConfig", "LoraConfig", "ModelConfig",
         "RewardConfig", "RolloutConfig", "RunConfig", "ToolsConfig"],
        "config",
    ),
    **dict.fromkeys(["Generation", "SamplingParams", "create_engine"], "engines"),
    **dict.fromkeys(["ParseResult", "get_parser"], "parsing"),
    "Policy": "models.policy",
    "export": "models.export",
    **dict.fromkeys(["LLMJudge", "RewardOutcome", "RewardRunner", "group_reward", "load_reward"], "rewards"),
    **dict.fromkeys(["Agent", "AgentSession"], "rollout.agent"),
    "format_trajectory": "rollout.display",
    "rollout_groups": "rollout.groups",
    **dict.fromkeys(["ToolCache", "ToolSet", "tool"], "tools"),
    "build_tools": "runtime",
    # `train` itself is not exported: it would shadow the `rlfactory_nb.train` subpackage
    **dict.fromkeys(["train_sync", "Trainer", "TrainResult"], "train.loop"),
    **dict.fromkeys(["load_latest", "CheckpointError"], "models.checkpoint"),
    "read_metrics": "train.metrics",
    "Cluster": "cluster.ray_cluster",
    **dict.fromkeys(["launch", "TrainingJob", "JobFailed"], "cluster.jobs"),
    "RolloutStepper": "widgets.stepper",
    "TrajectoryView": "widgets.trajectory",
    "ToolSetView": "widgets.tools",
    "RewardLab": "rewards.lab",
    "TrainingDashboard": "widgets.dashboard",
    "ClusterView": "widgets.cluster",
    **dict.fromkeys(["evaluate", "evaluate_sync", "EvalReport"], "eval"),
    **dict.fromkeys(["example", "Example"], "examples"),
    "run_notebooks": "notebooks_run",
    **dict.fromkeys(
        ["Message", "ParseError", "Sample", "ToolCall", "ToolResult", "ToolSpec", "Trajectory", "Turn",
         "load_jsonl", "save_jsonl"],
        "types",
    ),
}

__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - the lazy table is the single list of public names


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rlfactory_nb' has no attribute {name!r}")
    module = _EXPORTS[name]
    if not module:  # a subpackage exported as itself
        return importlib.import_module(f"rlfactory_nb.{name}")
    value = getattr(importlib.import_module(f"rlfactory_nb.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
