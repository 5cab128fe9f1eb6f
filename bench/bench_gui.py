"""The window's responsiveness while engine events stream in, and plot redraw rates.

Measured side by side in one run, offscreen (QT_QPA_PLATFORM=offscreen):

1. Event-loop delay: a 10 ms QTimer's lateness, idle and while a thread streams worker step
   events into the bridge at a high rate (trials finishing every 50 steps). Target: p99 under
   50 ms while streaming.
2. Redraw rate of a 100,000-point memory series: pyqtgraph with downsampling and clip-to-view
   (what the app uses) against without. Target: 10 redraws/s or better.

    QT_QPA_PLATFORM=offscreen python bench/bench_gui.py [--rate 5000] [--seconds 5] [--write]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QElapsedTimer, QSettings, QTimer
from PySide6.QtWidgets import QApplication

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine_line, write_section

from app.qt_main_window import QtMainWindow
from app.qt_plots import QtLivePlots
from tuner.hardware.nvml import FakeNvmlBackend


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def loop_delays(app: QApplication, seconds: float) -> list[float]:
    """Lateness of a 10 ms timer, in ms, over ``seconds``."""
    delays: list[float] = []
    clock = QElapsedTimer()
    clock.start()
    last = [clock.elapsed()]
    timer = QTimer()
    timer.setInterval(10)

    def tick() -> None:
        now = clock.elapsed()
        delays.append(max(0.0, now - last[0] - 10))
        last[0] = now

    timer.timeout.connect(tick)
    timer.start()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.001)
    timer.stop()
    return delays


def streaming_tune(rate: int, seconds: float, sent: list[int]):
    """A stand-in for ``tune`` that emits what a fast model's search emits: step events at
    ``rate`` per second, a finished trial every 50 steps, from the bridge's search thread."""

    def tune(on_event, cancel, **_: object) -> None:
        spec = {
            "model": "builtin:cnn",
            "policy": "mixed_float16",
            "batch_size": 64,
            "loss_scale": "dynamic",
        }
        number, count = 0, 0
        on_event({"type": "trial_started", "number": 0, "stage": "bench", "spec": spec})
        start = time.monotonic()
        while not cancel.is_set() and time.monotonic() - start < seconds:
            for _ in range(max(1, rate // 100)):
                count += 1
                on_event(
                    {
                        "type": "worker",
                        "number": number,
                        "event": {
                            "type": "step",
                            "phase": "measure",
                            "step": count,
                            "loss": 2.0 / (1 + count * 1e-3),
                            "loss_scale": 32768.0,
                            "skipped": count % 97 == 0,
                            "nonfinite": False,
                            "time_ms": 1.0,
                        },
                    }
                )
                if count % 50 == 0:
                    on_event(
                        {
                            "type": "trial_finished",
                            "number": number,
                            "stage": "bench",
                            "result": {
                                "status": "ok",
                                "samples_per_second": 1000.0 + count,
                                "peak_memory_mb": 600.0,
                                "losses": [1.0] * 50,
                                "loss_scales": [32768.0] * 50,
                                "spec": {**spec, "batch_size": 8 * (1 + number % 64)},
                                "step_time_ms": {"p50": 1.0},
                                "skipped_steps": 0,
                            },
                        }
                    )
                    number += 1
                    on_event(
                        {"type": "trial_started", "number": number, "stage": "bench", "spec": spec}
                    )
            time.sleep(0.01)
        sent.append(count)
        raise KeyboardInterrupt  # ends as a stopped search does

    return tune


def redraw_rate(app: QApplication, points: int, fast: bool, rounds: int = 20) -> float:
    plots = QtLivePlots()
    plots.resize(1000, 700)
    plots.show()
    if not fast:
        plots.memory_curve.setDownsampling(ds=1, auto=False)
        plots.memory_curve.setClipToView(False)
    xs = [i * 0.01 for i in range(points)]
    ys = [500 + (i % 1000) * 0.1 for i in range(points)]
    plots.add_memory(xs, ys)
    plots.redraw(everything=True)
    app.processEvents()
    start = time.perf_counter()
    for i in range(rounds):
        plots.add_memory([xs[-1] + (i + 1) * 0.01], [600.0])
        plots.redraw(everything=True)
        plots.memory.grab()  # force the paint, as a visible window would
        app.processEvents()
    rate = rounds / (time.perf_counter() - start)
    plots.close()
    return rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=5000, help="step events per second")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])
    with tempfile.TemporaryDirectory() as tmp:
        sent: list[int] = []
        window = QtMainWindow(
            settings=QSettings(f"{tmp}/s.ini", QSettings.Format.IniFormat),
            nvml_backend=FakeNvmlBackend.named("no_driver"),
            tune_function=streaming_tune(args.rate, args.seconds, sent),
        )
        window.resize(1280, 820)
        window.show()
        end = time.monotonic() + 10
        while window.profile is None and time.monotonic() < end:
            app.processEvents()
        idle = loop_delays(app, args.seconds)
        window.bridge.start()  # the stand-in search, on the bridge's own thread
        busy = loop_delays(app, args.seconds)
        window.bridge.wait(5)
        loop_delays(app, 0.3)  # drain
        rows_shown = window.table.trials.rowCount()
        window.shutdown()
        window.close()
    fast = redraw_rate(app, 100_000, fast=True)
    slow = redraw_rate(app, 100_000, fast=False)
    sent = sent[0] if sent else 0
    lines = [
        "## GUI responsiveness",
        "",
        f"`QT_QPA_PLATFORM=offscreen python bench/bench_gui.py --rate {args.rate} --seconds "
        f"{args.seconds:g}` on {date.today()}: {machine_line()}.",
        "",
        "| measure | idle | while streaming | target |",
        "|---|---|---|---|",
        f"| event-loop delay p50 (ms) | {percentile(idle, 50):.1f} | "
        f"{percentile(busy, 50):.1f} | |",
        f"| event-loop delay p99 (ms) | {percentile(idle, 99):.1f} | {percentile(busy, 99):.1f} | "
        "under 50 |",
        f"| event-loop delay max (ms) | {max(idle):.1f} | {max(busy):.1f} | |",
        "",
        f"Streaming: {sent:,} step events in {args.seconds:g} s ({sent / args.seconds:,.0f}/s), "
        f"with a trial finishing every 50 steps ({rows_shown} table rows at the end); the bridge "
        "hands them to the GUI in one batch per 50 ms.",
        "",
        "| 100,000-point memory plot | redraws/s | vs without |",
        "|---|---|---|",
        f"| downsampling + clip to view (the app) | {fast:.1f} | {fast / slow:.1f}x |",
        f"| neither | {slow:.1f} | 1.0x |",
        "",
        f"Target: 10 redraws/s or better with the app's settings: "
        f"{'met' if fast >= 10 else 'NOT met'}; event-loop p99 under 50 ms while streaming: "
        f"{'met' if percentile(busy, 99) < 50 else 'NOT met'}.",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section("gui", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
