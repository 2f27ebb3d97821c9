"""`rlfactory-nb`: the headless twin of the notebooks.

    rlfactory-nb demo [--out DIR]            the main job on the embedded default
    rlfactory-nb train CONFIG [key=value] [--resume]   GRPO training, headless
    rlfactory-nb eval ...                    evaluate a checkpoint or model on a dataset
    rlfactory-nb tools list|call CONFIG ...  check a tools config from a shell
    rlfactory-nb config CONFIG [key=value]   validate a run config and print it resolved
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlfactory_nb.config import ConfigError, RunConfig
from rlfactory_nb.eval import add_eval_parser
from rlfactory_nb.tools.cli import add_tools_parser
from rlfactory_nb.train.cli import add_train_parser


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlfactory-nb", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="build the tiny model and run the main job on it")
    demo.add_argument("--out", default=None, help="output folder (default runs/<timestamp>)")
    demo.set_defaults(handler=_demo)

    config = commands.add_parser("config", help="validate a run config and print it resolved")
    config.add_argument("config", help="run config YAML")
    config.add_argument("overrides", nargs="*", help="dotted overrides, e.g. grpo.lr=1e-6")
    config.set_defaults(handler=_config)

    add_train_parser(commands)
    add_eval_parser(commands)
    add_tools_parser(commands)
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _config(args: argparse.Namespace) -> int:
    print(RunConfig.from_yaml(args.config, overrides=args.overrides).to_yaml(), end="")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from rlfactory_nb.demo import run_demo

    return run_demo(Path(args.out) if args.out else None)


if __name__ == "__main__":
    sys.exit(main())
