"""The app/tuner boundary and the TensorFlow boundary, checked by tools rather than hoped for."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold() -> None:
    """import-linter's contracts in pyproject.toml: tuner never imports Qt or app/, only the
    trial worker's floor imports TensorFlow/Keras, the faces use tuner.api only, and the floors
    inside tuner/ import downwards."""
    lint = Path(sys.executable).parent / "lint-imports"
    proc = subprocess.run(
        [str(lint), "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


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
