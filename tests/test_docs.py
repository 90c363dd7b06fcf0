"""The documentation site (issue 56): it builds with MkDocs, warnings as errors; every shell
block of the README and the guides is run by a named test or says why not; the README's
command lines are those of docs/getting-started.md's list, which tests/test_readme.py runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CONFIG = DOCS / "mkdocs" / "mkdocs.yml"
SHELLS = ("bash", "sh", "shell", "console")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
RUN = re.compile(r"^<!-- run: (tests/[\w/]+\.py)::(\w+) -->$")
NOT_RUN = re.compile(r"^<!-- not run: (.+\S) -->$")


def _guides() -> list[Path]:
    """README.md and every guide (benchmark records are results, not instructions)."""
    pages = sorted(p for p in DOCS.rglob("*.md") if "benchmarks" not in p.relative_to(DOCS).parts)
    return [ROOT / "README.md", *pages]


def _shell_blocks(path: Path) -> list[tuple[str, str]]:
    """(marker line, block) for each shell block of ``path``: the marker is the last non-blank
    line before the fence."""
    text = path.read_text()
    found = []
    for match in FENCE.finditer(text):
        lang, body = match.groups()
        if lang not in SHELLS and not (lang == "" and body.lstrip().startswith("orin-rl ")):
            continue
        before = [line for line in text[: match.start()].splitlines() if line.strip()]
        found.append((before[-1].strip() if before else "", body))
    return found


def test_the_site_builds_strict(tmp_path):
    """``mkdocs build --strict``: a broken link, anchor or nav entry fails it (seconds)."""
    pytest.importorskip("mkdocs", reason="MkDocs is in the dev extra: make install")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "-f", str(CONFIG), "--strict",
         "--site-dir", str(tmp_path / "site")],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "site" / "deploy-g1" / "index.html").is_file()
    assert (tmp_path / "site" / "benchmarks" / "index.html").is_file()


@pytest.mark.parametrize("page", _guides(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shell_block_is_run_or_says_why(page):
    """Each shell block is preceded by ``<!-- run: tests/FILE.py::TEST -->`` naming a test that
    exists, or ``<!-- not run: why -->``."""
    for marker, body in _shell_blocks(page):
        run, not_run = RUN.match(marker), NOT_RUN.match(marker)
        assert run or not_run, f"{page.name}: no run/not-run marker before\n{body}"
        if run:
            source = (ROOT / run.group(1)).read_text()
            assert f"def {run.group(2)}(" in source, f"{page.name}: {marker} names no test"


def test_the_readme_commands_are_the_getting_started_list():
    """The README's few command lines are lines of the list tests/test_readme.py runs."""
    listed = FENCE.search(
        (DOCS / "getting-started.md").read_text().split("## What to do next", 1)[1]
    ).group(2)
    listed_lines = [" ".join(line.split()) for line in listed.splitlines()]
    readme = [body for _, body in _shell_blocks(ROOT / "README.md")]
    lines = [line for body in readme for line in body.splitlines() if line.startswith("orin-rl")]
    assert len(lines) >= 4, lines
    for line in lines:
        command = " ".join(line.split("#", 1)[0].split())
        assert any(x.startswith(command) for x in listed_lines), line


# ---------------------------------------------------------------- docs/benchmarks/ (issue 56)
BENCH = DOCS / "benchmarks"
CITED = re.compile(r"[\w./-]+\.(?:md|json|jsonl|png|txt|log)\b")


def _index_tool():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "benchmarks_index", ROOT / "tools" / "benchmarks_index.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_the_benchmarks_index_is_up_to_date():
    """docs/benchmarks/index.md is what tools/benchmarks_index.py writes from the records."""
    assert (BENCH / "index.md").read_text() == _index_tool().render(), (
        "stale: run python tools/benchmarks_index.py"
    )


def test_every_benchmark_file_is_linked_from_the_index():
    """Nothing under docs/benchmarks/ is unreferenced: the index links every file."""
    index = (BENCH / "index.md").read_text()
    linked = {(BENCH / target).resolve() for target in re.findall(r"\]\(([^)#\s]+)\)", index)}
    files = [p for p in BENCH.rglob("*") if p.is_file() and p.name != "index.md"]
    files = [p for p in files if "__pycache__" not in p.parts]
    assert len(files) > 100
    missing = sorted(str(p.relative_to(BENCH)) for p in files if p.resolve() not in linked)
    assert not missing, missing
    assert all(p.is_file() for p in linked), sorted(str(p) for p in linked if not p.is_file())


def test_the_readme_and_guides_cite_only_current_benchmarks():
    """A benchmark file the README or a guide names is a current one (not history/), and it
    exists."""
    current = {p.name for p in BENCH.iterdir() if p.is_file()}
    history = {p.name for p in (BENCH / "history").rglob("*") if p.is_file()}
    for page in _guides():
        text = page.read_text()
        assert "benchmarks/history" not in text, page
        for cited in CITED.findall(text):
            name = cited.rsplit("/", 1)[-1]
            assert not (name in history and name not in current), f"{page.name} cites {cited}"
            if "benchmarks/" in cited:
                assert name in current, f"{page.name} cites {cited}, which is not there"
