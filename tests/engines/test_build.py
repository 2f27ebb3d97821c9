"""build_engine: each engine source builds the engine its kind makes from it."""

from __future__ import annotations

import pytest
import torch

from rlfactory_nb.engines import Folder, HFEngine, InMemory, Snapshot, base, build_engine
from rlfactory_nb.engines.build import cpu_state


@pytest.fixture
def folder_kind(monkeypatch):
    """A registered kind that loads a folder (as vLLM does), recording what it was made from."""
    made: list[tuple[object, dict]] = []

    def factory(path, **options):
        made.append((path, options))
        return object()

    monkeypatch.setitem(base._ENGINES, "folder-kind", (factory, base.EngineTraits(loads="folder")))
    return made


def test_in_memory_serves_the_model_object_itself(tiny_model, tokenizer):
    engine = build_engine("hf", InMemory(tiny_model, tokenizer), num_threads=1)
    assert isinstance(engine, HFEngine) and engine.model is tiny_model


def test_a_snapshot_builds_the_model_from_its_config_and_the_weights_beside_it(tiny_model, tokenizer):
    source = Snapshot(tiny_model.config, tokenizer, "bfloat16", "unused-by-hf")
    engine = build_engine("hf", source, cpu_state(tiny_model), torch.device("cpu"), num_threads=1)
    assert engine.model is not tiny_model
    assert next(engine.model.parameters()).dtype == torch.bfloat16
    for name, tensor in tiny_model.state_dict().items():
        assert torch.equal(engine.model.state_dict()[name], tensor.to(torch.bfloat16)), name


def test_a_folder_is_loaded_by_the_engine_on_the_device_given(tiny_model_dir):
    engine = build_engine("hf", Folder(str(tiny_model_dir)), device=torch.device("cpu"), num_threads=1)
    assert isinstance(engine, HFEngine) and engine.device.type == "cpu"


def test_a_folder_kind_loads_the_snapshot_path_in_its_dtype(folder_kind, tiny_model, tokenizer):
    build_engine("folder-kind", Snapshot(tiny_model.config, tokenizer, "float32", "/base"), cpu_state(tiny_model), seed=3)
    build_engine("folder-kind", Folder("/model"), seed=4)
    assert folder_kind == [("/base", {"dtype": "float32", "seed": 3}), ("/model", {"seed": 4})]


def test_a_folder_kind_refuses_a_model_object(folder_kind, tiny_model, tokenizer):
    with pytest.raises(TypeError, match="loads a model folder, not a model object"):
        build_engine("folder-kind", InMemory(tiny_model, tokenizer))


def test_an_unknown_kind_names_the_known_ones(tiny_model, tokenizer):
    with pytest.raises(ValueError, match=r"unknown engine kind 'hff' \(did you mean 'hf'\?\); choose one of \['hf', 'vllm'\]"):
        build_engine("hff", InMemory(tiny_model, tokenizer))


def test_anything_but_a_source_is_refused(tiny_model, tokenizer):
    with pytest.raises(TypeError, match="InMemory, Folder, Snapshot"):
        build_engine("hf", (tiny_model, tokenizer))


def test_cpu_state_detaches_a_module_or_a_state_dict(tiny_model):
    state = cpu_state(tiny_model)
    assert state.keys() == tiny_model.state_dict().keys()
    assert all(t.device.type == "cpu" and not t.requires_grad for t in state.values())
    assert cpu_state(state).keys() == state.keys()
