"""The public API: every name in `rlfactory_nb.__all__` resolves, and the import itself stays light."""

import subprocess
import sys

import rlfactory_nb as rf


def test_every_public_name_resolves():
    unresolved = [name for name in rf.__all__ if getattr(rf, name, None) is None]
    assert unresolved == []
    assert callable(rf.RunConfig.from_yaml) and callable(rf.ToolSet.from_config)


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
