"""Issue 71 in the window: a trap in what the user runs today is the recommendation's first
row, before the setup; a full half policy's trial gets a throughput series of its own."""

from __future__ import annotations

import dataclasses
import html

from test_hazards import recommendation

from app.qt_plots import QtLivePlots
from app.qt_recommendation import QtRecommendation

TRAP = (
    "your run today does not train: none of 5 trainable weights moved over 47 steps "
    "(AdamW's beta_2 0.999 is 1.0 in bfloat16). Fix: use mixed_bfloat16 (float32 weights), "
    "or keep the optimizer's state in float32"
)


def test_a_trap_in_todays_run_is_the_first_row(qtbot) -> None:
    panel = QtRecommendation()
    qtbot.addWidget(panel)
    panel.set_recommendation(dataclasses.replace(recommendation(()), today_trap=TRAP))
    text = panel.text()
    first = text.index(html.escape("Your run today does not train: none of 5"))
    assert first < text.index("float32, batch size 64") < text.index("Throughput")
    assert "\u26a0&nbsp;Today" in text
    assert "no speed-up stated: your run today does not train" in text


def test_a_full_half_trial_gets_a_series_of_its_own(qtbot) -> None:
    plots = QtLivePlots()
    qtbot.addWidget(plots)
    plots.add_throughput("bfloat16", 32, 900.0)
    plots.add_throughput("float32", 32, 1000.0)
    plots.redraw(everything=True)
    assert plots.throughput_points["bfloat16"].getData()[1].tolist() == [900.0]
    legend = [label.text for _, label in plots.throughput.getPlotItem().legend.items]
    assert "bfloat16" in legend
    assert "float16" not in legend  # never in every legend
