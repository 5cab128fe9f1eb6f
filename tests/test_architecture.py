"""The app/tuner boundary and the TensorFlow boundary, checked by tools rather than hoped for."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def test_engine_imports_with_qt_and_tensorflow_absent() -> None:
    """Every engine module outside the worker imports in a Python where Qt, pyqtgraph and
    TensorFlow cannot be imported at all."""
    script = textwrap.dedent("""
        import importlib, pkgutil, sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {"PySide6", "shiboken6", "pyqtgraph", "tensorflow",
                                          "keras", "tf_keras"}:
                    raise ImportError(f"blocked for this test: {name}")
                return None

        sys.meta_path.insert(0, Block())
        import tuner
        for info in pkgutil.walk_packages(tuner.__path__, "tuner."):
            if info.name.startswith("tuner.worker") or info.name in (
                    "tuner.__main__", "tuner.keras_setup", "tuner.workloads"):
                continue
            importlib.import_module(info.name)
        from tuner.cli import main
        assert main(["detect", "--json"]) == 0
        print("imported-ok")
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "imported-ok" in proc.stdout


#: What the faces may read by string key: plain tables of their own, the environment, and a
#: trial result's ``step_time_ms`` mapping (percentile -> milliseconds). Engine records (worker
#: messages, the hardware profile, requests) are read by attribute; a key read on anything else
#: fails here, so that a face does not drift back to parsing the engine's dicts.
KEY_READS_ALLOWED = {"env", "TOOLTIPS", "HAZARD_COLOURS", "step_time_ms", "step_time"}


