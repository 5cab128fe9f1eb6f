"""The covered-mechanism table of tests/README.md: every test that starts a real trial worker
(or runs exported code on a Keras backend: the ``slow`` mark), the mechanism its name states,
the backends it runs on, and whether it runs in the serial pass.

``python tests/mechanisms.py --write`` writes the table from a collection of the ``slow``
tests; tests/test_architecture.py checks that it names every ``slow`` test there is, so a
test that goes away leaves the table by a change that says what covers it now."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "tests" / "README.md"
BEGIN, END = "<!-- mechanisms: begin -->", "<!-- mechanisms: end -->"
BACKENDS = ("tensorflow", "jax", "torch")


def slow_tests() -> dict[str, list[str]]:
    """Each ``slow`` test function (``path::name``) and its parametrizations' ids, read from
    the source (no collection: the check is fast)."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        source = path.read_text()
        tree = ast.parse(source)
        module_slow = any(
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
            and "slow" in ast.unparse(node.value)
            for node in tree.body
        )
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
                continue
            marks = " ".join(ast.unparse(d) for d in node.decorator_list)
            if module_slow or "mark.slow" in marks:
                found[f"{path.relative_to(ROOT).as_posix()}::{node.name}"] = []
    return found


def _collected() -> dict[str, list[str]]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow", "-p", "no:cov"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    params: dict[str, list[str]] = defaultdict(list)
    for line in proc.stdout.splitlines():
        match = re.match(r"^(tests/\S+?::\w+)(?:\[(.*)\])?$", line.strip())
        if match:
            params[match.group(1)].append(match.group(2) or "")
    return params


def _serial(path: str, name: str) -> str:
    source = (ROOT / path).read_text()
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            for decorator in node.decorator_list:
                text = ast.unparse(decorator)
                if "mark.serial" in text and isinstance(decorator, ast.Call):
                    arg = decorator.args[0]
                    return str(arg.value) if isinstance(arg, ast.Constant) else text
    return ""


def _backends(path: str, name: str, ids: list[str]) -> str:
    named = sorted(
        {b for i in ids for b in BACKENDS if re.search(rf"(^|-){b}($|-)", i)},
        key=BACKENDS.index,
    )
    if named:
        return ", ".join(named)
    source = (ROOT / path).read_text()
    tree = ast.parse(source)
    body = next(
        ast.get_source_segment(source, n) or ""
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and n.name == name
    )
    # A module's constant the test names (``FAST``: the CLI flags its trials run with) says
    # the backend as the body would.
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and re.search(rf"\b{t.id}\b", body) for t in node.targets
        ):
            body += "\n" + (ast.get_source_segment(source, node) or "")
    words = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch", "pytorch": "torch"}
    said = sorted(
        {b for w, b in words.items() if re.search(rf"(^|_){w}(_|$)", name)}
        | {
            b
            for b in BACKENDS
            # "--backend", "jax" in an argument list, on one line or two (a comment between)
            if re.search(
                rf'backend="{b}"|"--backend",(\s|#[^\n]*)*"{b}"|KERAS_BACKEND": "{b}"', body
            )
        },
        key=BACKENDS.index,
    )
    return ", ".join(said) if said else "tensorflow (the default)"


def _launcher(path: str, name: str) -> str:
    """``spawn`` where the test's workers start through the product's launcher (marked
    ``product_launcher``), ``both`` where one of its parametrizations does, else empty (the
    suite's fork server)."""
    source = (ROOT / path).read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            for decorator in node.decorator_list:
                text = ast.unparse(decorator)
                if "product_launcher" in text:
                    return "both" if "parametrize" in text else "spawn"
    return ""


def table() -> str:
    collected = _collected()
    rows = [
        "| mechanism (the test's name) | test | backends | serial: why | launcher |",
        "|---|---|---|---|---|",
    ]
    for test in slow_tests():
        path, name = test.split("::")
        mechanism = name.removeprefix("test_").replace("_", " ")
        ids = collected.get(test, [])
        runs = f" ({len(ids)} runs)" if len(ids) > 1 else ""
        rows.append(
            f"| {mechanism} | `{path.removeprefix('tests/')}::{name}`{runs} | "
            f"{_backends(path, name, ids)} | {_serial(path, name)} | {_launcher(path, name)} |"
        )
    return "\n".join(rows)


def listed() -> set[str]:
    """The tests the README's table names."""
    text = README.read_text()
    section = text.split(BEGIN, 1)[1].split(END, 1)[0]
    return {f"tests/{m}" for m in re.findall(r"`([\w/]+\.py::\w+)`", section)}


def main() -> None:
    text = README.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    README.write_text(f"{head}{BEGIN}\n{table()}\n{END}{tail}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/mechanisms.py --write")
    main()
