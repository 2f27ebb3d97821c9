"""No file cites a file the repository lacks: a `NOTES.md` or `tests/x.py` named in a docstring or a
document must be there for the reader who follows it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = ("docs", "tests", "bench", "examples", "notebooks", "scripts", "rlfactory_nb")
CITED = re.compile(r"(?<![\w/.~-])((?:" + "|".join(TOP) + r")/[\w./-]*\w|[A-Z][A-Z_]+\.md)")
TEXT = (".py", ".md", ".yaml", ".yml", ".ipynb", ".toml", ".sh", ".jinja")
ALLOWED = {
    ("tests/test_examples.py", "examples/calculator/mine.py"): "a path the test resolves on purpose, never read",
    ("tests/test_citations.py", "*"): "this file's own examples of citations",
    ("rlfactory_nb/examples.py", "examples/calculator/reward.py"): "the planted file of a past attack, named as such",
    ("rlfactory_nb/examples.py", "examples/x/reward.py"): "the shape of a config value, not a file",
    ("docs/security.md", "examples/calculator/reward.py"): "the planted file of a past attack, named as such",
    ("tests/faults/test_project_folder.py", "examples/planted/reward.py"): "the file the test plants",
    ("bench/tool_parsers.py", "SOURCES.md"): "the reference templates' own file, outside the repository",
}


def cited(text: str) -> set[str]:
    """The repository paths `text` names: a top-level folder and a path, or an upper-case .md."""
    return {match.rstrip(".") for match in CITED.findall(text)}


def missing(path: Path, names: set[str]) -> list[str]:
    found = []
    for name in sorted(names):
        candidates = [ROOT / name, path.parent / name]
        if not any(c.exists() or any(c.parent.glob(c.name + "*")) for c in candidates):
            found.append(name)
    return found


def test_every_cited_file_exists():
    problems = []
    for path in sorted(p for p in ROOT.rglob("*") if p.suffix in TEXT and ".git" not in p.parts and ".venv" not in p.parts and ".venv-openenv" not in p.parts):
        if "runs" in path.relative_to(ROOT).parts[:1]:
            continue
        relative = path.relative_to(ROOT).as_posix()
        for name in missing(path, cited(path.read_text(encoding="utf-8", errors="replace"))):
            if (relative, name) not in ALLOWED and (relative, "*") not in ALLOWED:
                problems.append(f"{relative} cites {name}")
    assert not problems, "\n".join(problems)


def test_a_missing_citation_is_found():
    assert cited("as measured (NOTES.md); see docs/gpu.md and tests/train/test_update.py.") == {
        "NOTES.md", "docs/gpu.md", "tests/train/test_update.py"}
    assert missing(ROOT / "README.md", {"NOTES.md", "docs/gpu.md"}) == ["NOTES.md"]
