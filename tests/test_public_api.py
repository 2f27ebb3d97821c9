"""The public API: a pinned list of names that all resolve, one exception tree, notebooks that use
only the top level, and an import that stays light."""

import ast
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import rlfactory_nb as rf
from rlfactory_nb import errors

PACKAGE = Path(rf.__file__).parent
NOTEBOOKS = sorted((PACKAGE.parent / "notebooks").glob("*.ipynb"))

PUBLIC = [
    "Agent", "AgentProgram", "CheckpointError", "Cluster", "ConfigError", "DriftError", "EngineActorDied", "Environment", "EvalReport",
    "JobFailed", "JudgeError", "LLMJudge", "Policy", "RLFactoryError", "RewardError", "RewardLab",
    "RolloutStepper", "RunConfig", "Sample", "StepFailed", "ToolResult", "ToolSet", "TrainingJob", "Trajectory", "UserSimulator",
    "agent_tool", "algo", "build_tools", "chat", "compare_policies", "compare_policies_sync", "engines", "errors",
    "evaluate", "evaluate_sync", "example", "export", "format_trajectory", "launch", "model_tool",
    "rejection_sampling", "rejection_sampling_sync", "rewards", "sft", "sft_sync", "tool", "tools", "train_sync",
]  # fmt: skip

# Each error's built-in base before the tree existed: an `except ValueError` (etc.) written against
# an earlier version must still catch it.
BUILT_IN_BASES = {
    "ConfigError": ValueError,
    "DatasetError": ValueError,
    "ObjectTransferError": TypeError,
    "UntrustedRunObjects": PermissionError,
    "ModelFilesError": FileNotFoundError,
    "RemoteCodeError": ValueError,
    "CheckpointError": RuntimeError,
    "EngineUnavailableError": ImportError,
    "EngineActorDied": RuntimeError,
    "InsufficientResources": RuntimeError,
    "ChatError": RuntimeError,
    "ServerStartError": RuntimeError,
    "ServerUnavailable": RuntimeError,
    "HandshakeError": RuntimeError,
    "InvalidArguments": ValueError,
    "TemplateError": ValueError,
    "TemplateBoundError": ValueError,
    "DriftError": RuntimeError,
    "EpisodeError": RuntimeError,
    "RewardError": RuntimeError,
    "InvalidRewardValue": ValueError,
    "RewardLoadError": ImportError,
    "JudgeError": RuntimeError,
    "JudgeParseError": ValueError,
    "RewardModelError": ValueError,
    "StepFailed": RuntimeError,
    "StaleSamples": RuntimeError,
    "JobFailed": RuntimeError,
    "JobExistsError": RuntimeError,
    "ModelMismatch": RuntimeError,
    "ShippingError": RuntimeError,
}
STD_BASES = (ValueError, TypeError, RuntimeError, ImportError, OSError)

# Exceptions that never leave the module that raises them, so they stay where they are used.
INTERNAL = {
    "CalculatorError": "tools/servers/calculator.py",  # the server's reply text; its own process
    "ReplyRejected": "engines/chat_http.py",  # always re-raised as a ChatError
    "RequestError": "programs/wire.py",  # always answered as an HTTP error to the agent program
    "_Refused": "rewards/math_bounds.py",  # always caught by refusal(), which returns its message
}


def error_classes() -> dict[str, type]:
    return {
        name: value
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == errors.__name__
    }


def test_public_names_are_pinned_and_few():
    assert rf.__all__ == sorted(PUBLIC)
    assert len(rf.__all__) <= 49  # AgentProgram (issue 42), ToolResult (issue 40), Environment and UserSimulator (issue 41), sft and rejection_sampling with their sync twins (issue 52)


def test_every_public_name_resolves():
    unresolved = [name for name in rf.__all__ if getattr(rf, name, None) is None]
    assert unresolved == []
    assert callable(rf.RunConfig.from_yaml) and callable(rf.ToolSet.from_config)


def test_every_exported_error_is_in_the_tree():
    exported = [getattr(rf, name) for name in rf.__all__ if isinstance(getattr(rf, name), type)]
    exported_errors = [value for value in exported if issubclass(value, BaseException)]
    assert exported_errors, "the top level exports errors"
    assert [e.__name__ for e in exported_errors if not issubclass(e, rf.RLFactoryError)] == []
    assert all(e is getattr(rf.errors, e.__name__) for e in exported_errors)


def test_errors_keep_their_built_in_bases():
    """The same `except ValueError`, `except OSError`... clauses catch each error as before, no more."""
    classes = error_classes()

    def caught_by(cls: type) -> set[type]:
        return {base for base in STD_BASES if issubclass(cls, base)}

    also = {
        "JudgeParseError": {RuntimeError},  # a JudgeError now (issue 40): `except rf.JudgeError` catches it
        "RewardLoadError": {ValueError},  # a LoadError now (issue 51): `except rf.errors.LoadError` catches every key's
    }
    for name, base in BUILT_IN_BASES.items():
        assert issubclass(classes[name], base) and caught_by(classes[name]) == caught_by(base) | also.get(name, set()), name


def test_every_class_in_errors_is_a_documented_rlfactory_error():
    for name, cls in error_classes().items():
        assert issubclass(cls, rf.RLFactoryError), name
        assert cls.__doc__ and cls.__doc__.strip(), f"{name} needs a docstring saying when it is raised"


def test_errors_module_needs_only_the_standard_library():
    """Tool servers import it: it must not pull in the package's heavy parts."""
    tree = ast.parse((PACKAGE / "errors.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_exception_classes_are_defined_in_errors_py():
    """A new user-facing error goes into the tree, where every error reads in one place."""
    elsewhere = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name == "errors.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                re.search(r"(Error|Exception|Failed|Died)$", ast.unparse(base)) for base in node.bases
            ):
                elsewhere[node.name] = path.relative_to(PACKAGE).as_posix()
    assert elsewhere == INTERNAL


def notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "code")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_notebooks_use_only_the_top_level(path):
    source = notebook_code(path)
    imports = [line.strip() for line in source.splitlines() if re.match(r"\s*(import|from)\s", line)]
    assert [line for line in imports if "rlfactory_nb" in line] == ["import rlfactory_nb as rf"]
    for name, attribute in re.findall(r"\brf\.([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?", source):
        assert name in rf.__all__, f"{path.name} uses rf.{name}, which is not in rlfactory_nb.__all__"
        if attribute and inspect.ismodule(getattr(rf, name)):  # a subpackage's: rf.rewards.exact_match
            assert hasattr(getattr(rf, name), attribute), f"{path.name} uses rf.{name}.{attribute}"


def test_import_does_not_load_torch_so_tool_servers_start_fast():
    code = "import sys, rlfactory_nb, rlfactory_nb.tools.servers.calculator; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_unknown_name_is_an_attribute_error():
    try:
        rf.NoSuchThing  # noqa: B018
    except AttributeError as error:
        assert "NoSuchThing" in str(error)
    else:
        raise AssertionError("expected AttributeError")
