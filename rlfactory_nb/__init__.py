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

from rlfactory_nb import parsing, rewards
from rlfactory_nb.algo import group_advantages, turn_advantages, zero_variance_groups
from rlfactory_nb.config import (
    ClusterConfig,
    ConfigError,
    DataConfig,
    GRPOConfig,
    ModelConfig,
    RewardConfig,
    RolloutConfig,
    RunConfig,
    ToolsConfig,
)
from rlfactory_nb.engines import Generation, SamplingParams, create_engine
from rlfactory_nb.parsing import ParseResult, get_parser
from rlfactory_nb.policy import Policy
from rlfactory_nb.rewards import LLMJudge, RewardOutcome, RewardRunner, load_reward
from rlfactory_nb.rollout.agent import Agent
from rlfactory_nb.rollout.display import format_trajectory
from rlfactory_nb.rollout.groups import rollout_groups
from rlfactory_nb.tools import ToolCache, ToolSet, tool
from rlfactory_nb.types import (
    Message,
    ParseError,
    Sample,
    ToolCall,
    ToolResult,
    ToolSpec,
    Trajectory,
    Turn,
    load_jsonl,
    save_jsonl,
)

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "ClusterConfig",
    "ConfigError",
    "DataConfig",
    "GRPOConfig",
    "LLMJudge",
    "Generation",
    "Message",
    "ModelConfig",
    "ParseError",
    "ParseResult",
    "Policy",
    "RewardConfig",
    "RewardOutcome",
    "RewardRunner",
    "RolloutConfig",
    "RunConfig",
    "Sample",
    "SamplingParams",
    "ToolCache",
    "ToolCall",
    "ToolResult",
    "ToolSet",
    "ToolSpec",
    "ToolsConfig",
    "Trajectory",
    "Turn",
    "create_engine",
    "format_trajectory",
    "get_parser",
    "group_advantages",
    "load_jsonl",
    "load_reward",
    "parsing",
    "rewards",
    "rollout_groups",
    "save_jsonl",
    "tool",
    "turn_advantages",
    "zero_variance_groups",
]
