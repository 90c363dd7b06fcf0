"""Write docs/benchmarks/index.md: every benchmark under docs/benchmarks/, from its JSON.

    python tools/benchmarks_index.py            # rewrites docs/benchmarks/index.md
    python tools/benchmarks_index.py --check    # exit 1 if the index is not up to date

A benchmark is a JSON record with its Markdown report beside it (``NAME.json`` + ``NAME.md``),
or a JSON record that names its command. Its row says what it measures (the report's title,
else the record's own ``what``/``benchmark``, else a line below), where it ran (the record's
``machine``, else the report's first line), when (the record's ``date``, else the report's
first date) and the command that made it (the record's ``command``, else the report's first
``python``/``bash`` command), and links every file that shares its name (``NAME_*``: plots,
metrics, summaries, logs). Files that belong to no benchmark (test logs, profiles) are listed
as raw records. ``history/`` holds superseded runs, listed apart; the guides cite only the
current ones. tests/test_docs.py holds the index to this script's output and every file under
docs/benchmarks/ to a link of it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "docs" / "benchmarks"
INDEX = BENCH / "index.md"
HISTORY = "history"
MACHINE = re.compile(r"^[^|]*\b(CPUs?|GPU|H200|x86_64|cores)\b")  # a report's machine line

# What a record does not say about itself (a JSON without a report or a "what"; a raw log).
WHAT = {
    "mjlab_run_go1_cuda_h200.json": "`orin-rl run` report: the 2026-12-02 Go1 policy for 3,000 "
    "ticks at 50 Hz, its mjlab world on CUDA as graphs (latency, falls, tracking error)",
    "mjlab_run_go1_h200.json": "`orin-rl run` report: the 2026-12-02 Go1 policy for 3,000 "
    "ticks at 50 Hz, its mjlab world on the CPU",
    "mjlab_solver_h200.json": "MuJoCo Warp's solver iterations per world under mjlab's step "
    "and ours (`tools/diagnose_mjlab_solver.py`)",
    "sim2sim_g1_training_summary_h200.json": "`summary.json` of the G1 policy that "
    "`sim2sim_g1_h200` runs on the twin",
    "doctor_cpu.txt": "`orin-rl doctor` on the 2-core CPU box",
    "doctor_h200.txt": "`orin-rl doctor` on the H200 box",
    "gpu_capture_test_h200.log": "pytest output: the capture-recovery `gpu` test on the H200",
    "gpu_mjlab_graphed_step_h200_20261203.log": "pytest output: the graphed mjlab step's "
    "`gpu` tests on the H200, 2026-12-03",
    "gpu_tests_compile_update_h200.log": "pytest output: the compiled update's `gpu` tests on "
    "the H200",
    "gpu_tests_ort_cuda_ep_h200.log": "pytest output: ONNX Runtime's CUDA EP `gpu` tests on the "
    "H200",
    "gpu_tests_update_graphs_h200.log": "pytest output: the graphed update's `gpu` tests on the "
    "H200, 2026-12-04",
    "mjlab_graphs_gpu_test_h200.log": "pytest output: the mjlab graphs' `gpu` tests on the H200",
    "ncu_grads_seeds512_h200.txt": "Nsight Compute of the fused update's gradient kernel, "
    "512 agents, on the H200 (`fused.md`)",
    "startup_profile_single_h200.txt": "cProfile of one training process on the H200 (`fused.md`)",
}


@dataclass
class Benchmark:
    """One benchmark: its record (NAME.json), report (NAME.md) and companion files."""

    name: str
    folder: Path
    files: list[Path] = field(default_factory=list)

    def _record(self) -> dict:
        path = self.folder / f"{self.name}.json"
        data = json.loads(path.read_text()) if path.is_file() else {}
        if not isinstance(data, dict):
            return {}
        return {**data.get("meta", {}), **data} if isinstance(data.get("meta"), dict) else data

    def _report(self) -> list[str]:
        path = self.folder / f"{self.name}.md"
        return path.read_text().splitlines() if path.is_file() else []

    def row(self) -> dict[str, str]:
        """what, where, when, command: from the record, else from the report."""
        record, report = self._record(), self._report()
        head = " ".join(report[:4])
        title = report[0].lstrip("# ").strip() if report else ""
        what = (
            title
            or record.get("what")
            or WHAT.get(f"{self.name}.json")
            or record.get("benchmark")
            or "—"
        )
        where = record.get("machine")
        if isinstance(where, dict):
            where = ", ".join(f"{k} {v}" for k, v in where.items())
        if not where and len(report) > 2 and MACHINE.search(report[2].split("`", 1)[0]):
            where = report[2].split("`", 1)[0].split(". Command", 1)[0].strip(" .:")
        when = record.get("date")
        if not when:
            found = re.search(r"\d{4}-\d{2}-\d{2}", head)
            when = found.group(0) if found else "—"
        command = record.get("command") or record.get("commands")
        if isinstance(command, list) and all(isinstance(c, str) for c in command):
            command = "; ".join(command)
        if not isinstance(command, str):  # a count, or a list of commanded velocities
            command = None
        if not command:
            found = re.search(r"`((?:python3?|bash) [^`]+)`", "\n".join(report[:6]))
            command = found.group(1) if found else "—"
        return {"what": str(what), "where": str(where or "—"), "when": str(when),
                "command": str(command)}  # fmt: skip


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def collect(folder: Path) -> tuple[list[Benchmark], list[Path]]:
    """The benchmarks of ``folder`` (not its subfolders' benchmarks) and its raw records."""
    files = sorted(
        p
        for p in folder.rglob("*")
        if p.is_file()
        and p != INDEX
        and "__pycache__" not in p.parts
        and (folder != BENCH or HISTORY not in p.relative_to(folder).parts)
    )
    names = {p.relative_to(folder).as_posix() for p in files}
    reported = sorted({n[:-5] for n in names if n.endswith(".json") and f"{n[:-5]}.md" in names})

    def owner(rel: str, stems: list[str]) -> str | None:
        hits = [
            s for s in stems if rel == f"{s}.json" or rel == f"{s}.md" or rel.startswith(s + "_")
        ]
        hits += [s for s in stems if rel.startswith(s + ".")]
        return max(hits, key=len) if hits else None

    benchmarks = {s: Benchmark(s, folder) for s in reported}
    rest = []
    for path in files:
        rel = path.relative_to(folder).as_posix()
        stem = owner(rel, reported)
        if stem:
            benchmarks[stem].files.append(path)
        elif rel.endswith(".json") and "/" not in rel:
            benchmarks[rel[:-5]] = Benchmark(rel[:-5], folder, [path])
        else:
            rest.append(path)
    standalone = sorted(s for s in benchmarks if s not in reported)
    raw = []
    for path in rest:
        stem = owner(path.relative_to(folder).as_posix(), standalone)
        (benchmarks[stem].files.append(path) if stem else raw.append(path))
    return sorted(benchmarks.values(), key=lambda b: b.name), raw


def _table(benchmarks: list[Benchmark]) -> list[str]:
    lines = [
        "| benchmark | what | where | when | command | files |",
        "|---|---|---|---|---|---|",
    ]
    for bench in benchmarks:
        row = bench.row()
        main = bench.folder / f"{bench.name}.md"
        main = main if main.is_file() else bench.folder / f"{bench.name}.json"
        link = main.relative_to(BENCH).as_posix()
        others = [p for p in bench.files if p != main]
        files = ", ".join(f"[{p.name}]({p.relative_to(BENCH).as_posix()})" for p in others)
        lines.append(
            f"| [{bench.name}]({link}) | {_cell(row['what'])} | {_cell(row['where'])} "
            f"| {row['when']} | `{_cell(row['command'])}` | {files or '—'} |"
        )
    return lines


def _raw(raw: list[Path]) -> list[str]:
    lines = []
    for path in raw:
        what = WHAT.get(path.name, "raw output")
        lines.append(
            f"- [{path.relative_to(BENCH).as_posix()}]({path.relative_to(BENCH).as_posix()}): {what}"
        )
    return lines


def render() -> str:
    """The index's text."""
    current, raw = collect(BENCH)
    history, history_raw = collect(BENCH / HISTORY)
    lines = [
        "# Benchmarks",
        "",
        "<!-- generated by tools/benchmarks_index.py from the records below; do not edit -->",
        "",
        "Every figure in the README and the guides comes from one of these records. Each script in",
        "`tools/` measures ours against a baseline run on the same machine in the same call, except",
        "the figures a report marks as quoted (PureJaxRL's and CleanRL's in `train_h200.md`, seed",
        "001's Humanoid figure in `locomotion_h200.md`: quoted from the issues, not run there).",
        "What, where and when come from each record (its JSON, else its report's first lines);",
        "`python tools/benchmarks_index.py` rewrites this page.",
        "",
        "## Current",
        "",
        *_table(current),
        "",
        "## Raw records",
        "",
        "Test logs and profiles the reports and guides point to.",
        "",
        *_raw(raw),
        "",
        "## History",
        "",
        "Superseded runs, kept for comparison; the guides cite the current ones above.",
        "",
        *_table(history),
    ]
    if history_raw:
        lines += ["", *_raw(history_raw)]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the index is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        if INDEX.read_text() != text:
            print(f"{INDEX} is out of date: run python tools/benchmarks_index.py", file=sys.stderr)
            return 1
        return 0
    INDEX.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
