#!/usr/bin/env bash
# Start the app under a virtual X server, run a short real search, save screenshots.
# Needs (Debian): apt-get install -y xvfb libxcb-cursor0 libxkbcommon-x11-0 libxcb-icccm4 \
#   libxcb-keysyms1 libxcb-shape0 libxcb-randr0 libxcb-render-util0 libxcb-image0 libegl1 libgl1
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/screenshots}
python=${PYTHON:-.venv/bin/python}
Xvfb :99 -screen 0 1600x1000x24 >/dev/null 2>&1 &
xvfb=$!
trap 'kill $xvfb' EXIT
export DISPLAY=:99 QT_QPA_PLATFORM=xcb
for _ in $(seq 50); do [ -e /tmp/.X11-unix/X99 ] && break; sleep 0.1; done
"$python" packaging/take_screenshots.py "$out"
