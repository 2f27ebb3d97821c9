"""The agent-loop tests' engine: the public scripted engine (tested in tests/engines/test_testing.py)."""

from rlfactory_nb.engines.testing import ScriptedEngine

__all__ = ["ScriptedEngine"]
