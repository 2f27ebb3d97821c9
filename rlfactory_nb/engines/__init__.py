"""Rollout engines: one contract (base.py), a transformers engine (hf.py) and a vLLM engine (vllm.py);
what an engine is made from and the one place it is made (build.py); the policy version rule
(versioned.py); a scripted engine for tests of what sits above (testing.py: `ScriptedEngine`).

Importing this package registers both kinds; vllm itself is imported only when a vLLM engine is made.
"""

from rlfactory_nb.engines import testing
from rlfactory_nb.engines.base import (
    BroadcastReceiver,
    Engine,
    EngineTraits,
    Generation,
    SamplingParams,
    create_engine,
    engine_kinds,
    engine_traits,
    register_engine,
    stop_token_ids_from_tokenizer,
)
from rlfactory_nb.engines.build import EngineSource, Folder, InMemory, Snapshot, build_engine
from rlfactory_nb.engines.hf import HFEngine
from rlfactory_nb.engines.versioned import StampedEngine
from rlfactory_nb.engines.vllm import VLLMEngine, WeightSyncExtension
from rlfactory_nb.errors import EngineUnavailableError

__all__ = [
    "BroadcastReceiver",
    "Engine",
    "EngineSource",
    "EngineTraits",
    "EngineUnavailableError",
    "Folder",
    "Generation",
    "HFEngine",
    "InMemory",
    "SamplingParams",
    "Snapshot",
    "StampedEngine",
    "VLLMEngine",
    "WeightSyncExtension",
    "build_engine",
    "create_engine",
    "engine_kinds",
    "engine_traits",
    "register_engine",
    "stop_token_ids_from_tokenizer",
    "testing",
]
