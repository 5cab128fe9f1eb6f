#!/usr/bin/env bash
# Build a one-folder bundle with PyInstaller (dist/mptune/mptune) and install the desktop
# entry and icon for the current user. The bundle is large: it carries TensorFlow.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
"$python" -m pip install -q "pyinstaller>=6"
"$python" -m PyInstaller --noconfirm --clean packaging/mptune.spec
dist/mptune/mptune detect   # the bundle starts and reads the machine
if [ "${INSTALL_DESKTOP:-0}" = "1" ]; then
  mkdir -p ~/.local/share/applications ~/.local/share/icons/hicolor/256x256/apps
  sed "s|^Exec=mptune|Exec=$PWD/dist/mptune/mptune|" packaging/mptune.desktop \
    > ~/.local/share/applications/mptune.desktop
  cp assets/mptune.png ~/.local/share/icons/hicolor/256x256/apps/mptune.png
fi
