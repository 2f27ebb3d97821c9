"""The Policy: the model a run trains, its tokenizer, and the folder both load from.

`Policy.load` takes an embedded preset name ("tiny-calculator"), a local Hugging Face folder, a hub
id (on a machine that can reach the hub or has it cached), or a LoRA checkpoint (an adapter folder,
loaded over the base it names and merged). Rollout engines are created over the same weights with
`policy.engine("hf" | "vllm")`; `engine_source` is the one place a policy, a preset name or a
checkpoint becomes what an engine is made from (`rlfactory_nb.engines.build`).

A model folder is data, not code: every folder is opened with `trust_remote_code=False` (through
`from_folder`), so a config.json whose `auto_map` names Python files in the folder never reaches
transformers' "run the custom code? [y/N]" prompt, which would run them, or wait on stdin in a job.
A folder that needs its own code fails at once, naming `model.trust_remote_code`.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from rlfactory_nb.engines.base import Engine, engine_traits
from rlfactory_nb.engines.build import (
    EngineSource,
    Folder,
    InMemory,
    Snapshot,
    build_engine,
    cpu_state,
    dtype_name,
)
from rlfactory_nb.engines.hf import quiet_if_small
from rlfactory_nb.errors import ModelFilesError, RemoteCodeError
from rlfactory_nb.models import lora, presets
from rlfactory_nb.models.checkpoint import CheckpointError, verify_digests
from rlfactory_nb.models.files import model_folder
from rlfactory_nb.models.merged import write_plain
from rlfactory_nb.models.precision import resolve_dtype

MAX_ADAPTER_DEPTH = 4
"""adapters over adapters a LoRA checkpoint may stack before its base (a loop would never end)"""


def from_folder(loader: Any, path: str | Path, trust_remote_code: bool = False, **options: Any) -> Any:
    """`loader.from_pretrained(path)` (a transformers Auto class) with remote code off unless asked:
    the one way rlfactory-nb opens a model or tokenizer folder (module docstring)."""
    try:
        with quiet_if_small(path):  # no weight-loading bar for a small folder (engines/hf.py)
            return loader.from_pretrained(str(path), trust_remote_code=trust_remote_code, **options)
    except ValueError as error:
        if trust_remote_code or "trust_remote_code" not in str(error):
            raise
        raise RemoteCodeError(
            f"{path} needs Python code of its own to load (its config's auto_map names files in it), and "
            "running it would run that code as you. Set model.trust_remote_code: true (Policy.load(..., "
            "trust_remote_code=True)) only for a folder whose code you have read"
        ) from error


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


@dataclass
class Policy:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    path: Path
    """a Hugging Face folder (or hub id) holding the weights the engines start from"""
    name: str = ""
    base_path: Path | None = None
    """for a LoRA checkpoint: the folder of the base model its adapter applies to"""

    @classmethod
    def load(
        cls,
        name_or_path: str | Path = "tiny-calculator",
        device: str = "auto",
        dtype: str = "auto",
        log: Callable[[str], None] = print,
        trainable_adapter: bool = False,
        trust_remote_code: bool = False,
    ) -> Policy:
        """Load a preset (built offline on first use), a local folder, a hub id, or a LoRA checkpoint:
        merged into plain weights, or with `trainable_adapter` kept as adapters to train on (resume).
        `trust_remote_code`: let a folder run its own Python (module docstring; model.trust_remote_code)."""
        return cls._load(str(name_or_path), device, dtype, log, trainable_adapter, trust_remote_code, depth=0)

    @classmethod
    def _load(
        cls, name: str, device: str, dtype: str, log: Callable[[str], None], trainable: bool, trust: bool, depth: int
    ) -> Policy:
        path = Path(model_folder(name, log=log))
        verify_digests(path)  # a checkpoint folder: refuse files changed or added since it was written
        if lora.is_adapter_folder(path):
            if depth >= MAX_ADAPTER_DEPTH:
                raise CheckpointError(
                    f"{path} is an adapter over {MAX_ADAPTER_DEPTH} adapters already: its chain of bases "
                    f"(adapter_config.json's base_model_name_or_path) is longer than {MAX_ADAPTER_DEPTH} or a "
                    "loop; point the base at a full model folder"
                )
            base = cls._load(lora.adapter_base(path), device, dtype, log, False, trust, depth + 1)
            model = lora.load_adapter(base.model, path, trainable=trainable).eval()
            own_tokenizer = (path / "tokenizer_config.json").exists()
            tokenizer = from_folder(AutoTokenizer, path, trust) if own_tokenizer else base.tokenizer
            return cls(model=model, tokenizer=tokenizer, path=path, name=str(path), base_path=base.path)
        target = resolve_device(device)
        try:
            tokenizer = from_folder(AutoTokenizer, path, trust)
            model = from_folder(AutoModelForCausalLM, path, trust, dtype=resolve_dtype(dtype, target))
        except OSError as error:
            raise ModelFilesError(
                f"cannot load model {name!r}: not an embedded preset ({', '.join(presets.PRESETS)}), "
                f"not a local Hugging Face folder, and not loadable from the hub here ({error})"
            ) from error
        model.to(target).eval()
        return cls(model=model, tokenizer=tokenizer, path=path, name=name)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def engine(self, kind: str = "hf", **options: Any) -> Engine:
        """A rollout engine over this policy's weights: "hf" shares the live model, "vllm" loads
        `self.path` and receives weight updates from the trainer."""
        return build_engine(kind, engine_source(self, kind).source, **options)

    def __repr__(self) -> str:
        return f"Policy({self.name!r}, {self.num_parameters / 1e6:.2f}M params, path={str(self.path)!r})"


def _merged_folder(adapter: Path) -> Path:
    """Where a LoRA checkpoint's merged weights are written for engines that load a folder."""
    import hashlib
    import tempfile

    key = hashlib.sha256(str(adapter.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "rlfactory-nb-merged" / key


@dataclass(frozen=True)
class ResolvedSource:
    """What an engine is made from, resolved here: the source, the tokenizer this process keeps
    (token ids travel, text does not), and the weights to send beside the source (None: none)."""

    source: EngineSource
    tokenizer: Any
    weights: dict[str, torch.Tensor] | None = None


def engine_source(model: Policy | str | Path, kind: str, shipped: bool = False) -> ResolvedSource:
    """What an engine of `kind` serving `model` (a Policy, a preset name, a folder, a checkpoint or
    a hub id) is made from.

    In this process: a policy's model itself for an engine that takes objects, else its folder (a
    LoRA policy's merged weights written to one first). `shipped` to an engine actor: a policy as a
    Snapshot with its weights on CPU (a folder engine given a LoRA policy loads the base and takes
    the merged weights by sync); a name that is no adapter as a Folder, resolved again on the actor's
    node, with its tokenizer loaded here. An adapter name is loaded (merged) here first."""
    loads = engine_traits(kind).loads  # an unknown kind fails here, naming the kinds there are
    if not isinstance(model, Policy):
        path = Path(model_folder(str(model), log=lambda _: None))
        if shipped and not lora.is_adapter_folder(path):
            return ResolvedSource(Folder(str(model)), from_folder(AutoTokenizer, path))
        model = Policy.load(path, device="cpu", log=lambda _: None)  # an adapter: merged here
    if shipped:
        dtype = dtype_name(next(model.model.parameters()).dtype)
        snapshot = Snapshot(model.model.config, model.tokenizer, dtype, str(model.base_path or model.path))
        sends_weights = loads == "objects" or model.base_path is not None
        return ResolvedSource(snapshot, model.tokenizer, cpu_state(model.model) if sends_weights else None)
    if loads == "objects":
        return ResolvedSource(InMemory(model.model, model.tokenizer), model.tokenizer)
    if model.base_path is not None:  # an adapter folder: engines that load a folder need it merged
        folder = _merged_folder(model.path)
        shutil.rmtree(folder, ignore_errors=True)  # a write of an earlier process: replaced whole
        write_plain(model.model, model.tokenizer, folder, torch.bfloat16)
        return ResolvedSource(Folder(str(folder)), model.tokenizer)
    return ResolvedSource(Folder(str(model.path)), model.tokenizer)
