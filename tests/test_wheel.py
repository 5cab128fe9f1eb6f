"""The wheel: ``pip install .`` (not ``-e``) gives a working mptune, its assets included.

The wheel is built from a copy of the source, installed into a fresh virtual environment, and
the ``mptune`` command is run there from a folder outside the repository. TensorFlow and the
other dependencies are not installed again: a ``.pth`` file in the new environment appends the
test interpreter's site-packages to ``sys.path``. That folder also holds the repository's editable
install, but ``site`` does not process ``.pth`` files in folders that a ``.pth`` file adds, so
its import hook never loads; the test checks that ``tuner`` really comes from the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path

import pytest
from tests_support import make_config

import tuner

#: One xdist worker runs the module (``--dist loadgroup``): its module-scoped fixture is made
#: once, not once in each worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("wheel")]

REPO = Path(__file__).resolve().parents[1]
# What the wheel is built from; tests, docs and caches are not part of it.
SKIP = shutil.ignore_patterns(
    ".venv",
    ".git",
    ".*_cache",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "*.pyc",
    "tests",
    "docs",
    "bench",
    "out",
)


def _run(
    command: Sequence[str | os.PathLike[str]], cwd: Path, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        # the installed wheel starts its workers through its own launcher, not the suite's
        if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "MPTUNE_LAUNCHER")
    }
    env["PYTHONNOUSERSITE"] = "1"
    return subprocess.run(
        [str(c) for c in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _ok(command: Sequence[str | os.PathLike[str]], cwd: Path) -> str:
    proc = _run(command, cwd)
    assert proc.returncode == 0, (
        f"{command} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    return proc.stdout


def _source_files(top: str, suffix: str = "") -> list[str]:
    """Files under ``REPO/top`` ending in ``suffix``, as paths relative to the repository."""
    return sorted(
        p.relative_to(REPO).as_posix()
        for p in (REPO / top).rglob(f"*{suffix}")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of the source (no stale build/ folder, repo untouched)."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "src"
    shutil.copytree(REPO, source, ignore=SKIP)
    out = root / "dist"
    # Offline and fast: the test interpreter's setuptools when it has one, else an isolated
    # build (which fetches setuptools from the package index).
    have_setuptools = find_spec("setuptools") is not None
    # build.__main__: a stale build/ folder in the working directory is a namespace package
    # called "build" too, which cannot run.
    if find_spec("build") is not None and find_spec("build.__main__") is not None:
        command = [sys.executable, "-m", "build", "--wheel", "--outdir", out]
        if have_setuptools:
            command += ["--no-isolation", "--skip-dependency-check"]
    else:
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", out]
        if have_setuptools:
            command += ["--no-build-isolation"]
    _ok([*command, source], cwd=root)
    wheels = list(out.glob("mptune-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel installed (dependencies borrowed)."""
    env_dir = tmp_path_factory.mktemp("venv") / "env"
    _ok([sys.executable, "-m", "venv", env_dir], cwd=env_dir.parent)
    python = env_dir / "bin" / "python"
    purelib = _ok(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=env_dir
    ).strip()
    borrowed = [p for p in site.getsitepackages() if Path(p).is_dir()]
    Path(purelib, "zz_borrowed_dependencies.pth").write_text(
        "\n".join(borrowed) + "\n", encoding="utf-8"
    )
    _ok(
        [python, "-m", "pip", "install", "--no-deps", "--no-index", "--no-cache-dir", wheel],
        cwd=env_dir,
    )
    return env_dir


def test_wheel_holds_every_package_module_and_asset(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    # Every package (and module) under tuner/ and app/: pyproject.toml lists the packages, so
    # a new subpackage must be added there.
    packages = _source_files("tuner", "__init__.py") + _source_files("app", "__init__.py")
    assert "tuner/__init__.py" in packages
    assert "app/__init__.py" in packages
    missing = [name for name in packages if name not in names]
    assert not missing, f"packages missing from the wheel (add them to pyproject.toml): {missing}"
    modules = _source_files("tuner", ".py") + _source_files("app", ".py")
    missing = [name for name in modules if name not in names]
    assert not missing, f"modules missing from the wheel: {missing}"
    # assets/ is installed as the package mptune_assets, every file of it.
    assets = [name.replace("assets/", "mptune_assets/", 1) for name in _source_files("assets")]
    assert "mptune_assets/templates/snippet_keras3.py.j2" in assets
    missing = [name for name in assets if name not in names]
    assert not missing, f"assets missing from the wheel (package-data in pyproject): {missing}"
    assert not [n for n in names if n.startswith(("tests/", "assets/", "docs/"))]
    # The version is written once, in tuner/__init__.py.
    assert wheel.name.startswith(f"mptune-{tuner.__version__}-")


def test_installed_wheel_runs_detect_and_every_export(venv: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"  # outside the repository: nothing is found through the cwd
    work.mkdir()
    python = venv / "bin" / "python"
    mptune = venv / "bin" / "mptune"

    where = json.loads(
        _ok(
            [
                python,
                "-c",
                (
                    "import json, importlib.metadata as md, tuner, app.main, mptune_assets\n"
                    "from tuner import resources\n"
                    "print(json.dumps({'tuner': tuner.__file__, 'app': app.main.__file__,\n"
                    "    'assets': mptune_assets.__file__,\n"
                    "    'templates': str(resources.templates_dir()),\n"
                    "    'icon': str(resources.asset_path('mptune.svg')),\n"
                    "    'style': len(resources.read_asset('style.qss')),\n"
                    "    'version': tuner.__version__, 'dist': md.version('mptune')}))"
                ),
            ],
            cwd=work,
        )
    )
    resolved = venv.resolve()
    for key in ("tuner", "app", "assets", "templates", "icon"):
        assert Path(where[key]).resolve().is_relative_to(resolved), (key, where[key])
    assert Path(where["icon"]).is_file()
    assert where["style"] > 0
    assert where["version"] == where["dist"] == tuner.__version__

    profile = json.loads(_ok([mptune, "detect", "--json"], cwd=work))
    assert "cpu" in profile
    assert "gpus" in profile

    config_file = work / "tuned.json"
    make_config(
        model="builtin:cnn", policy="mixed_float16", loss_scale="dynamic", batch_size=64
    ).save(config_file)
    exported = json.loads(_ok([mptune, "export", config_file, "--format", "json"], cwd=work))
    assert exported["schema"] == "mptune.config"
    assert exported["model"] == "builtin:cnn"
    assert exported["setup"]["batch_size"] == 64

    for keras in ("3", "2"):
        snippet = _ok(
            [mptune, "export", config_file, "--format", "snippet", "--keras", keras], cwd=work
        )
        assert "set_global_policy" in snippet, snippet
        assert "mixed_float16" in snippet
        compile(snippet, f"snippet_keras{keras}.py", "exec")

    script = _ok([mptune, "export", config_file, "--format", "script"], cwd=work)
    assert "set_global_policy" in script
    compile(script, "train.py", "exec")

    target = work / "train.py"
    _ok([mptune, "export", config_file, "--format", "script", "-o", target], cwd=work)
    assert target.read_text(encoding="utf-8") == script
    assert os.access(target, os.X_OK)
