#!/usr/bin/env bash
# Retake the screenshots of docs/window.md: the real window under a virtual X server, driven through
# a real search, Stop, Resume, History and export by tests/app/test_story.py, which saves what
# the user sees at each step when MPTUNE_SCREENSHOTS names a folder.
# Needs the test extra (pip install -e '.[test]') and (Debian): apt-get install -y xvfb
#   libxcb-cursor0 libxkbcommon-x11-0 libxcb-icccm4 libxcb-keysyms1 libxcb-shape0 libxcb-randr0
#   libxcb-render-util0 libxcb-image0 libegl1 libgl1
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-docs/screenshots}")
python=${PYTHON:-.venv/bin/python}
display=:${XVFB_DISPLAY:-99}
Xvfb "$display" -screen 0 1600x1000x24 >/dev/null 2>&1 &
xvfb=$!
trap 'kill $xvfb' EXIT
for _ in $(seq 50); do [ -e "/tmp/.X11-unix/X${display#:}" ] && break; sleep 0.1; done
DISPLAY=$display QT_QPA_PLATFORM=xcb MPTUNE_SCREENSHOTS=$out \
    "$python" -m pytest -q -p no:cacheprovider tests/app/test_story.py
echo "screenshots in $out"
