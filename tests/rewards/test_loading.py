"""load_reward: every way a reward spec can be wrong gets a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlfactory_nb.rewards import RewardLoadError, exact_match, load_reward


def test_module_spec() -> None:
    assert load_reward("rlfactory_nb.rewards.functions:exact_match") is exact_match


def test_callable_passes_through() -> None:
    assert load_reward(exact_match) is exact_match


def test_file_spec(tmp_path: Path) -> None:
    file = tmp_path / "my_reward.py"
    file.write_text("def reward(sample):\n    return 0.5\n")
    assert load_reward(f"{file}:reward")(None) == 0.5


@pytest.mark.parametrize(
    "spec, message",
    [
        ("exact_match", "must look like 'package.module:function'"),
        ("no_such_module_xyz:reward", "cannot import module 'no_such_module_xyz'"),
        ("rlfactory_nb.rewards.functions:exact", "has no 'exact'; its functions: .*exact_match"),
        ("rlfactory_nb.rewards.functions:_ARTICLES", "is a Pattern, not a function"),
        ("/no/such/file.py:reward", "no file /no/such/file.py"),
    ],
)
def test_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(RewardLoadError, match=message):
        load_reward(spec)


def test_file_that_fails_to_run(tmp_path: Path) -> None:
    file = tmp_path / "broken.py"
    file.write_text("import no_such_module_xyz\n")
    with pytest.raises(RewardLoadError, match="running .*broken.py failed: ModuleNotFoundError"):
        load_reward(f"{file}:reward")