def _receiver(node: ast.expr) -> str:
    """The name a key is read from: ``x`` in ``x["k"]``, ``b`` in ``a.b.get("k")``."""
    while isinstance(node, (ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return type(node).__name__


def _key_reads(path: Path) -> list[tuple[int, str, str]]:
    """Every ``x["key"]`` and ``x.get("key")`` in ``path``: (line, receiver, key)."""
    reads = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key, receiver = node.slice.value, node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            key, receiver = node.args[0].value, node.func.value
        else:
            continue
        if isinstance(key, str):
            reads.append((node.lineno, _receiver(receiver), key))
    return reads


def test_the_faces_read_engine_records_by_attribute() -> None:
    faces = [*sorted((ROOT / "app").glob("*.py")), ROOT / "tuner" / "console.py"]
    found = [
        f"{path.relative_to(ROOT)}:{line}: {receiver}[{key!r}]"
        for path in faces
        for line, receiver, key in _key_reads(path)
        if receiver not in KEY_READS_ALLOWED
    ]
    assert not found, "read by key (use the typed record's attributes):\n" + "\n".join(found)


def test_the_key_read_scan_finds_what_it_is_for(tmp_path: Path) -> None:
    """The scan itself: the old ways of reading a worker message are all found."""
    code = tmp_path / "face.py"
    code.write_text(
        'kind = message["type"]\n'
        'phase = event.message.get("phase", "")\n'
        'step = events[0]["step"]\n'
        'TOOLTIPS["fine"]\n'
    )
    assert [(r, k) for _, r, k in _key_reads(code)] == [
        ("message", "type"),
        ("message", "phase"),
        ("events", "step"),
        ("TOOLTIPS", "fine"),
    ]


def test_the_window_calls_the_engine_it_was_given() -> None:
    """app/ calls no function of tuner.api directly: it calls the engine object it was given
    (the window's ``engine``, a test's fake), so that a fake sees every call. Types and
    constants (``api.SearchSpace(...)``, ``api.BACKENDS``) are values, not calls."""
    found = []
    for path in sorted((ROOT / "app").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "api"
                and node.func.attr[:1].islower()
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: api.{node.func.attr}()")
    assert not found, "call these through the engine:\n" + "\n".join(found)


#: The most lines a module of the engine, and one of its functions (docstring included), may have:
#: past them a module holds more than one idea and a function more than one step.
MODULE_LINES = 800
FUNCTION_LINES = 80


def _oversized(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        where = path.relative_to(root.parent)
        if len(source.splitlines()) > MODULE_LINES:
            found.append(f"{where}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LINES:
                    found.append(f"{where}:{node.lineno} {node.name}(): {length} lines")
    return found


def test_no_engine_module_or_function_is_oversized() -> None:
    """No module of tuner/ over 800 lines and no function over 80 (issue 24): split along the
    seams the code has (docs/architecture.md)."""
    assert _oversized(ROOT / "tuner") == []


def test_the_size_check_finds_what_it_is_for(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES))
    (package / "long.py").write_text(f"def long():\n{body}\n")
    (package / "short.py").write_text("def short():\n    return 1\n")
    assert _oversized(package) == [f"pkg/long.py:1 long(): {FUNCTION_LINES + 1} lines"]


def _drawn_arrows() -> list[tuple[str, str]]:
    """The arrows of docs/architecture.md's ``arrows`` blocks: ``a -> b, c`` lines, names
    relative to ``tuner``."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    arrows = []
    for block in re.findall(r"```arrows\n(.*?)```", text, re.S):
        for line in block.strip().splitlines():
            source, _, targets = line.partition("->")
            arrows += [(source.strip(), t.strip()) for t in targets.split(",")]
    return arrows


def _imports(graph: Any, a: str, b: str) -> bool:
    """Whether a module of ``tuner.a`` imports one of ``tuner.b`` directly."""

    def members(name: str) -> set[str]:
        full = f"tuner.{name}"
        return {m for m in graph.modules if m == full or m.startswith(full + ".")}

    return any(
        graph.direct_import_exists(importer=x, imported=y) for x in members(a) for y in members(b)
    )


def test_the_architecture_page_draws_the_real_imports() -> None:
    """Every arrow docs/architecture.md draws is an import, and every import between two
    floors of the engine, or two modules of the search, is drawn."""
    import grimp

    graph = grimp.build_graph("tuner", exclude_type_checking_imports=True, cache_dir=None)
    drawn = _drawn_arrows()
    assert drawn, "no arrows block in docs/architecture.md"
    missing = [f"{a} -> {b}" for a, b in drawn if not _imports(graph, a, b)]
    assert missing == [], f"drawn but not imported: {missing}"
    floors = ["cli", "console", "cli_arguments", "api", "export", "search", "worker",
              "workloads", "trials", "hardware", "keras_setup", "keras_private", "resources",
              "setup", "knobs", "policies", "errors", "said", "record"]  # fmt: skip
    search = sorted(
        m.removeprefix("tuner.")
        for m in graph.modules
        if m.startswith("tuner.search.") and m.count(".") == 2 and not m.endswith(".stages")
    )
    undrawn = [
        f"{a} -> {b}"
        for group in (floors, search)
        for a in group
        for b in group
        if a != b and _imports(graph, a, b) and (a, b) not in drawn
    ]
    assert undrawn == [], f"imported but not drawn: {undrawn}"


def _defined_names(root: Path, name: str) -> list[str]:
    """Where ``name`` is defined (a class, a function, or a name assigned at module level) in
    the Python files under ``root``."""
    places = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            targets: list[Any] = []
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                targets = [node]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                targets = [t for t in targets if isinstance(t, ast.Name)]
            for target in targets:
                if getattr(target, "name", getattr(target, "id", None)) == name:
                    places.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return places


def test_what_runs_a_trial_is_declared_once(tmp_path: Path) -> None:
    """Issue 36: one ``TrialRunner`` protocol, which api re-exports and the search, the fleet
    and the replay take; no restated ``Callable[..., TrialResult]`` beside it."""
    from tuner import api
    from tuner.trials import protocol

    places = _defined_names(ROOT / "tuner", "TrialRunner")
    assert [place.split(":")[0] for place in places] == ["tuner/trials/protocol.py"]
    assert api.TrialRunner is protocol.TrialRunner
    restated = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "tuner").rglob("*.py"))
        if "Callable[..., TrialResult]" in path.read_text(encoding="utf-8")
    ]
    assert restated == []
    # The scan finds what it is for.
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("TrialRunner = object\nclass TrialRunner: ...\n")
    assert _defined_names(tmp_path / "pkg", "TrialRunner") == ["pkg/a.py:1", "pkg/a.py:2"]


#: Engine files that may name a trial's status as a value: the one place that decides it, and
#: the GPU simulator, which plays back the statuses a real GPU's table recorded.
STATUS_MAKERS = ("tuner/trials/outcome.py", "tuner/trials/lookup.py")


def _statuses_made(root: Path) -> list[str]:
    """Where a ``TrialStatus.X`` is handed on as a value (a call's argument, a returned value,
    a tuple's item): a status made, not one compared or listed in a set."""
    places = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        compared = {
            id(c) for n in ast.walk(tree) if isinstance(n, ast.Compare) for c in n.comparators
        }
        for node in ast.walk(tree):
            values: list[Any] = []
            if id(node) in compared:
                continue  # ``status in (TrialStatus.A, TrialStatus.B)``: read, not made
            if isinstance(node, ast.Call):
                values = [*node.args, *(k.value for k in node.keywords)]
            elif isinstance(node, ast.Return) and node.value is not None:
                values = [node.value]
            elif isinstance(node, ast.Tuple):
                values = list(node.elts)
            for value in values:
                if (
                    isinstance(value, ast.Attribute)
                    and isinstance(value.value, ast.Name)
                    and value.value.id == "TrialStatus"
                    and value.attr.isupper()
                ):
                    places.append(f"{path.relative_to(root.parent).as_posix()}:{value.lineno}")
    return sorted(set(places))


def test_a_status_is_decided_in_one_place(tmp_path: Path) -> None:
    """Issue 36: ``outcome.classify`` (with ``outcome.lost``, a worker lost without a word)
    makes every trial's status; the search, the session and the faces only read one."""
    made = _statuses_made(ROOT / "tuner") + _statuses_made(ROOT / "app")
    assert [p for p in made if not p.startswith(STATUS_MAKERS)] == []
    assert any(p.startswith("tuner/trials/outcome.py") for p in made)
    # The scan finds what it is for, and leaves comparisons alone.
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(
        "def f(spec):\n"
        "    if spec.status is TrialStatus.OK or spec.status in (TrialStatus.OOM,):\n"
        "        return TrialResult(spec, TrialStatus.CRASHED)\n"
        "    return TrialStatus.OOM, None\n"
    )
    assert _statuses_made(tmp_path / "pkg") == ["pkg/a.py:3", "pkg/a.py:4"]


def _methods_planted(root: Path) -> list[str]:
    """Where a module hands another object one of its own methods as an attribute
    (``other.hook = self.method``): a callback planted across objects."""
    places = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign):
                continue
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and not (isinstance(target.value, ast.Name) and target.value.id == "self")
                    and isinstance(node.value, ast.Attribute)
                    and isinstance(node.value.value, ast.Name)
                    and node.value.value.id == "self"
                ):
                    places.append(f"{path.relative_to(root.parent).as_posix()}:{node.lineno}")
    return places


def test_the_search_plants_no_callbacks(tmp_path: Path) -> None:
    """Issue 36, item 5: the evaluator asks the search it serves through one declared protocol
    (``Evaluator.serve``), not through methods the search set on it."""
    assert _methods_planted(ROOT / "tuner" / "search") == []
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(
        "class C:\n    def __init__(self, e):\n        self.x = self.y\n        e.hook = self.f\n"
    )
    assert _methods_planted(tmp_path / "pkg") == ["pkg/a.py:4"]


#: What a method call changes in place.
_MUTATORS = frozenset(
    {"append", "add", "update", "pop", "setdefault", "clear", "extend", "remove", "insert"}
)


def _state_of(path: Path, cls: str) -> set[str]:
    """The attributes ``cls`` sets on itself in its ``__init__`` (its state)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    init = next(
        f
        for c in tree.body
        if isinstance(c, ast.ClassDef) and c.name == cls
        for f in c.body
        if isinstance(f, ast.FunctionDef) and f.name == "__init__"
    )
    return {
        t.attr
        for node in ast.walk(init)
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    }


def _state_written(root: Path, state: set[str], owner: Path) -> list[str]:
    """Where a module other than ``owner`` changes one of ``state``'s attributes of another
    object: assigns it (``ctx.baseline = m``, ``ctx.leaps[p] = b``) or changes it in place
    (``ctx.notes.append(t)``)."""

    def foreign(node: ast.expr) -> bool:
        """``node`` is ``x.attr`` (or ``x.attr[k]``) with attr in state and x not ``self``."""
        if isinstance(node, ast.Subscript):
            node = node.value
        return (
            isinstance(node, ast.Attribute)
            and node.attr in state
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")
        )

    places: list[tuple[str, int]] = []
    for path in sorted(root.rglob("*.py")):
        if path == owner:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _MUTATORS
            ):
                targets = [node.func.value]
            if any(foreign(t) for t in targets):
                places.append((path.relative_to(root.parent).as_posix(), node.lineno))
    return [f"{name}:{line}" for name, line in sorted(places)]


def test_the_search_state_changes_in_its_own_module(tmp_path: Path) -> None:
    """Issue 36, item 5: what ``SearchContext`` holds that the stages change is changed through
    its own methods, in ``stages/context.py``; the stages say what they found
    (``ctx.abandon(policy, why)``), they do not write the context's attributes."""
    context = ROOT / "tuner" / "search" / "stages" / "context.py"
    state = _state_of(context, "SearchContext")
    assert {"abandoned", "notes", "baseline", "paired", "leaps"} <= state
    assert _state_written(ROOT / "tuner" / "search", state, context) == []
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(
        "def f(ctx, self):\n"
        "    ctx.notes.append(1)\n"
        "    ctx.leaps['a'] = 2\n"
        "    ctx.baseline = 3\n"
        "    self.notes.append(4)\n"
        "    x = ctx.notes\n"
    )
    assert _state_written(tmp_path / "pkg", state, tmp_path / "none.py") == [
        "pkg/a.py:2",
        "pkg/a.py:3",
        "pkg/a.py:4",
    ]


#: The modules of the command-line face: the only ones that word a setting as its flag.
FLAG_SPEAKERS = ("tuner/cli.py", "tuner/cli_arguments.py", "tuner/console.py")
#: Another program's options that happen to be spelled as one of mptune's flags: a training
#: script's own --batch-size, which mptune reads off the script's command line (issue 37).
OTHER_PROGRAMS = {"tuner/trials/models.py": {"--batch-size"}}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants of a module, its classes and functions."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _flags_written(root: Path, flags: set[str]) -> list[str]:
    """Where a string in code (not a docstring, not a comment) holds one of ``flags`` as a
    word: ``--xla`` in "--xla off", not in "--xla_gpu_autotune_level"."""
    places = []
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root.parent).as_posix()
        if where.startswith(FLAG_SPEAKERS):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if id(node) in docs:
                continue
            text = node.value
            for flag in flags - OTHER_PROGRAMS.get(where, set()):
                at = text.find(flag)
                while at >= 0:
                    after = text[at + len(flag) : at + len(flag) + 1]
                    if not after or not (after.isalnum() or after in "-_"):
                        places.append(f"{where}:{node.lineno} {flag}")
                        break
                    at = text.find(flag, at + 1)
    return sorted(set(places))


def test_no_engine_text_words_a_flag(tmp_path: Path) -> None:
    """Issue 36: the engine names a setting as data (tuner.said), each face words it; the
    command line's flags are written only by the command line's own modules."""
    sys.path.insert(0, str(ROOT))
    from tuner.cli_arguments import FLAGS

    flags = set(FLAGS.values()) | {"--verbose", "--version", "--help"}
    assert "--budget-minutes" in flags
    assert "--accumulate" in flags  # the parser's own
    assert _flags_written(ROOT / "tuner", flags) == []
    # The scan finds what it is for, and leaves docstrings and other programs' flags alone.
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(
        '"""Run ``mptune tune --xla off``."""\n'
        "def f(n):\n"
        '    """--xla in a docstring"""\n'
        '    env = "--xla_gpu_autotune_level=0"  # --xla in a comment\n'
        '    return f"raise --timeout to {n}" + "--xla"\n'
    )
    assert _flags_written(tmp_path / "pkg", flags) == ["pkg/a.py:5 --timeout", "pkg/a.py:5 --xla"]


def test_the_mechanism_table_names_every_real_worker_test() -> None:
    """tests/README.md's table of real-worker mechanisms (tests/mechanisms.py writes it) names
    every ``slow`` test, and no test that is gone: a mechanism is not lost on the way down."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        import mechanisms
    finally:
        sys.path.remove(str(ROOT / "tests"))
    tests, listed = set(mechanisms.slow_tests()), mechanisms.listed()
    assert len(tests) > 100
    assert not tests - listed, f"not in tests/README.md's table: {sorted(tests - listed)}"
    assert not listed - tests, f"gone, still in tests/README.md's table: {sorted(listed - tests)}"


#: The product's packages: the only ones its code may import from this repository.
PRODUCT = ("tuner", "app")


def _test_modules(tests: Path) -> set[str]:
    """The names the suite's modules import by (tests/ and its folders, tests/launchers/
    among them, are on ``sys.path`` in a test run): ``tests`` itself, and each module or
    package under it or in its folders."""
    packages = {p for p in tests.iterdir() if (p / "__init__.py").is_file()}
    names = {tests.name} | {p.name for p in packages}
    for folder in (tests, *(p for p in tests.iterdir() if p.is_dir() and p not in packages)):
        names |= {p.stem for p in folder.glob("*.py")}
        names |= {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}
    return names - set(PRODUCT)


def _test_machinery(root: Path) -> list[str]:
    """Where the product's code (``tuner/``, ``app/``) names a test switch (``MPTUNE_TEST``)
    or imports one of the suite's modules."""
    suite = _test_modules(root / "tests")
    found = []
    for package in PRODUCT:
        for path in sorted((root / package).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            where = path.relative_to(root)
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue  # an image
            found += [f"{where}:{n} MPTUNE_TEST" for n, line in _lines(text, "MPTUNE_TEST")]
            if path.suffix != ".py":
                continue
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                found += [
                    f"{where}:{node.lineno} imports {name}"
                    for name in names
                    if name.split(".")[0] in suite
                ]
    return found


def _lines(text: str, word: str) -> list[tuple[int, str]]:
    return [(n, line) for n, line in enumerate(text.splitlines(), 1) if word in line]


def test_the_product_holds_no_test_machinery() -> None:
    """No test-only code under tuner/ or app/ (issue 72): the suite's switches and launchers
    live in tests/launchers/ (faults.py, forkserver/) and plug in through the launcher seam
    (tuner/trials/launcher.py); the product neither names them nor imports them."""
    assert _test_machinery(ROOT) == []


def test_the_test_machinery_check_finds_what_it_is_for(tmp_path: Path) -> None:
    (tmp_path / "tests" / "launchers" / "forkserver").mkdir(parents=True)
    (tmp_path / "tests" / "launchers" / "forkserver" / "__init__.py").write_text("")
    (tmp_path / "tests" / "launchers" / "faults.py").write_text("")
    (tmp_path / "tuner" / "worker").mkdir(parents=True)
    (tmp_path / "app").mkdir()
    (tmp_path / "tuner" / "worker" / "step.py").write_text(
        'import os\nimport faults\nHOOK = os.environ.get("MPTUNE_TEST_FAULT")\n'
    )
    (tmp_path / "tuner" / "ok.py").write_text("from tuner.worker import step\nimport json\n")
    (tmp_path / "app" / "window.py").write_text("from forkserver.client import LAUNCHER\n")
    (tmp_path / "app" / "notes.md").write_text("set MPTUNE_TEST_PROCESS_PEAK\n")
    assert _test_machinery(tmp_path) == [
        "tuner/worker/step.py:3 MPTUNE_TEST",
        "tuner/worker/step.py:2 imports faults",
        "app/notes.md:1 MPTUNE_TEST",
        "app/window.py:1 imports forkserver.client",
    ]
