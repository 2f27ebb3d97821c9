"""Rollout engines: one contract (base.py), a transformers engine (hf.py) and a vLLM engine (vllm.py).

Importing this package registers both kinds; vllm itself is imported only when a vLLM engine is made.
"""

from rlfactory_nb.engines.base import (
    BroadcastReceiver,
    Engine,
    EngineTraits,
    EngineUnavailableError,
    Generation,
    SamplingParams,
    create_engine,
    engine_kinds,
    engine_traits,
    register_engine,
    stop_token_ids_from_tokenizer,
)
from rlfactory_nb.engines.hf import HFEngine
from rlfactory_nb.engines.vllm import VLLMEngine, WeightSyncExtension

__all__ = [
    "BroadcastReceiver",
    "Engine",
    "EngineTraits",
    "EngineUnavailableError",
    "Generation",
    "HFEngine",
    "SamplingParams",
    "VLLMEngine",
    "WeightSyncExtension",
    "create_engine",
    "engine_kinds",
    "engine_traits",
    "register_engine",
    "stop_token_ids_from_tokenizer",
]
