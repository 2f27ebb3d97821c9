"""One default per setting: config.py holds each; a settings record that is read from a run config
(a dataclass with `from_config`) takes its defaults from `config.DEFAULTS` instead of writing them
again, so a direct user (or a unit test) runs the layout a default run uses."""

import ast
import dataclasses
from pathlib import Path

import rlfactory_nb
from rlfactory_nb.config import DEFAULTS

PACKAGE = Path(rlfactory_nb.__file__).parent
SECTIONS = [DEFAULTS, *(getattr(DEFAULTS, f.name) for f in dataclasses.fields(DEFAULTS) if dataclasses.is_dataclass(getattr(DEFAULTS, f.name)))]
CONFIG_FIELDS = {f.name for section in SECTIONS for f in dataclasses.fields(section)}
ALLOWED = {
    ("train/update.py", "UpdateSettings", "lr_schedule"): "an LRSchedule object, not grpo.lr_schedule's name",
    ("rollout/settings.py", "RolloutSettings", "enable_thinking"): (
        "a record made without a config plays without thinking, as rf.Agent does; a config's unset mode "
        "(None) is resolved by from_config to the mode the model was trained in"
    ),
}


def repeated_defaults(relative: str, source: str) -> list[str]:
    """The literal defaults of fields named like a config field, in the dataclasses of `source` that
    have a `from_config` (settings records read from a run config), less ALLOWED."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and any(
            isinstance(item, ast.FunctionDef) and item.name == "from_config" for item in node.body
        ):
            for item in node.body:
                if (
                    isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                    and item.target.id in CONFIG_FIELDS and isinstance(item.value, ast.Constant)
                    and (relative, node.name, item.target.id) not in ALLOWED
                ):
                    found.append(f"{relative}: {node.name}.{item.target.id} = {ast.unparse(item.value)} (take it from config.DEFAULTS)")
    return found


def test_no_settings_record_writes_a_config_default_again():
    repeated = [
        problem
        for path in sorted(PACKAGE.rglob("*.py")) if path.relative_to(PACKAGE).as_posix() != "config.py"
        for problem in repeated_defaults(path.relative_to(PACKAGE).as_posix(), path.read_text(encoding="utf-8"))
    ]
    assert not repeated, "\n".join(repeated)
    old_way = "class S:\n    padding_free: bool = False\n    lr_schedule: object = None\n    def from_config(cls, cfg): ...\n"
    assert repeated_defaults("train/update.py", old_way) == [
        "train/update.py: S.padding_free = False (take it from config.DEFAULTS)",
        "train/update.py: S.lr_schedule = None (take it from config.DEFAULTS)",
    ]


def test_the_records_defaults_are_the_configs():
    from rlfactory_nb.algo.registry import LossArgs
    from rlfactory_nb.train.schedule import LRSchedule
    from rlfactory_nb.train.trainable import TrainingSetup
    from rlfactory_nb.train.update import UpdateSettings

    grpo = DEFAULTS.grpo
    settings = UpdateSettings()
    assert settings.padding_free is grpo.padding_free is True  # the layout every default run trains with
    for name in ("loss", "ppo_epochs", "mini_batch_size", "micro_batch_size", "max_grad_norm", "kl_coef",
                 "kl_estimator", "entropy_coef", "seed", "max_tokens_per_micro_batch", "logprob_chunk_tokens"):
        assert getattr(settings, name) == getattr(grpo, name), name
    for name in ("clip_low", "clip_high", "token_budget", "truncate_ratio", "importance_level", "importance_cap_mode"):
        assert getattr(LossArgs(), name) == getattr(grpo, name), name
    setup = TrainingSetup(precision=None)
    assert (setup.padding_free, setup.gradient_checkpointing, setup.lora) == (
        grpo.padding_free, DEFAULTS.model.gradient_checkpointing, DEFAULTS.model.lora)
    schedule = LRSchedule(1e-3)
    assert (schedule.name, schedule.warmup_steps, schedule.steps) == (grpo.lr_schedule, grpo.warmup_steps, grpo.steps)
