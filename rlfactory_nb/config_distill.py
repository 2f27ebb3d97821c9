"""The `distill:` section of a run config: on-policy distillation from a teacher model.

With it, a teacher engine starts with the run (in the trainer's process on the local backend, as an
engine actor of its own on Ray, like `reward.judge`), scores the token ids the student sampled, and
the per-token reverse KL becomes (part of) the advantage: `rlfactory_nb.algo.distill` for the math,
`rlfactory_nb.train.distill` for the step. Without the section (None) a run is plain GRPO.

    distill:
      teacher: tiny-guess        # a preset, a local Hugging Face folder, a hub id, or engine:NAME
      coef: 1.0
      only: true                 # the KL alone; the reward is computed and logged, not trained on
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlfactory_nb.config_schema import NonEmptyStr, NonNegativeFloat, PositiveFloat, PositiveInt

RUNNING_ENGINE = "engine:"
"""`distill.teacher: engine:NAME` names a running engine actor instead of a model"""


@dataclass(frozen=True)
class DistillConfig:
    teacher: NonEmptyStr
    """the teacher model: a preset ("tiny-calculator"), a local Hugging Face folder (on Ray every node
    must read it), a hub id, or `engine:NAME`, an engine actor already running on the cluster
    (`cluster.engine(model, label=...)`, named as `cluster.engines()` lists it; Ray backend only), which
    the run uses and leaves running. Its tokenizer must be the student's (same vocabulary and ids): it
    scores the student's own token ids, never re-rendered text (docs/decisions.md)"""
    coef: PositiveFloat = 1.0
    """weight of the reverse KL: a sampled token's advantage gets -coef * (student - teacher log-prob)"""
    only: bool = False
    """true: the advantage is the KL term alone (the reward is still computed and logged, e.g.
    reward/mean, but trains nothing; set grpo.filter_zero_variance: false, or groups with equal rewards
    are dropped before the teacher sees them); false: the KL term is added to the group-relative
    advantage of the reward"""
    engine: NonEmptyStr = "hf"
    """the teacher's engine kind ("hf", "vllm", or a registered one); it only scores, never samples"""
    num_gpus: NonNegativeFloat = 0.0
    """GPUs the teacher's engine actor reserves (on Ray)"""
    num_cpus: PositiveFloat = 1.0
    """CPUs the teacher's engine actor reserves (on Ray)"""
    engine_args: dict[str, Any] = field(default_factory=dict)
    """extra engine arguments, passed unchanged (e.g. gpu_memory_utilization: 0.5)"""
    max_concurrency: PositiveInt = 32
    """training rows the teacher scores at once (the engine batches or queues them)"""


def distill_problems(cfg: Any) -> list[str]:
    """What in `cfg` contradicts its `distill:` section (`rlfactory_nb.runtime.check_names` reports
    it before any work)."""
    if cfg.distill is not None and cfg.distill.only and cfg.grpo.filter_zero_variance:
        fix = "set grpo.filter_zero_variance: false (and grpo.dynamic_sampling: null)"
        problem = (
            "distill.only: the run trains on the teacher's KL alone, but grpo.filter_zero_variance drops every "
            f"group whose rewards are equal before the teacher sees it: {fix}"
        )
        return [problem]
    return []
