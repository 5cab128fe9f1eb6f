"""mptune's bundled files: the icon, the stylesheet and the export templates.

They live in the repository's ``assets/`` folder, which is installed as the package
``mptune_assets`` (see ``[tool.setuptools]`` in pyproject.toml; the PyInstaller spec ships it
under the same name). Everything here finds them through :mod:`importlib.resources`, so the same
code works from a source checkout installed with ``pip install -e``, from a wheel, and from a
PyInstaller bundle. No path is ever computed from ``__file__``.

Names are relative to the assets folder and use ``/``: ``"style.qss"``, ``"templates/x.j2"``.
This module imports neither Qt nor TensorFlow nor Keras.
"""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

ASSETS_PACKAGE = "mptune_assets"

_extracted: dict[str, Path] = {}
_extract_root: Path | None = None


def asset(name: str) -> Traversable:
    """The bundled file or folder ``name``, as an :mod:`importlib.resources` traversable.

    Args:
        name: a path relative to the assets folder, parts separated by ``/``.

    Returns:
        The resource; it may not exist (check with ``is_file()`` or ``is_dir()``).

    Raises:
        ModuleNotFoundError: mptune is installed without its assets package.
    """
    resource = resources.files(ASSETS_PACKAGE)
    for part in name.split("/"):
        if part:
            resource = resource.joinpath(part)
    return resource


def read_asset(name: str) -> str:
    """The text of the bundled file ``name`` (UTF-8).

    Args:
        name: a path relative to the assets folder, parts separated by ``/``.

    Returns:
        The file's text.

    Raises:
        FileNotFoundError: there is no such bundled file.
    """
    return asset(name).read_text(encoding="utf-8")


def asset_path(name: str) -> Path:
    """A real file-system path to the bundled file or folder ``name``.

    For callers that need a path rather than bytes (``QIcon``, a Jinja2
    ``FileSystemLoader``). Installed normally (editable, wheel, PyInstaller) the assets are
    already files, and their own path comes back. Only when they are not (a zipped install)
    they are copied once into a temporary folder that lives until the process exits.

    Args:
        name: a path relative to the assets folder, parts separated by ``/``.

    Returns:
        The path; it exists for the rest of the process.

    Raises:
        FileNotFoundError: there is no such bundled file or folder.
    """
    resource = asset(name)
    if not (resource.is_file() or resource.is_dir()):
        raise FileNotFoundError(f"mptune: no bundled asset {name!r} in {ASSETS_PACKAGE}")
    if isinstance(resource, Path):
        return resource
    if name not in _extracted:
        target = _temporary_root().joinpath(*[part for part in name.split("/") if part])
        _copy(resource, target)
        _extracted[name] = target
    return _extracted[name]


def templates_dir() -> Path:
    """The folder of the export templates (Jinja2, ``*.j2``) as a real path.

    Returns:
        The path of ``templates`` in the assets.

    Raises:
        FileNotFoundError: the templates are not installed.
    """
    return asset_path("templates")


def _temporary_root() -> Path:
    global _extract_root
    if _extract_root is None:
        _extract_root = Path(tempfile.mkdtemp(prefix="mptune-assets-"))
        atexit.register(shutil.rmtree, _extract_root, ignore_errors=True)
    return _extract_root


def _copy(resource: Traversable, target: Path) -> None:
    if resource.is_dir():
        target.mkdir(parents=True, exist_ok=True)
        for child in resource.iterdir():
            _copy(child, target / child.name)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(resource.read_bytes())
