"""`rlfactory-nb sft CONFIG [key=value ...] [--resume] [--rejection-sampling]`: supervised
fine-tuning from a shell, on `sft.data` (a run folder, a file of trajectories or conversations), or
rejection sampling (`sft.rounds` rounds of `sft.samples_per_prompt` samples per prompt of
`data.train`, kept at `sft.min_reward`). The parser is built here from argparse alone; the training
code is imported only when the command runs (tests/test_cli_imports.py).
"""

from __future__ import annotations

import argparse
from typing import Any

from rlfactory_nb.config import RunConfig


def add_sft_parser(commands: Any, add_command: Any, deferred: Any) -> argparse.ArgumentParser:
    sft = add_command(
        commands,
        "sft",
        "supervised fine-tuning on trajectories; rejection sampling",
        "rlfactory-nb sft examples/calculator/config.yaml sft.data=runs/tiny-calculator sft.min_reward=1",
    )
    sft.add_argument("config", help="run config YAML with an sft: section (or sft.* overrides)")
    sft.add_argument("overrides", nargs="*", help="dotted overrides, e.g. sft.steps=20 sft.lr=1e-5")
    sft.add_argument("--resume", action="store_true", help="continue runs/<name> from its latest checkpoint")
    sft.add_argument(
        "--rejection-sampling",
        action="store_true",
        help="sample sft.samples_per_prompt per prompt of data.train, keep those >= sft.min_reward, "
        "fine-tune; repeat for sft.rounds rounds",
    )
    sft.set_defaults(handler=deferred("rlfactory_nb.cli.sft:run_sft_command"))
    return sft


def run_sft_command(args: argparse.Namespace) -> int:
    """Run a parsed `sft` command; a mistake propagates to the main CLI, which prints it as one line."""
    cfg = RunConfig.from_yaml(args.config, overrides=args.overrides)  # before torch loads: a typo fails fast
    # deferred: the CLI imports no torch until a command needs it (tests/test_cli_imports.py)
    from rlfactory_nb.train.sft import rejection_sampling_sync, sft_sync

    if args.rejection_sampling:
        result = rejection_sampling_sync(cfg, resume=args.resume)
        for summary in result.rounds:
            print(
                f"round {summary['rejection/round']:.0f}: kept {summary['rejection/kept']:.0f} of "
                f"{summary['rejection/sampled']:.0f} samples (mean reward {summary['rejection/reward_mean']:.3f})"
            )
    else:
        result = sft_sync(cfg, resume=args.resume)
    loss = result.metrics.get("sft/loss", float("nan"))
    print(
        f"finished step {result.step} in {result.run_dir}: sft/loss {loss:.4f}"
        + (f", checkpoint {result.checkpoint}" if result.checkpoint else "")
    )
    return 0
