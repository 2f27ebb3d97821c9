"""`rlfactory-nb train CONFIG [key=value ...] [--resume]`: a training run from a shell.

The parser lives in the main CLI (`rlfactory_nb/cli/__init__.py`), which imports this module only when `train`
runs. Overrides are the config's dotted keys (`grpo.steps=5 cluster.num_workers=2`), validated like
the file itself.
"""

from __future__ import annotations

import argparse
import sys

from rlfactory_nb import cli
from rlfactory_nb.config import RunConfig


def run_train_command(args: argparse.Namespace) -> int:
    """Run a parsed `train` command; returns the exit status. A mistake (a bad config, a missing
    file, a run that exists) propagates to the main CLI, which prints it as one line."""
    cfg = RunConfig.from_yaml(args.config, overrides=args.overrides)  # before torch loads: a typo fails fast
    if args.dry_run:
        print(describe(cfg))
        return 0
    # deferred: the CLI imports no torch until a command needs it (tests/test_cli_imports.py)
    from rlfactory_nb.train.loop import train_sync

    try:
        result = train_sync(cfg, resume=args.resume)
    except FileExistsError as error:  # the run folder holds a run: a mistake, not a missing file
        print(f"error: {cli.one_line(error)}", file=sys.stderr)
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
    """Standalone entry: `CONFIG [key=value ...]` (a leading `train` is accepted too)."""
    return cli.run_command("train", argv)


if __name__ == "__main__":
    sys.exit(main())
