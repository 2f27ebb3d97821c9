"""Cluster settings of the run config reach the local Ray that `launch` starts (without starting one here)."""

import pytest

import rlfactory_nb as rf
from rlfactory_nb.cluster import launcher
from rlfactory_nb.config import RunConfig


class Connected(Exception):
    """Raised in place of starting Ray, carrying what launch asked for."""


def test_launch_starts_its_local_ray_with_the_configured_object_store(monkeypatch, tmp_path):
    def connect(address=None, **options):
        raise Connected(address, options)

    monkeypatch.setattr(launcher.Cluster, "connect", connect)
    cfg = RunConfig.from_dict({"name": "store", "output_dir": str(tmp_path), "cluster": {"object_store_memory_gb": 3.5}})
    with pytest.raises(Connected) as asked:
        rf.launch(cfg)
    address, options = asked.value.args
    assert address is None and options["object_store_memory_gb"] == 3.5
