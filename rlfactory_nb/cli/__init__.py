"""`rlfactory-nb`: the headless twin of the notebooks.

    rlfactory-nb demo [--out DIR]            the main job on the embedded default
    rlfactory-nb train CONFIG [key=value] [--resume]   GRPO training, headless
    rlfactory-nb sft CONFIG [key=value] [--rejection-sampling]   supervised fine-tuning (sft: section)
    rlfactory-nb eval ...                    evaluate a checkpoint or model on a dataset
    rlfactory-nb compare RUN_DIR --steps A B what training changed between two steps, token by token
    rlfactory-nb export CHECKPOINT OUT       a checkpoint (LoRA merged) as a plain Hugging Face folder
    rlfactory-nb tools list|call CONFIG ...  check a tools config from a shell
    rlfactory-nb config CONFIG [key=value]   validate a run config and print it resolved
    rlfactory-nb preset build NAME [--ship]  build an embedded preset; --ship updates the packaged copy

Every command's parser is built here from nothing heavier than argparse and the config module. The
code that runs a command is named as "module:function" and imported only when that command runs, so
`tools` and `config` never load torch, transformers or ray: importing them through `eval` took half
of a 13 s `tools list` on 2 cores (issue #21). `import rlfactory_nb` keeps the same promise.

Errors: a user's mistake (a missing file, a bad key, a model or checkpoint not found: the
RLFactoryError families and OSErrors about a path) is one line on stderr that names the fix, exit
code 2; anything else is one line too, exit code 1. `--debug` (anywhere on the line) shows the
traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlfactory_nb.cli.sft import add_sft_parser as sft_parser
from rlfactory_nb.config import ConfigError, RunConfig
from rlfactory_nb.errors import RLFactoryError

Handler = Callable[[argparse.Namespace], int]


DEBUG_FLAG = "--debug"
USER_MISTAKES = (RLFactoryError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)
"""what a user fixes by changing the command line, a file or a path: one line and exit code 2"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = DEBUG_FLAG in argv
    args = build_parser().parse_args([arg for arg in argv if arg != DEBUG_FLAG])
    try:
        return int(args.handler(args) or 0)
    except USER_MISTAKES as error:
        if debug:
            raise
        print(f"error: {one_line(error)}", file=sys.stderr)
        return 2
    except Exception as error:  # a failure, not a mistake: still one line unless --debug
        if debug:
            raise
        print(f"error: {type(error).__name__}: {one_line(error)} (rerun with {DEBUG_FLAG} for the traceback)", file=sys.stderr)
        return 1


def one_line(error: BaseException) -> str:
    """`error` as one line: a config's problems joined with "; ", a missing file named as such.

    >>> one_line(ConfigError(["grpo.stepz: unknown key; did you mean 'grpo.steps'?"], "c.yaml"))
    "invalid config in c.yaml: grpo.stepz: unknown key; did you mean 'grpo.steps'?"
    >>> one_line(FileNotFoundError(2, "No such file or directory", "nope.yaml"))
    'no such file or folder: nope.yaml (check the path)'
    """
    if isinstance(error, ConfigError):
        head = str(error).split("\n", 1)[0]
        return f"{head} {'; '.join(error.problems)}"
    filename = getattr(error, "filename", None)
    if isinstance(error, FileNotFoundError) and filename and not isinstance(error, RLFactoryError):
        return f"no such file or folder: {filename} (check the path)"
    return " ".join(str(error).split()) or type(error).__name__


def run_command(command: str, argv: list[str] | None = None) -> int:
    """`main` for one command whose name may be left out: the entries of `python -m rlfactory_nb.cli.tools`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] != [command]:
        argv.insert(0, command)
    return main(argv)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; building it imports no command's code."""
    parser = argparse.ArgumentParser(
        prog="rlfactory-nb",
        description=__doc__.split("\n\n")[0],
        epilog="Run `rlfactory-nb COMMAND --help` for a command's options and an example.",
    )
    parser.add_argument(DEBUG_FLAG, action="store_true", help="show the traceback of an error (allowed anywhere on the line)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in (
        add_demo_parser,
        add_train_parser,
        add_sft_parser,
        add_eval_parser,
        add_compare_parser,
        add_export_parser,
        add_tools_parser,
        add_config_parser,
        add_preset_parser,
    ):
        add_command(commands)
    return parser


def add_demo_parser(commands: Any) -> argparse.ArgumentParser:
    demo = _add_command(
        commands,
        "demo",
        "run the main job on the embedded tiny model",
        "rlfactory-nb demo --out runs/demo",
    )
    demo.add_argument("--out", default=None, help="output folder (default runs/<timestamp>)")
    demo.set_defaults(handler=_run_demo)
    return demo


def add_train_parser(commands: Any) -> argparse.ArgumentParser:
    train = _add_command(
        commands,
        "train",
        "run GRPO training from a run config",
        "rlfactory-nb train examples/calculator/config.yaml grpo.steps=5 --dry-run",
    )
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
    train.set_defaults(handler=_deferred("rlfactory_nb.cli.train:run_train_command"))
    return train


def add_sft_parser(commands: Any) -> argparse.ArgumentParser:
    return sft_parser(commands, _add_command, _deferred)


def add_eval_parser(commands: Any) -> argparse.ArgumentParser:
    evaluate = _add_command(
        commands,
        "eval",
        "evaluate a checkpoint, optionally against a baseline",
        "rlfactory-nb eval examples/calculator/config.yaml --model runs/tiny-calculator/checkpoints/step_000010 "
        "--base tiny-calculator",
    )
    evaluate.add_argument("config", help="run config YAML (tools, rollout, reward, data.eval)")
    evaluate.add_argument("overrides", nargs="*", help="dotted overrides, e.g. data.eval_size=32")
    evaluate.add_argument(
        "--model", default=None, help="checkpoint folder or preset (default: the config's model.name)"
    )
    evaluate.add_argument("--base", default=None, help="a second model to compare against")
    evaluate.set_defaults(handler=_deferred("rlfactory_nb.eval:run_eval_command"))
    return evaluate


