"""Embedded presets: models that need no download, shipped built with the package.

`tiny-calculator` is a Qwen3-architecture model of about 1M parameters with a Qwen3-format tokenizer,
warm-started on synthetic calculator conversations, in Hugging Face format, so
`AutoModelForCausalLM.from_pretrained(path)` and vLLM load it. The build is deterministic and takes
about 300 s on 2 cores, so the package ships its result (`presets/built/`, see `shipped.py`) and
`preset_path` returns that folder at once while its recipe hash equals the code's. After a recipe
change the preset is built on first use and cached under `$RLFACTORY_NB_CACHE` (default
`~/.cache/rlfactory_nb`) in a folder named after the recipe hash, until
`rlfactory-nb preset build tiny-calculator --ship` rebuilds the shipped copy. tiny-guess and
tiny-calculator-weak (the same build stopped early, a weak student for distillation) are shipped the
same way.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import json
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from rlfactory_nb.errors import RegistryKeyError
from rlfactory_nb.models.node import ModelFilesError, forbid_preset_builds, node_name
from rlfactory_nb.models.presets import calculator
from rlfactory_nb.models.presets.shipped import ship, shipped_folder, unusable_because
from rlfactory_nb.models.presets.tokenizer import VOCAB_SIZE, build_tokenizer, chat_template
from rlfactory_nb.models.presets.warmstart import WarmStartConfig, save_build, warm_start
from rlfactory_nb.node_cache import package_cache

PRESETS = ("tiny-calculator", "tiny-guess", "tiny-calculator-weak")
"""tiny-guess is tiny-calculator warm-started on the guessing game (recipes/guess/preset.py);
tiny-calculator-weak is tiny-calculator's own warm-start stopped early (`WEAK_STEPS`)"""
WEAK = "tiny-calculator-weak"
WEAK_STEPS = 550
"""the weak preset: tiny-calculator's build stopped at this step, before its copy gate passed (at
step 900). bench/distill.py's student: it calls the tool and copies some digits, so GRPO gets a
reward, but far from the teacher's (see the docstring of bench/distill.py for its measured figures)"""
RECIPE_PRESETS = {"tiny-guess": "rlfactory_nb.recipes.guess.preset"}
"""presets warm-started on a recipe's task, each built by a module of its recipe (its `recipe()` and
`build(path, start, log)`); imported by name, as `_views` reaches the widgets, since models/ sits
below recipes/"""
RECIPE_VERSION = 4  # bump when the recipe changes in code (data, curriculum), not only in config


def cache_dir() -> Path:
    """The package cache (`rlfactory_nb.node_cache.package_cache`: `$RLFACTORY_NB_CACHE` first)."""
    return package_cache()


def tiny_config() -> Qwen3Config:
    """Hidden 128, 4 layers, 4 query / 2 KV heads, tied embeddings: ~1.3M parameters."""
    return Qwen3Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=1024,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        rms_norm_eps=1e-6,
        bos_token_id=None,
        eos_token_id=VOCAB_SIZE - 24,  # <|im_end|>
        pad_token_id=VOCAB_SIZE - 26,  # <|endoftext|>
    )


DEFAULT_WARM_START = WarmStartConfig()


def recipe_hash(warm: WarmStartConfig = DEFAULT_WARM_START) -> str:
    recipe = {
        "version": RECIPE_VERSION,
        "model": tiny_config().to_dict(),
        "warm_start": dataclasses.asdict(warm),
        "tool": calculator.CALCULATOR_TOOL,
        "template": chat_template(),
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True, default=str).encode()).hexdigest()[:12]


def preset_hash(name: str) -> str:
    """The recipe hash preset `name` is built from: tiny-guess's covers the tiny-calculator weights it
    starts from and its own game and warm-start."""
    if name in RECIPE_PRESETS:
        recipe = {"from": recipe_hash(), "guess": _recipe_preset(name).recipe()}  # "guess": the key the shipped hash used
    elif name == WEAK:
        recipe = {"from": recipe_hash(), "stop_at": WEAK_STEPS}
    else:
        return recipe_hash()
    return hashlib.sha256(json.dumps(recipe, sort_keys=True, default=str).encode()).hexdigest()[:12]


def preset_path(name: str, log: Callable[[str], None] = print) -> Path:
    """The folder of preset `name`: the shipped one when it matches the recipe, else the cached build
    (built first if missing). Treat the folder as read-only: copy it before writing into it."""
    _check_name(name)
    folder = shipped_folder(name)
    problem = unusable_because(folder, preset_hash(name))
    if problem is None:
        return folder
    cached = cache_dir() / f"{name}-{preset_hash(name)}"
    if forbid_preset_builds() and not (cached / "config.json").exists():
        raise ModelFilesError(
            f"the {name} preset shipped in the package at {folder} on node {node_name()} {problem}, and the "
            f"node's cache has no build of it ({cached}); a job's nodes never build a preset, so that they "
            "train the weights the kernel inspected: install the package whole on every node"
        )
    log(
        f"the shipped {name} preset {problem}; using the cache instead. "
        f"`rlfactory-nb preset build {name} --ship` rebuilds the shipped copy"
    )
    return cached_preset(name, log=log)


def cached_preset(name: str, log: Callable[[str], None] = print) -> Path:
    """The cache's build of preset `name` for the current recipe, building it first if missing."""
    _check_name(name)
    path = cache_dir() / f"{name}-{preset_hash(name)}"
    if (path / "config.json").exists():
        return path
    if name in RECIPE_PRESETS:
        return _recipe_preset(name).build(path, preset_path("tiny-calculator", log=log), log=log)
    if name == WEAK:
        return build_tiny_calculator(path, log=log, stop_at=WEAK_STEPS)
    return build_tiny_calculator(path, log=log)


def _recipe_preset(name: str):
    return importlib.import_module(RECIPE_PRESETS[name])


def _check_name(name: str) -> None:
    if name not in PRESETS:
        raise RegistryKeyError(f"unknown preset {name!r}; embedded presets: {', '.join(PRESETS)}")


def run_preset_command(args: argparse.Namespace) -> int:
    """`rlfactory-nb preset build NAME [--ship]`: build into the cache, then copy into the package."""
    path = cached_preset(args.name)
    if args.ship:
        path = ship(path, args.name, preset_hash(args.name), RECIPE_VERSION)
        print(f"shipped {args.name} (recipe {preset_hash(args.name)}); commit {path}")
    print(path)
    return 0


def build_tiny_calculator(
    path: Path, warm: WarmStartConfig = DEFAULT_WARM_START, log: Callable[[str], None] = print,
    stop_at: int | None = None,
) -> Path:
    """Build, warm-start and save the preset; written to a temp folder first so a crash leaves no
    half-built cache entry. `stop_at`: the weak preset, the same build stopped at that step."""
    name = "tiny-calculator" if stop_at is None else WEAK
    log(f"building {name} (once per recipe, about 2-5 min on 2 cores) into {path}")
    tokenizer = build_tokenizer()
    assert tokenizer.eos_token_id == tiny_config().eos_token_id
    torch.manual_seed(warm.seed)
    model = Qwen3ForCausalLM(tiny_config())
    metrics = warm_start(model, tokenizer, warm, log=log, stop_at=stop_at)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    save_build(path, model, tokenizer, metrics)
    log(f"{name} ready: {metrics}")
    return path

