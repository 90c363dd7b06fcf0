"""Layout rules for ``orin_rl`` and ``tools/``: no import cycles, imports run one way, none of
orin_rl's own modules imported by name (``importlib.import_module``), no module over 600 lines,
no function in ``orin_rl`` over 100.

The import graph is read from the source with ``ast``; nothing is imported. Every import
statement counts, lazy ones inside functions included (``a`` importing ``b`` in a function while
``b`` imports ``a`` is still a cycle), and those under ``if TYPE_CHECKING:`` too (a name needed
only for typing is a circle all the same: a ``Protocol`` breaks it). An edge goes to
the module imported: ``from orin_rl.x import y`` to ``orin_rl.x.y`` where that is a module, else
to ``orin_rl.x``. No edge goes from a module to its parent packages, so a package ``__init__``
that re-exports its submodules is no cycle. The tools are scripts: ``tools/`` is ``sys.path[0]``
when they run, so a bare ``import bench_train`` there is ``tools.bench_train``, as is
``from tools.bench_train import ...``. Only edges between modules of orin_rl and tools count.
"""

from __future__ import annotations

import ast
import re
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOPS = ("orin_rl", "tools")
MAX_LINES = 600
MAX_FUNCTION_LINES = 100
# Imports that run the wrong way (docs/design.md): no module of a key's package (or the key module)
# imports a module of the packages it names. Each rule is the architecture whiteboard's
# (../shared/DESIGN.md, "Layout", "Contracts"), quoted above it.
_CLI, _RUNNERS, _ALGORITHMS = "orin_rl.cli", "orin_rl.runners", "orin_rl.algorithms"
_EXPORT, _RUNTIME = "orin_rl.export", "orin_rl.runtime"
# "Imports run one way: cli → runners → algorithms → (models, buffers, envs, config); cli →
# export / runtime → bundle. [...] Nothing low imports something high": the bottom rooms import
# no room above them; export and runtime import models, envs and config, never the other way.
_BOTTOM = (_CLI, _RUNNERS, _ALGORITHMS, _EXPORT, _RUNTIME)
# "a plant never imports a loop" ("Plants never import loops"): the control loop and what runs
# it (runtime's loop, run, robot_run), and the training runners, one loop each.
_LOOPS = (
    "orin_rl.runtime.loop",
    "orin_rl.runtime.run",
    "orin_rl.runtime.robot_run",
    "orin_rl.runners.base",
    "orin_rl.runners.on_policy",
    "orin_rl.runners.off_policy",
    "orin_rl.runners.online",
    "orin_rl.runners.online_actor",
    "orin_rl.runners.online_learner",
)
FORBIDDEN = {
    "orin_rl.runners": (_CLI,),
    "orin_rl.algorithms": (_CLI, _RUNNERS),
    "orin_rl.models": _BOTTOM,
    "orin_rl.buffers": _BOTTOM,
    "orin_rl.envs": _BOTTOM,  # its backends, factory and images modules included
    "orin_rl.config": _BOTTOM,
    "orin_rl.export": (_CLI,),
    # "runtime never imports export, runners or algorithms" (and, below cli, not cli)
    "orin_rl.runtime": (_CLI, _EXPORT, _RUNNERS, _ALGORITHMS),
    # "cli → export / runtime → bundle": the bundle format imports none of them (nor runners)
    "orin_rl.bundle": (_CLI, _EXPORT, _RUNTIME, _RUNNERS),
    # "a plant never imports a loop": the plants of runners/ (gymnasium's, UDP) and robot/'s
    # (Unitree SDK2, ROS 2; the package holds them and what they are made of)
    "orin_rl.runners.plant": _LOOPS,
    "orin_rl.runners.plant_udp": _LOOPS,
    "orin_rl.robot": _LOOPS,
}
# Where orin_rl imports a module by name (``importlib.import_module``, ``__import__``), which
# the import graph cannot see: (module, function) -> the reason. Only the user's modules and
# third-party ones; orin_rl's own are imported with plain import statements, lazily in a
# function where they must load late (envs.backends' loaders, cli.app's commands,
# envs.factory.PROJECT_MODULES, the ``__getattr__`` of orin_rl and orin_rl.envs).
DYNAMIC_IMPORTS_OK = {
    # the user's module of a ``module:EnvId`` id or a config wrapper ``module:function`` (orin_rl's
    # own, ``orin_rl.envs.images``, go through PROJECT_MODULES first)
    ("orin_rl.envs.factory", "import_module"): "the user's env and wrapper modules",
    # ``online.plant: module:factory``, the user's Plant adapter
    ("orin_rl.runners.online", "make_plant"): "the user's plant module",
    # third-party task packages named in ORIN_RL_MJLAB_TASKS, registering mjlab tasks
    ("orin_rl.envs.mjlab", "import_mjlab"): "the user's mjlab task packages",
    # onnx, onnxruntime, onnxslim: an export extra missing is one line saying what to install
    ("orin_rl.export.onnx", "_require"): "third-party export dependencies",
    # ``orin-rl doctor``: each third-party package's version, where it is installed
    ("orin_rl.doctor", "_version"): "third-party packages probed for their version",
}