def add_compare_parser(commands: Any) -> argparse.ArgumentParser:
    compare = _add_command(
        commands,
        "compare",
        "what a run changed between two steps: CSV tables, an HTML page",
        "rlfactory-nb compare runs/tiny-calculator --steps 0 30",
    )
    compare.add_argument("run_dir", help="the run folder (runs/<name>)")
    compare.add_argument("--steps", nargs=2, type=int, required=True, metavar=("A", "B"), help="0 is the base model")
    compare.add_argument("--out", default=None, help="output folder (default RUN_DIR/compare/step_A-step_B)")
    compare.add_argument("--limit", type=int, default=16, help="trajectories to score (default 16)")
    compare.add_argument("--top", type=int, default=10, help="token texts per direction in top_tokens.csv")
    compare.add_argument("--device", default="auto", help="where the two models run (auto, cpu, cuda)")
    compare.set_defaults(handler=_deferred("rlfactory_nb.cli.compare:run_compare_command"))
    return compare


def add_export_parser(commands: Any) -> argparse.ArgumentParser:
    export = _add_command(
        commands,
        "export",
        "write a checkpoint as a Hugging Face folder (LoRA merged)",
        "rlfactory-nb export runs/calculator/checkpoints/step_000030 exported/calculator --dtype bfloat16",
    )
    export.add_argument("checkpoint", help="a checkpoint folder (full or LoRA), a model folder or preset")
    export.add_argument("out", help="the folder to write (replaced if it exists)")
    export.add_argument(
        "--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"), help="weights dtype"
    )
    export.set_defaults(handler=_deferred("rlfactory_nb.models.export:run_export_command"))
    return export


def add_tools_parser(commands: Any) -> argparse.ArgumentParser:
    tools = _add_command(
        commands,
        "tools",
        "list or call the tools of a tools config",
        "rlfactory-nb tools list examples/calculator/tools.yaml\n"
        '  rlfactory-nb tools call examples/calculator/tools.yaml calculator \'{"expression": "6*7"}\'',
    )
    actions = tools.add_subparsers(dest="tools_command", required=True, metavar="ACTION")
    listing = _add_command(
        actions,
        "list",
        "start the servers and print every tool with its schema",
        "rlfactory-nb tools list examples/calculator/tools.yaml --json",
    )
    listing.add_argument("config", help="tools config: our YAML or an mcpServers JSON")
    listing.add_argument("--json", action="store_true", help="print the specs as JSON (OpenAI tools format)")
    call = _add_command(
        actions,
        "call",
        "call one tool and print its result",
        'rlfactory-nb tools call examples/calculator/tools.yaml calculator \'{"expression": "6*7"}\'',
    )
    call.add_argument("config", help="tools config: our YAML or an mcpServers JSON")
    call.add_argument("name", help="tool name (short, or server.tool)")
    call.add_argument("arguments", nargs="?", default="{}", help="arguments as a JSON object (default {})")
    call.add_argument("--timeout-s", type=float, default=None, help="override the per-call timeout")
    call.add_argument("--json", action="store_true", help="print the whole ToolResult as JSON")
    tools.set_defaults(handler=_deferred("rlfactory_nb.cli.tools:run_tools_command"))
    return tools


def add_config_parser(commands: Any) -> argparse.ArgumentParser:
    config = _add_command(
        commands,
        "config",
        "validate a run config and print it resolved",
        "rlfactory-nb config examples/calculator/config.yaml grpo.lr=1e-6",
    )
    config.add_argument("config", help="run config YAML")
    config.add_argument("overrides", nargs="*", help="dotted overrides, e.g. grpo.lr=1e-6")
    config.set_defaults(handler=_print_config)
    return config


def add_preset_parser(commands: Any) -> argparse.ArgumentParser:
    preset = _add_command(
        commands,
        "preset",
        "build an embedded preset, or rebuild its shipped copy",
        "rlfactory-nb preset build tiny-calculator --ship",
    )
    actions = preset.add_subparsers(dest="preset_command", required=True, metavar="ACTION")
    build = _add_command(
        actions,
        "build",
        "build a preset into the cache for the current recipe (a cached build is reused)",
        "rlfactory-nb preset build tiny-calculator --ship",
    )
    build.add_argument("name", help="the preset, e.g. tiny-calculator")
    build.add_argument(
        "--ship",
        action="store_true",
        help="then copy it into the package (rlfactory_nb/models/presets/built/) with its manifest, to commit",
    )
    preset.set_defaults(handler=_deferred("rlfactory_nb.models.presets:run_preset_command"))
    return preset


def _add_command(commands: Any, name: str, summary: str, example: str) -> argparse.ArgumentParser:
    """A command whose `--help` starts with its one-line summary and ends with an example."""
    return commands.add_parser(
        name,
        help=summary,
        description=summary,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _deferred(target: str) -> Handler:
    """A handler for "module:function" that imports the module only when its command runs."""
    module_name, function_name = target.split(":")

    def handler(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(module_name), function_name)(args)

    return handler


def _print_config(args: argparse.Namespace) -> int:
    print(RunConfig.from_yaml(args.config, overrides=args.overrides).to_yaml(), end="")
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    # deferred: the CLI imports no torch until a command needs it (tests/test_cli_imports.py)
    from rlfactory_nb.demo import run_demo

    return run_demo(Path(args.out) if args.out else None)

