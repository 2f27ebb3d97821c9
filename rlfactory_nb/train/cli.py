"""`rlfactory-nb train CONFIG [key=value ...] [--resume]`: a training run from a shell.

`add_train_parser` plugs the command into the main CLI (`rlfactory_nb/cli.py`). Overrides are the
config's dotted keys (`grpo.steps=5 cluster.num_workers=2`), validated like the file itself.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rlfactory_nb.config import RunConfig


def add_train_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `train` command to an argparse subparsers object."""
    train = subparsers.add_parser("train", help="run GRPO training from a run config")
    train.add_argument("config", help="run config YAML, e.g. examples/calculator/config.yaml")
    train.add_argument("overrides", nargs="*", help="dotted overrides, e.g. grpo.steps=5 grpo.lr=1e-4")
    train.add_argument(
        "--resume", action="store_true", help="continue runs/<name> from its latest checkpoint"
    )
    train.add_argument(
        "--dry-run",
        action="store_true",
        help="print the resolved config and cluster layout, then exit without starting anything",
    )
    train.set_defaults(handler=run_train_command)
    return train


def run_train_command(args: argparse.Namespace) -> int:
    """Run a parsed `train` command; returns the exit status. ConfigError propagates to the main CLI."""
    from rlfactory_nb.train.checkpoint import CheckpointError
    from rlfactory_nb.train.data import DatasetError
    from rlfactory_nb.train.loop import train_sync

    cfg = RunConfig.from_yaml(args.config, overrides=args.overrides)
    if args.dry_run:
        print(describe(cfg))
        return 0
    try:
        result = train_sync(cfg, resume=args.resume)
    except (FileExistsError, DatasetError, CheckpointError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    last = result.metrics
    print(
        f"finished step {result.step} of {cfg.grpo.steps} in {result.run_dir}: "
        f"reward {last.get('reward/mean', float('nan')):.3f}"
        + (f", checkpoint {result.checkpoint}" if result.checkpoint else "")
    )
    return 0


def describe(cfg: RunConfig) -> str:
    """The config as YAML, then where everything would run."""
    cluster = cfg.cluster.layout()
    where = (
        f"# cluster: {cluster.num_workers} policy worker(s) ({cluster.strategy}), "
        f"{cluster.num_engines} {cfg.model.engine} engine(s), {cluster.gpus_per_worker:g} GPU each"
        + (", colocated (engines sleep during updates)" if cluster.colocate else "")
    )
    return cfg.to_yaml() + where


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlfactory-nb")
    add_train_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