def _sources(root: Path, tops=TOPS) -> list[Path]:
    files = []
    for top in tops:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root)
            if not any(p.startswith(".") or p == "__pycache__" for p in rel.parts):
                files.append(path)
    return files


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _import_nodes(tree: ast.AST):
    """Every import statement in the tree: lazy ones and ``if TYPE_CHECKING:`` ones included."""
    return (node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom)))


def import_graph(root: Path = ROOT, tops=TOPS) -> dict[str, set[str]]:
    """Module name -> the modules of ``tops`` it imports."""
    files = {_module_name(root, p): p for p in _sources(root, tops)}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        # Where a bare name is looked up first: a tool's own folder (sys.path[0] of a script).
        here = _module_name(root, path.parent) if path.parts[len(root.parts)] == "tools" else ""
        prefixes = [f"{here}.", ""] if here else [""]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _import_nodes(tree):
            search = prefixes
            if isinstance(node, ast.Import):
                wanted = [(alias.name, None) for alias in node.names]
            elif node.level:  # relative: from the package this module is in (or is)
                base = name if is_package else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
                wanted, search = [(base, alias.name) for alias in node.names], [""]
            else:
                wanted = [(node.module, alias.name) for alias in node.names]
            for module, attr in wanted:
                for prefix in search:
                    full = prefix + module
                    target = f"{full}.{attr}" if f"{full}.{attr}" in files else full
                    if target in files:
                        if target != name:
                            graph[name].add(target)
                        break
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(groups)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """For each edge inside a strongly connected group, the shortest cycle through it
    (``[a, b, a]``), each cycle once, starting at its smallest module."""
    found = set()
    for group in strongly_connected(graph):
        members = set(group)
        for u in group:
            for v in sorted(graph[u] & members):
                prev = {v: None}  # breadth-first from v back to u, inside the group
                queue = deque([v])
                while queue and u not in prev:
                    node = queue.popleft()
                    for nxt in sorted(graph[node] & members):
                        if nxt not in prev:
                            prev[nxt] = node
                            queue.append(nxt)
                path = [u]
                while path[-1] != v:
                    path.append(prev[path[-1]])
                ring = [u, *reversed(path[1:])]  # u -> v -> ... -> (back to) u
                first = ring.index(min(ring))
                found.add(tuple(ring[first:] + ring[:first]))
    return [[*ring, ring[0]] for ring in sorted(found)]


def test_no_import_cycles():
    graph = import_graph()
    assert "orin_rl" in graph and any(m.startswith("tools.") for m in graph)
    found = cycles(graph)
    groups = strongly_connected(graph)
    report = [f"{len(found)} import cycles in {len(groups)} groups of modules:"]
    for group in groups:
        report.append(f"  group: {', '.join(group)}")
        report += ["    " + " -> ".join(c) for c in found if c[0] in group]
    assert not found, "\n".join(report)


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def wrong_way(graph: dict[str, set[str]], rules=FORBIDDEN) -> list[str]:
    """Every edge ``a -> b`` that a rule forbids, sorted."""
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for package, banned in rules.items()
        if _inside(module, package)
        for target in targets
        if any(_inside(target, b) for b in banned)
    )


def test_imports_run_one_way():
    """A robot's runtime carries no exporter, runner or algorithm (lazy imports count)."""
    found = wrong_way(import_graph())
    assert not found, "imports that run the wrong way (see docs/design.md):\n  " + "\n  ".join(
        found
    )


