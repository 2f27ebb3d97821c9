"""rlfactory-nb: Jupyter-first RL post-training (GRPO) of tool-using LLM agents.

A user gives a tool config (MCP servers or Python functions) and a reward function; everything else
is here, inspectable from a notebook:

    import rlfactory_nb as rf
    tools = rf.ToolSet.from_config("examples/calculator/tools.yaml"); await tools.start()
    policy = rf.Policy.load("tiny-calculator")
    agent = rf.Agent(policy, tools, parser="qwen3", max_turns=4, max_new_tokens=256)
    traj = await agent.rollout([{"role": "user", "content": "What is 123*456?"}])

The names below are the public API; notebooks import nothing else. The parts a user reaches for
less often live one level down: `rf.algo` (advantages, losses), `rf.engines` (SamplingParams,
create_engine), `rf.chat` (model families: chat formats and tool-call parsers), `rf.rewards` (built-in rewards, the runner, judges),
`rf.tools` (ToolCache, MCP connections) and `rf.errors` (the whole exception tree).
"""

import importlib
from typing import Any

__version__ = "0.1.0"

# Public name -> the module that defines it. Imported on first use: `import rlfactory_nb` stays
# cheap, which matters for every tool server started as `python -m rlfactory_nb.tools.servers.X`
# (importing torch and transformers up front cost each one ~10 s here).
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(["algo", "engines", "chat", "errors", "rewards", "tools"], ""),
    # the errors a user meets most; the rest of the tree is rf.errors.X
    **dict.fromkeys(
        ["RLFactoryError", "CheckpointError", "ConfigError", "DriftError", "EngineActorDied", "JobFailed",
         "JudgeError", "RewardError", "StepFailed"],
        "errors",
    ),
    "RunConfig": "config",
    **dict.fromkeys(["Sample", "ToolResult", "Trajectory"], "types"),
    "tool": "tools.python",
    "ToolSet": "tools.toolset",
    **dict.fromkeys(["model_tool", "agent_tool"], "tools.delegate"),
    "Policy": "models.policy",
    "export": "models.export",
    "LLMJudge": "rewards.judge",
    "RewardLab": "reward_lab",
    "Agent": "rollout.agent",
    "AgentProgram": "programs.program",
    **dict.fromkeys(["Environment", "UserSimulator"], "envs"),
    "format_trajectory": "rollout.display",
    "build_tools": "runtime",
    # `train` itself is not exported: it would shadow the `rlfactory_nb.train` subpackage
    "train_sync": "train.loop",
    **dict.fromkeys(["sft", "sft_sync", "rejection_sampling", "rejection_sampling_sync"], "train.sft"),
    **dict.fromkeys(["evaluate", "evaluate_sync", "EvalReport"], "eval"),
    **dict.fromkeys(["compare_policies", "compare_policies_sync"], "compare"),
    "example": "examples",
    "Cluster": "cluster.ray_cluster",
    "launch": "cluster.launcher",
    "TrainingJob": "cluster.jobs",
    "RolloutStepper": "widgets.stepper",
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
