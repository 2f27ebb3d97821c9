"""The `sft:` section of a run config: supervised fine-tuning on trajectories, and rejection sampling.

SFT trains with GRPO's machinery (`rlfactory_nb.train.sft`): the same rows, batch builder, update,
packing, chunked log-probs, LoRA, float32 master weights, checkpoints and run folder. So the knobs
that shape an update (`grpo.micro_batch_size`, `grpo.padding_free`, `grpo.max_tokens_per_micro_batch`,
`grpo.logprob_chunk_tokens`, `grpo.max_grad_norm`, `grpo.weight_decay`, `grpo.keep_last`) are read
from `grpo:` as they are; this section holds what differs: the data, the rate, the steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from rlfactory_nb.config_schema import NonEmptyStr, NonNegativeInt, PositiveFloat, PositiveInt, Range

NO_SFT_DATA = (
    "sft.data: nothing to fine-tune on: set sft.data (a run folder, a JSONL file of trajectories or "
    "conversations) or pass train_data=... to launch"
)
"""what a cluster SFT job without data says, in the kernel (cluster/job_kinds.py) or its driver"""


@dataclass(frozen=True)
class SFTConfig:
    data: NonEmptyStr | None = None
    """what to train on when no data comes from the kernel: a run folder (its saved trajectories), a
    JSONL file of trajectories, or a JSONL/JSON/parquet file of conversations (`messages` in the
    OpenAI chat format, with assistant `tool_calls` and `tool` results, and a `tools` column)"""
    min_reward: Annotated[float, Range()] | None = None
    """keep only trajectories (and conversation rows with a `reward` column) scoring at least this;
    None: keep all. A trajectory's score is its `metadata["reward"]` (a run folder saves it)"""
    steps: PositiveInt = 50
    """optimizer steps, each on `batch_size` rows (the data is reshuffled each pass over it); with
    rejection sampling, steps per round"""
    batch_size: PositiveInt = 16
    """rows per optimizer step (accumulated over grpo.micro_batch_size rows or the token budget)"""
    lr: PositiveFloat = 1e-4
    """AdamW learning rate (the peak, with a schedule)"""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """the rate after warmup, over `steps` (see `rlfactory_nb.train.schedule`)"""
    warmup_steps: NonNegativeInt = 0
    """steps over which the rate rises linearly to `lr`"""
    checkpoint_every: NonNegativeInt = 0
    """steps between checkpoints (0: only at the end)"""
    seed: Annotated[int, Range(ge=0, lt=2**32)] = 0
    """seed of the data order and of rejection sampling's prompts and samples"""
    rounds: PositiveInt = 1
    """rejection sampling (`rf.rejection_sampling`): rounds of sample -> keep -> fine-tune"""
    samples_per_prompt: PositiveInt = 8
    """rejection sampling: samples drawn per prompt with the current policy (k)"""
    prompts_per_round: PositiveInt = 32
    """rejection sampling: prompts drawn from data.train per round"""

    def field_problems(self) -> list[tuple[str, str]]:
        """Rules across fields (the builder reports them like a range): (field, problem and fix)."""
        if self.warmup_steps > self.steps:
            return [("warmup_steps", f"{self.warmup_steps} is more than sft.steps ({self.steps}): lower it")]
        return []
