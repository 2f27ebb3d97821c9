"""The one loader for code a setting names: both forms, and every mistake names its key."""

import pytest

import rlfactory_nb as rf
from rlfactory_nb.code_names import load_object
from rlfactory_nb.envs.factory import env_factory
from rlfactory_nb.errors import LoadError, RewardLoadError
from rlfactory_nb.rewards.loading import load_reward
from rlfactory_nb.tools.python import load_function


def test_both_forms_and_a_dotted_attribute_load(tmp_path):
    (tmp_path / "things.py").write_text("class Box:\n    def size(self):\n        return 3\n")
    box = load_object(f"{tmp_path / 'things.py'}:Box", "some.key", "box", kind="class")
    assert box().size() == 3
    assert load_object("rlfactory_nb.code_names:load_object", "some.key", "loader") is load_object
    assert load_object("rlfactory_nb.errors:LoadError.__init__", "some.key", "method") is LoadError.__init__


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("no_colon", "must look like 'package.module:function' or 'path/to/file.py:function'"),
        ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
        ("/no/such/file.py:f", "no file /no/such/file.py"),
        ("rlfactory_nb.code_names:lod_object", "has no 'lod_object'; its functions: .*load_object"),
        ("rlfactory_nb.extras:EXTRA_MODULES", "'EXTRA_MODULES' is a dict, not a function"),
    ],
)
def test_each_mistake_names_the_key_and_what_it_names(spec, problem):
    with pytest.raises(LoadError, match=problem) as raised:
        load_object(spec, "grpo.loss", "policy loss")
    assert str(raised.value).startswith(f"grpo.loss: policy loss {spec!r}") and raised.value.key == "grpo.loss"
    assert isinstance(raised.value, ImportError) and isinstance(raised.value, rf.ConfigError)


def test_every_key_that_names_code_loads_through_it(tmp_path):
    """The same mistake through each entry point: one error class, each naming its own key."""
    (tmp_path / "broken.py").write_text("import no_such_dependency_xyz\n")
    broken = f"{tmp_path / 'broken.py'}:thing"
    for load, key in [
        (load_reward, "reward.function"),
        (env_factory, "rollout.env"),
        (load_function, "functions"),
        (lambda spec: rf.AgentProgram(spec), "rollout.program"),
        (lambda spec: rf.algo.registry.get_loss(spec), "grpo.loss"),
    ]:
        with pytest.raises(LoadError, match="running .*broken.py failed: ModuleNotFoundError") as raised:
            load(broken)
        assert raised.value.key == key and str(raised.value).startswith(f"{key}: ")
    assert issubclass(RewardLoadError, LoadError)
