"""One error tree: every error a user can cause is an RLFactoryError of its family, still the built-in
it was. This walks every `raise` in the package and fails on a built-in exception raised directly,
except where listed below with the reason."""

import ast
import builtins
from pathlib import Path

import pytest

import rlfactory_nb as rf
from rlfactory_nb import errors

PACKAGE = Path(rf.__file__).parent
BUILT_IN = {name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)}

ALLOWED = {
    ("__init__.py", "AttributeError"): "module __getattr__: Python's protocol for a missing attribute",
    ("cluster/__init__.py", "AttributeError"): "module __getattr__: Python's protocol for a missing attribute",
    ("tools/__init__.py", "AttributeError"): "module __getattr__: Python's protocol for a missing attribute",
    ("cluster/ray_cluster.py", "AssertionError"): "a branch that cannot run",
    ("widgets/_base.py", "NotImplementedError"): "an abstract method of the view base class",
    ("algo/advantages.py", "ValueError"): "tensor shapes of a pure function: the trainer's own calls, a bug if wrong",
    ("engines/base.py", "ValueError"): "Generation's own invariant (as many logprobs as ids): an engine's bug",
    ("engines/testing.py", "LookupError"): "the test double's script does not cover a request: the test's own error",
    ("models/lora.py", "TypeError"): "an internal unwrap of the trainer's own peft model",
    ("recipes/deepsearch/remote_search.py", "ValueError"): "a tool's own failure: returned to the model as a ToolResult",
    ("train/batch.py", "ValueError"): "invariants of the trainer's own records (rollouts it assembled): a bug if raised",
    ("train/packing.py", "ValueError"): "invariants of the trainer's own packing: a bug if raised",
    ("widgets/dashboard.py", "ValueError"): "a button's message, shown in the widget's output area",
    ("tools/servers/", "*"): "tool servers run in their own process; a raise there is the tool's failure, sent as data",
    ("storage.py", "IsADirectoryError"): "a folder where a file is read, as open() says it; callers catch it by type as 'no file'",
    ("local_files.py", "IsADirectoryError"): "a folder where a file is read, as open() says it; callers catch it by type as 'no file'",
    ("storage.py", "OSError"): "probe(): caught two lines below and raised as a StorageError naming the step",
    ("recipes/shop/env.py", "RuntimeError"): "a tool before reset(): the episode loop always resets first, a loop's bug if raised",
}


def built_in_raises(source: str) -> list[tuple[int, str]]:
    """(line, name) of every `raise X(...)` / `raise X` where X is a built-in exception."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(raised, ast.Name) and raised.id in BUILT_IN:
                found.append((node.lineno, raised.id))
    return found


def allowed(relative: str, name: str) -> bool:
    return any(relative.startswith(path) and kind in (name, "*") for path, kind in ALLOWED)


def test_no_built_in_exception_is_raised_directly_in_user_facing_code():
    direct = [
        f"{relative}:{line} raises {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for relative in [path.relative_to(PACKAGE).as_posix()]
        for line, name in built_in_raises(path.read_text(encoding="utf-8"))
        if not allowed(relative, name)
    ]
    assert not direct, "raise an rlfactory_nb.errors class of the right family (or list it here with why):\n" + "\n".join(direct)


def test_the_walk_finds_a_direct_raise():
    source = "def f(x):\n    if x:\n        raise ValueError('bad')\n    raise errors.ConfigError('fine')\n"
    assert built_in_raises(source) == [(3, "ValueError")]
    assert not allowed("engines/hf.py", "ValueError") and allowed("tools/servers/search.py", "ValueError")


@pytest.mark.parametrize(
    ("name", "built_in"),
    [("RegistryKeyError", KeyError), ("RunFolderExistsError", FileExistsError), ("PathNotFoundError", FileNotFoundError),
     ("ArgumentTypeError", TypeError), ("EngineRequestError", ValueError), ("EngineTimeout", TimeoutError),
     ("MissingExtraError", ImportError), ("SampleError", ValueError), ("JobTimeout", TimeoutError)],
)  # fmt: skip
def test_each_new_error_is_in_the_tree_and_still_its_built_in(name, built_in):
    cls = getattr(errors, name)
    assert issubclass(cls, errors.RLFactoryError) and issubclass(cls, built_in)
    assert name in errors.__doc__


def test_the_docstring_tree_names_every_error_class():
    classes = [name for name, value in vars(errors).items() if isinstance(value, type) and issubclass(value, errors.RLFactoryError)]
    assert [name for name in classes if name not in errors.__doc__] == []


def test_a_judge_reply_without_a_score_is_a_judge_error():
    assert issubclass(errors.JudgeParseError, errors.JudgeError) and issubclass(errors.JudgeParseError, ValueError)


def test_a_registry_miss_reads_like_a_sentence_and_an_old_except_catches_it():
    from rlfactory_nb.algo.registry import get_loss

    with pytest.raises(KeyError) as raised:
        get_loss("grpoo")
    assert isinstance(raised.value, rf.ConfigError) and str(raised.value).startswith("unknown policy loss 'grpoo'")
