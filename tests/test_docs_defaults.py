"""The defaults the docs quote are config.py's (scripts/docs_defaults.py writes them)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("docs_defaults", ROOT / "scripts" / "docs_defaults.py")
docs_defaults = importlib.util.module_from_spec(spec)
spec.loader.exec_module(docs_defaults)


def test_every_quoted_default_is_the_configs():
    found = {name: docs_defaults.quoted((ROOT / name).read_text(encoding="utf-8")) for name in docs_defaults.DOCS}
    assert {key for pairs in found.values() for key, _ in pairs} >= {"grpo.logprob_chunk_tokens", "reward.max_concurrency"}
    stale = [(name, key, value) for name, pairs in found.items() for key, value in pairs if value != docs_defaults.default_text(key)]
    assert not stale, f"run `python scripts/docs_defaults.py --write`: {stale}"


def test_a_stale_quote_is_found_and_rewritten():
    text = "chunks of 1,024<!-- default: grpo.logprob_chunk_tokens --> tokens, 64<!-- default: grpo.mini_batch_size -->"
    assert docs_defaults.quoted(text) == [("grpo.logprob_chunk_tokens", "1,024"), ("grpo.mini_batch_size", "64")]
    assert docs_defaults.generated(text) == (
        "chunks of 256<!-- default: grpo.logprob_chunk_tokens --> tokens, 32<!-- default: grpo.mini_batch_size -->"
    )


def test_the_step_count_is_not_called_optimizer_steps():
    """grpo.steps counts training steps; with the defaults one makes 4 optimizer steps."""
    from rlfactory_nb.config import DEFAULTS
    from rlfactory_nb.config_grpo import GRPOConfig

    grpo = DEFAULTS.grpo
    optimizer_steps = grpo.ppo_epochs * -(-grpo.prompts_per_step * grpo.group_size // grpo.mini_batch_size)
    doc = GRPOConfig.__dataclass_fields__["steps"]
    assert optimizer_steps == 4 and doc.default == grpo.steps
    source = (ROOT / "rlfactory_nb" / "config_grpo.py").read_text(encoding="utf-8")
    assert '"""training steps (each' in source and "(4 with the defaults)" in source