def dynamic_imports(path: Path, module: str) -> list[tuple[str, str, int]]:
    """``(module, function, line)`` for each ``importlib.import_module(...)`` or ``__import__(...)``
    call in ``path`` (``function`` is the dotted name of the def around it, ``<module>`` at the
    top level; an ``import_module`` taken ``from importlib`` counts too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    aliases = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "importlib" and not node.level
        for alias in node.names
        if alias.name == "import_module"
    }
    found = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        if isinstance(node, ast.Call):
            func = node.func
            by_name = isinstance(func, ast.Name) and (func.id == "__import__" or func.id in aliases)
            by_attribute = isinstance(func, ast.Attribute) and (
                func.attr == "__import__"
                or (
                    func.attr == "import_module"
                    and isinstance(func.value, ast.Name)
                    and func.value.id == "importlib"
                )
            )
            if by_name or by_attribute:
                found.append((module, ".".join(scope) or "<module>", node.lineno))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = [*scope, node.name]
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(tree, [])
    return found


def test_imports_by_name_are_the_users_or_third_party():
    """The import graph sees import statements only: orin_rl imports a module by name only where
    the name is the user's or a third party's (``DYNAMIC_IMPORTS_OK``, each with its reason)."""
    allowed = DYNAMIC_IMPORTS_OK.keys()
    found = [
        hit for path in _sources(ROOT) for hit in dynamic_imports(path, _module_name(ROOT, path))
    ]
    unknown = [f"  {m} ({f}, line {n})" for m, f, n in found if (m, f) not in allowed]
    assert not unknown, (
        "modules imported by name, which the layout test cannot see: import orin_rl's own with "
        "an import statement (lazily inside a function if need be); a user's or third-party "
        "module by name goes into DYNAMIC_IMPORTS_OK with its reason:\n" + "\n".join(unknown)
    )
    stale = allowed - {(m, f) for m, f, _ in found}
    assert not stale, f"stale DYNAMIC_IMPORTS_OK entries: {sorted(stale)}"


def test_project_strings_name_explicit_modules():
    """A ``module:name`` string of orin_rl naming one of its own modules (a preset's
    ``orin_rl.envs.images:atari`` wrapper) names one of ``envs.factory.PROJECT_MODULES``, which
    are imported with import statements, not by name."""
    from orin_rl.envs.factory import PROJECT_MODULES

    spec = re.compile(r"orin_rl(\.\w+)*:\w+(\.\w+)*")
    named = [
        (f"{path.relative_to(ROOT).as_posix()}:{node.lineno}", node.value)
        for path in _sources(ROOT, ("orin_rl",))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]
    named = [(where, text) for where, text in named if spec.fullmatch(text)]
    assert named, "no project module:name strings found (the presets' image wrappers are some)"
    unknown = [f"  {w}: {t}" for w, t in named if t.partition(":")[0] not in PROJECT_MODULES]
    assert not unknown, "orin_rl's modules named in strings, not in PROJECT_MODULES:\n" + (
        "\n".join(unknown)
    )


def test_no_module_over_600_lines():
    too_long = []
    for path in _sources(ROOT):
        rel = path.relative_to(ROOT).as_posix()
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            too_long.append(f"  {rel}: {lines} lines")
    assert not too_long, f"modules over {MAX_LINES} lines (split them by meaning):\n" + "\n".join(
        too_long
    )


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``name (line): N lines`` for each function in ``path`` longer than ``limit``, from its
    ``def`` to its last line (nested functions count in their parent's length too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        f"{node.name} (line {node.lineno}): {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_no_function_over_100_lines():
    """A function is read whole: split a long one by meaning (the old fused.py's ``build_kernels`` was
    674 lines, its ``grads`` kernel 268: this check failed on it)."""
    too_long = [
        f"  {path.relative_to(ROOT).as_posix()}: {entry}"
        for path in _sources(ROOT, ("orin_rl",))
        for entry in long_functions(path)
    ]
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(too_long)


def test_long_functions_reader(tmp_path):
    """The length is the def's whole span, nested functions included."""
    body = "".join(f"        x{i} = {i}\n" for i in range(5))
    path = tmp_path / "m.py"
    path.write_text(
        f"def outer():\n    def inner():\n{body}    return 1\n\ndef short():\n    pass\n"
    )
    assert long_functions(path, limit=7) == ["outer (line 1): 8 lines"]
    assert long_functions(path, limit=5) == ["outer (line 1): 8 lines", "inner (line 2): 6 lines"]


def test_import_graph_reader(tmp_path):
    """The reader on a made-up tree: lazy, relative and TYPE_CHECKING imports count,
    re-exports through a package __init__ do not, bare tool imports resolve to tools/."""
    files = {
        "orin_rl/__init__.py": "from orin_rl.a import A\n",
        "orin_rl/a.py": "A = 1\ndef f():\n    from orin_rl import b\n",
        "orin_rl/b.py": "from .a import A\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from orin_rl.c import C\n",
        "orin_rl/c.py": "import orin_rl.b\nC = 1\n",
        "orin_rl/sub/__init__.py": "from .d import D\nfrom .. import c\n",
        "orin_rl/sub/d.py": "import orin_rl.sub\nD = 1\n",
        "tools/x.py": "import y\n",
        "tools/y.py": "def main():\n    from tools.x import main\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    graph = import_graph(tmp_path)
    assert graph["orin_rl"] == {"orin_rl.a"}
    assert graph["orin_rl.b"] == {"orin_rl.a", "orin_rl.c"}
    assert graph["orin_rl.sub"] == {"orin_rl.sub.d", "orin_rl.c"}
    assert wrong_way(graph, {"orin_rl.sub": ("orin_rl.c",), "orin_rl.c": ("orin_rl.a",)}) == [
        "orin_rl.sub -> orin_rl.c"
    ]
    assert cycles(graph) == [
        ["orin_rl.a", "orin_rl.b", "orin_rl.a"],
        ["orin_rl.b", "orin_rl.c", "orin_rl.b"],
        ["orin_rl.sub", "orin_rl.sub.d", "orin_rl.sub"],
        ["tools.x", "tools.y", "tools.x"],
    ]


def test_dynamic_imports_reader(tmp_path):
    """The finder on a made-up module: importlib's and the builtin's, a local ``import_module``
    of another meaning left out."""
    path = tmp_path / "m.py"
    path.write_text(
        "import importlib\nfrom importlib import import_module as im\n__import__('a')\n"
        "class C:\n    def f(self):\n        importlib.import_module('b')\n"
        "def g():\n    def h():\n        im('c')\n    return import_module('d')\n"
    )
    assert dynamic_imports(path, "m") == [("m", "<module>", 3), ("m", "C.f", 6), ("m", "g.h", 9)]
