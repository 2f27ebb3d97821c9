"""The Ray namespace the package names its actors in: the cluster handle lists them there, and the
jobs and engine actors it starts are created in it (a module of its own, below both)."""

NAMESPACE = "rlfactory_nb"
"""the Ray namespace of every actor this package names (jobs are found by name in it)"""
