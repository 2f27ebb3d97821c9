"""grpo.is_level / grpo.is_mode read as booleans; they are grpo.importance_level / importance_cap_mode
now, and the old keys still work with a deprecation message."""

import pytest

from rlfactory_nb.config import RunConfig
from rlfactory_nb.errors import ConfigError


@pytest.mark.parametrize("how", ["file", "override"])
def test_the_old_keys_still_work_and_say_the_new_name(how):
    data = {"name": "x", "grpo": {"is_level": "sequence", "is_mode": "mask"}} if how == "file" else {"name": "x"}
    overrides = ["grpo.is_level=sequence", "grpo.is_mode=mask"] if how == "override" else None
    with pytest.warns(FutureWarning) as caught:
        cfg = RunConfig.from_dict(data, overrides)
    assert sorted(str(w.message) for w in caught) == [
        "grpo.is_level is deprecated: write grpo.importance_level (same values)",
        "grpo.is_mode is deprecated: write grpo.importance_cap_mode (same values)",
    ]
    assert (cfg.grpo.importance_level, cfg.grpo.importance_cap_mode) == ("sequence", "mask")
    assert "is_level" not in cfg.to_dict()["grpo"]  # saved configs carry the new names


def test_old_and_new_name_together_is_an_error_and_bad_values_still_are():
    with pytest.raises(ConfigError, match="grpo.is_mode is the old name of grpo.importance_cap_mode"):
        RunConfig.from_dict({"name": "x", "grpo": {"is_mode": "mask", "importance_cap_mode": "mask"}})
    with pytest.warns(FutureWarning), pytest.raises(ConfigError, match="grpo.importance_level: 'tokens' is not one of"):
        RunConfig.from_dict({"name": "x", "grpo": {"is_level": "tokens"}})
