"""The package ships tiny-calculator built (issue 17): from the current recipe, intact, used without a
build, and rebuilt by one command. Fast: nothing here trains a model."""

import time

import pytest

from rlfactory_nb.cli import main
from rlfactory_nb.models import presets
from rlfactory_nb.models.presets import shipped
from rlfactory_nb.models.presets.shipped import Manifest, file_digests, shipped_folder

NAME = "tiny-calculator"
REBUILD = f"rlfactory-nb preset build {NAME} --ship"


@pytest.mark.parametrize("name", presets.PRESETS)
def test_shipped_preset_is_built_from_the_current_recipe(name):
    rebuild = f"rlfactory-nb preset build {name} --ship"
    manifest = Manifest.read(shipped_folder(name))
    assert manifest is not None, f"no shipped {name} preset: run `{rebuild}` and commit it"
    assert manifest.recipe_hash == presets.preset_hash(name), (
        f"the recipe changed (hash {presets.preset_hash(name)}) but the shipped preset was built from "
        f"{manifest.recipe_hash}: run `{rebuild}` and commit rlfactory_nb/models/presets/built/"
    )
    assert manifest.recipe_version == presets.RECIPE_VERSION


def test_the_guess_preset_depends_on_the_calculator_weights_it_starts_from(monkeypatch):
    before = presets.preset_hash("tiny-guess")
    monkeypatch.setattr(presets, "recipe_hash", lambda *args: "0123456789ab")
    assert presets.preset_hash("tiny-guess") != before  # a new tiny-calculator means a new tiny-guess


@pytest.mark.parametrize("name", presets.PRESETS)
def test_manifest_digests_match_the_shipped_files(name):
    folder = shipped_folder(name)
    assert file_digests(folder) == Manifest.read(folder).files
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(Manifest.read(folder).files)


def refuse_to_build(path, *args, **kwargs):
    raise AssertionError(f"built {path} although the shipped preset matches the recipe")


def test_preset_path_returns_the_shipped_folder_without_building_or_writing(tmp_path, monkeypatch):
    monkeypatch.setenv("RLFACTORY_NB_CACHE", str(tmp_path))
    monkeypatch.setattr(presets, "build_tiny_calculator", refuse_to_build)
    logged = []
    start = time.monotonic()
    path = presets.preset_path(NAME, log=logged.append)
    assert time.monotonic() - start < 2
    assert path == shipped_folder(NAME)
    assert logged == [] and list(tmp_path.iterdir()) == []


def test_loading_the_shipped_preset_writes_nothing(tmp_path, monkeypatch):
    from rlfactory_nb.models.policy import Policy

    monkeypatch.setenv("RLFACTORY_NB_CACHE", str(tmp_path))
    monkeypatch.setattr(presets, "build_tiny_calculator", refuse_to_build)
    policy = Policy.load(NAME, device="cpu", log=print)
    assert policy.path == shipped_folder(NAME) and 0.5e6 < policy.num_parameters < 2e6
    assert file_digests(policy.path) == Manifest.read(policy.path).files  # and no new files
    assert list(tmp_path.iterdir()) == []


def test_stale_shipped_preset_falls_back_to_a_cached_build_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("RLFACTORY_NB_CACHE", str(tmp_path))
    monkeypatch.setattr(presets, "recipe_hash", lambda *args: "0123456789ab")
    built = []

    def fake_build(path, log=print):
        path.mkdir(parents=True)
        (path / "config.json").write_text("{}")
        built.append(path)
        return path

    monkeypatch.setattr(presets, "build_tiny_calculator", fake_build)
    logged = []
    path = presets.preset_path(NAME, log=logged.append)
    assert path == tmp_path / f"{NAME}-0123456789ab" and built == [path]
    assert len(logged) == 1 and "out of date" in logged[0] and REBUILD in logged[0]
    assert presets.preset_path(NAME, log=logged.append) == path and len(built) == 1  # cached now


def test_a_copy_without_its_weights_falls_back_to_the_cache(tmp_path, monkeypatch):
    partial = tmp_path / "built" / NAME
    partial.mkdir(parents=True)
    for file in shipped_folder(NAME).iterdir():
        if file.name != "model.safetensors":
            (partial / file.name).write_bytes(file.read_bytes())
    monkeypatch.setattr(shipped, "BUILT", tmp_path / "built")
    monkeypatch.setattr(presets, "cached_preset", lambda name, log: tmp_path / "cache")
    logged = []
    assert presets.preset_path(NAME, log=logged.append) == tmp_path / "cache"
    assert len(logged) == 1 and "lacks model.safetensors" in logged[0]


def test_a_job_launched_from_this_repository_ships_the_preset_weights():
    """Ray puts a job's working_dir copy first on PYTHONPATH, so the driver loads this copy's preset."""
    from ray._private.thirdparty.pathspec import PathSpec  # the matcher Ray applies to `excludes`

    from rlfactory_nb.cluster.shipping import EXCLUDES

    excluded = PathSpec.from_lines("gitwildmatch", EXCLUDES).match_file
    assert not excluded(f"rlfactory_nb/models/presets/built/{NAME}/model.safetensors")
    assert excluded("checkpoints/step_000001/model.safetensors")


def test_preset_build_ship_copies_the_build_with_its_manifest(tmp_path, monkeypatch, capsys):
    build = tmp_path / "cache" / f"{NAME}-0123456789ab"
    build.mkdir(parents=True)
    (build / "config.json").write_text('{"model_type": "qwen3"}')
    (build / "model.safetensors").write_bytes(b"weights")
    monkeypatch.setattr(presets, "cached_preset", lambda name: build)
    monkeypatch.setattr(presets, "recipe_hash", lambda *args: "0123456789ab")
    monkeypatch.setattr(shipped, "BUILT", tmp_path / "built")
    (tmp_path / "built" / NAME).mkdir(parents=True)
    (tmp_path / "built" / NAME / "stale.bin").write_bytes(b"old")

    assert main(["preset", "build", NAME, "--ship"]) == 0
    folder = tmp_path / "built" / NAME
    manifest = Manifest.read(folder)
    assert manifest == Manifest("0123456789ab", presets.RECIPE_VERSION, file_digests(folder))
    assert sorted(manifest.files) == ["config.json", "model.safetensors"]  # the old copy is replaced whole
    assert str(folder) in capsys.readouterr().out


def test_unknown_preset_is_an_error_naming_the_presets():
    with pytest.raises(ValueError, match="tiny-calculator"):
        presets.preset_path("huge-calculator")
