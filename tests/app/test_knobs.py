"""The execution knobs in the window: the XLA and global-batch settings, the trials table's
precision and knobs columns, the unsupported status, the recommendation and the export."""

from __future__ import annotations

import dataclasses
import html
import json
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QColor

from app.controller import Controller
from app.qt_export import FORMATS, QtExportDialog
from app.qt_recommendation import QtRecommendation, with_knobs
from app.qt_setup import DEFAULT_GLOBAL_BATCH, QtSetupPanel
from app.qt_trials import (
    COLUMNS,
    FAILED_COLOUR,
    GIVE_WAY_MIN_PX,
    UNSAFE_COLOUR,
    UNSUPPORTED_BACKGROUND,
    UNSUPPORTED_COLOUR,
    QtTrialsTable,
    TrialRow,
    TrialsModel,
)
from app.tooltips import TOOLTIPS
from tuner import api

#: A setup with every knob: float32 storage with TF32 matmuls, XLA, 4 steps per execution,
#: 2 accumulation steps (global batch 64).
KNOBBED = api.Setup(
    "float32", 32, None, xla=True, steps_per_execution=4, tf32=True, gradient_accumulation_steps=2
)
XLA_FAILS = "XLA cannot compile this model: layer 'lookup' (StringLookup) has no XLA kernel"


def panel_at(qtbot, path: Path) -> QtSetupPanel:
    """A setup panel on the settings file ``path``, its default model already checked."""
    panel = QtSetupPanel(QSettings(str(path), QSettings.Format.IniFormat))
    qtbot.addWidget(panel)
    spec = panel.model_spec()
    assert spec is not None
    panel.set_model_check(spec, None)
    return panel


def result(
    setup: api.Setup, status: str = "ok", error: str | None = None, sps: float = 500.0
) -> api.TrialResult:
    data: dict[str, Any] = api.TrialResult(
        api.TrialSpec("builtin:mlp", setup), api.TrialStatus(status), samples_per_second=sps
    ).to_dict()
    data["error"] = {"message": error} if error else None
    return api.TrialResult.from_dict(data)


def cell(model: TrialsModel, row: int, column: str, role: Qt.ItemDataRole) -> Any:
    return model.index(row, COLUMNS.index(column)).data(role)


# -- the settings panel ---------------------------------------------------------------------
def test_xla_and_global_batch_go_into_the_search_space(qtbot, tmp_path: Path) -> None:
    panel = panel_at(qtbot, tmp_path / "settings.ini")
    assert panel.valid
    space = panel.tune_request(list(api.POLICIES)).space
    # the defaults: as the CLI's
    assert space.choice("xla") == "auto"
    assert space.global_batch is None
    assert space.batch_sizes == api.ladder_range(8, 1024)
    assert not panel.global_batch.isEnabled()  # off until "keep" is ticked

    panel.switches["xla"].setCurrentText("off")
    panel.keep_global_batch.setChecked(True)
    assert panel.global_batch.isEnabled()
    panel.global_batch.setValue(128)
    space = panel.tune_request(list(api.POLICIES)).space
    assert space.choice("xla") == "off"
    assert space.global_batch == 128
    # The search keeps batch x accumulation = 128: every per-step batch size divides it.
    assert space.batch_sizes
    assert all(128 % b == 0 for b in space.batch_sizes)
    assert 128 in space.batch_sizes
    assert space.start_batch == 128
    assert panel.valid

    # Each choice explains itself, and so does the global batch.
    xla = panel.switches["xla"]
    assert [xla.itemText(i) for i in range(xla.count())] == list(api.XLA_MODES)
    tips = [xla.itemData(i, Qt.ItemDataRole.ToolTipRole) for i in range(xla.count())]
    assert "GPU" in tips[0]
    assert "any device" in tips[1]
    assert "Never" in tips[2]
    assert xla.toolTip() == TOOLTIPS["xla"]
    assert "jit_compile" in TOOLTIPS["xla"]
    for widget in (panel.keep_global_batch, panel.global_batch):
        assert "learning rate" in widget.toolTip()
        assert "accumulat" in widget.toolTip()


def test_float8_has_its_switch_in_the_search_panel(qtbot, tmp_path: Path) -> None:
    """Like XLA's: auto, on, off, each explained, into the space the search is given."""
    panel = panel_at(qtbot, tmp_path / "settings.ini")
    float8 = panel.switches["float8"]
    assert [float8.itemText(i) for i in range(float8.count())] == list(api.SWITCH_MODES)
    tips = [float8.itemData(i, Qt.ItemDataRole.ToolTipRole) for i in range(float8.count())]
    assert "FP8 Tensor Cores" in tips[0]
    assert "any device" in tips[1]
    assert "Never" in tips[2]
    assert "quantize" in float8.toolTip()
    assert "8.9" in float8.toolTip()
    assert panel.tune_request(list(api.POLICIES)).space.choice("float8") == "auto"
    float8.setCurrentText("off")
    assert panel.tune_request(list(api.POLICIES)).space.switches == {"xla": "auto", "float8": "off"}


def test_the_knob_settings_survive_a_restart(make_window, qtbot) -> None:
    first = make_window()
    first.setup.switches["xla"].setCurrentText("on")
    first.setup.switches["float8"].setCurrentText("off")
    first.setup.keep_global_batch.setChecked(True)
    first.setup.global_batch.setValue(96)
    first.shutdown()  # saves the settings, as closing the window does
    path = first.settings.fileName()
    panel = QtSetupPanel(QSettings(path, QSettings.Format.IniFormat))
    qtbot.addWidget(panel)
    assert panel.switches["xla"].currentText() == "on"
    assert panel.switches["float8"].currentText() == "off"
    assert panel.keep_global_batch.isChecked()
    assert panel.global_batch.isEnabled()
    assert panel.global_batch.value() == 96

    # Untick "keep": B is still remembered, for the next time it is ticked.
    panel.keep_global_batch.setChecked(False)
    panel.save()
    again = QtSetupPanel(QSettings(path, QSettings.Format.IniFormat))
    qtbot.addWidget(again)
    assert not again.keep_global_batch.isChecked()
    assert not again.global_batch.isEnabled()
    assert again.global_batch.value() == 96


def test_a_bad_global_batch_is_rejected(make_window, qtbot) -> None:
    window = make_window()
    setup = window.setup
    qtbot.waitUntil(window.start_button.isEnabled)
    with qtbot.waitSignal(setup.validityChanged) as changed:
        setup.keep_global_batch.setChecked(True)
        setup.global_batch.setValue(0)
    assert changed.args == [False]
    assert setup.problem() == "the global batch must be at least 1"
    assert setup.model_problem.text() == "the global batch must be at least 1"
    assert not window.start_button.isEnabled()
    with pytest.raises(ValueError, match=r"global_batch\]\] must be from 1 to \d+, not 0"):
        setup.search_space(list(api.POLICIES))
    # Without "keep" the number does not matter.
    setup.keep_global_batch.setChecked(False)
    assert setup.valid
    assert window.start_button.isEnabled()
    setup.keep_global_batch.setChecked(True)
    assert not setup.valid
    setup.global_batch.setValue(64)
    assert setup.valid
    assert window.start_button.isEnabled()


@pytest.mark.parametrize("stored", ["0", "-5", "many"])
def test_a_bad_stored_global_batch_is_reported_not_used(qtbot, tmp_path: Path, stored) -> None:
    path = tmp_path / "settings.ini"
    settings = QSettings(str(path), QSettings.Format.IniFormat)
    settings.setValue("keep_global_batch", True)
    settings.setValue("global_batch", stored)
    settings.setValue("xla", "sometimes")  # not a mode: back to the default
    settings.sync()
    panel = panel_at(qtbot, path)
    assert panel.switches["xla"].currentText() == "auto"
    assert panel.keep_global_batch.isChecked()
    assert panel.global_batch.value() == 0
    assert not panel.valid
    assert "global batch" in (panel.problem() or "")


def test_the_global_batch_starts_at_its_default(qtbot, tmp_path: Path) -> None:
    panel = panel_at(qtbot, tmp_path / "settings.ini")
    assert panel.global_batch.value() == DEFAULT_GLOBAL_BATCH
    assert panel.switches["xla"].currentText() == "auto"


# -- the trials table -----------------------------------------------------------------------
def test_a_trial_row_shows_its_knobs(qtbot) -> None:
    table = QtTrialsTable()
    qtbot.addWidget(table)
    model = table.trials
    knobs_at = COLUMNS.index("knobs")
    model.add(TrialRow(0, "baseline", result(api.Setup("float32", 32), sps=400.0)))
    # A search without knobs keeps its table as narrow as before: no knobs column.
    assert table.isColumnHidden(knobs_at)
    model.add(TrialRow(1, "xla", result(KNOBBED, sps=900.0)))
    assert not table.isColumnHidden(knobs_at)
    model.add(TrialRow(2, "xla", result(api.Setup("mixed_float16", 64, xla=True), sps=700.0)))
    display = Qt.ItemDataRole.DisplayRole
    assert cell(model, 0, "precision", display) == "float32"
    assert cell(model, 0, "knobs", display) == ""
    assert cell(model, 1, "precision", display) == "float32+tf32"
    assert cell(model, 1, "batch", display) == "32"  # per step; the knobs say acc2
    assert cell(model, 1, "knobs", display) == "xla spe4 acc2"
    assert cell(model, 2, "knobs", display) == "xla"
    # A knob's cell says it in words, with the global batch.
    tooltip = Qt.ItemDataRole.ToolTipRole
    assert cell(model, 0, "knobs", tooltip) is None
    words = cell(model, 1, "knobs", tooltip)
    assert words == KNOBBED.describe()
    assert "TF32" in words
    assert "XLA" in words
    assert "global batch 64" in words
    assert cell(model, 1, "precision", tooltip) == KNOBBED.describe()
    # The headers explain the columns.
    header_tip = model.headerData(knobs_at, Qt.Orientation.Horizontal, tooltip)
    assert "steps per execution" in header_tip
    assert "accumulation steps" in header_tip
    precision_at = COLUMNS.index("precision")
    assert "float32+tf32" in model.headerData(precision_at, Qt.Orientation.Horizontal, tooltip)

    # Sorting still works on the new columns and the old ones.
    def column(name: str) -> list[str]:
        at = COLUMNS.index(name)
        return [table.proxy.index(r, at).data() for r in range(table.proxy.rowCount())]

    table.sortByColumn(knobs_at, Qt.SortOrder.AscendingOrder)
    assert column("knobs") == ["", "xla", "xla spe4 acc2"]
    table.sortByColumn(precision_at, Qt.SortOrder.DescendingOrder)
    assert column("precision") == ["mixed_float16", "float32+tf32", "float32"]
    table.sortByColumn(COLUMNS.index("samples/s"), Qt.SortOrder.DescendingOrder)
    assert column("#") == ["1", "2", "0"]
    # Selecting a sorted row still picks its own trial.
    selected: list[TrialRow] = []
    table.trialSelected.connect(selected.append)
    table.selectRow(0)
    assert selected[-1].result.spec.setup == KNOBBED
    model.clear()
    assert table.isColumnHidden(knobs_at)


def test_an_unsupported_trial_has_its_own_colour_and_tooltip(qtbot) -> None:
    model = TrialsModel()
    model.add(TrialRow(0, "baseline", result(api.Setup("float32", 32))))
    xla = api.Setup("float32", 32, xla=True)
    model.add(TrialRow(1, "xla", result(xla, "unsupported", XLA_FAILS, sps=0.0)))
    model.add(TrialRow(2, "batch", result(api.Setup("float32", 64), "oom", "out of memory")))
    display, tooltip = Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole
    colour, background = Qt.ItemDataRole.ForegroundRole, Qt.ItemDataRole.BackgroundRole
    assert cell(model, 1, "status", display) == f"unsupported: {XLA_FAILS}"
    assert cell(model, 1, "status", colour) == QColor(UNSUPPORTED_COLOUR)
    assert cell(model, 1, "status", background) == QColor(UNSUPPORTED_BACKGROUND)
    # Neither a failure's red nor unsafe's colour.
    assert QColor(UNSUPPORTED_COLOUR) not in (QColor(FAILED_COLOUR), QColor(UNSAFE_COLOUR))
    assert cell(model, 2, "status", colour) == QColor(FAILED_COLOUR)
    assert cell(model, 2, "status", background) is None
    tip = cell(model, 1, "status", tooltip)
    assert html.escape(XLA_FAILS, quote=False) in tip
    assert html.escape(TOOLTIPS["unsupported"], quote=False) in tip
    assert TOOLTIPS["unsupported"] not in (cell(model, 2, "status", tooltip) or "")
    # Only the status cell carries the look.
    assert cell(model, 1, "knobs", colour) is None
    assert cell(model, 1, "knobs", display) == "xla"


def test_a_running_trials_status_line_names_its_knobs(make_window, qtbot) -> None:
    window = make_window()
    with qtbot.waitSignal(window.bridge.eventsReady):
        window.bridge.feed([api.TrialStarted(5, "xla", api.TrialSpec("builtin:mlp", KNOBBED))])
    assert window.status.text() == (
        "Trial #5: float32+tf32, batch size 32, loss scale none, XLA, 4 steps per execution, "
        "2 accumulation steps (global batch 64)"
    )


# -- the recommendation and the export ------------------------------------------------------
def recommendation(setup: api.Setup) -> api.Recommendation:
    return api.Recommendation(
        setup=setup,
        samples_per_second=900.0,
        samples_per_second_spread=(880.0, 920.0),
        baseline_samples_per_second=400.0,
        float32_samples_per_second=400.0,
        speedup_vs_float32=2.25,
        speedup_vs_baseline=2.25,
        memory_saving=None,
        peak_memory_mb=700.0,
        memory_kind="gpu",
        loss_gap=0.0,
        skipped_steps=0,
        reason="the fastest setup",
        trials=(1,),
        objective="speed",
    )


def test_the_recommendation_shows_the_setups_knobs(qtbot) -> None:
    panel = QtRecommendation()
    qtbot.addWidget(panel)
    panel.set_recommendation(recommendation(KNOBBED))
    text = panel.text()
    setup_row = text[: text.index("Throughput")].lower()
    assert "tf32" in setup_row
    assert "xla" in setup_row
    assert "steps per execution" in setup_row or "spe4" in setup_row
    assert "accumulat" in setup_row or "acc2" in setup_row
    assert "64" in setup_row  # the global batch

    panel.set_recommendation(recommendation(api.Setup("float32", 64)))
    text = panel.text()
    # A setup without knobs: its setup line adds none (the evidence rows say "off" for each).
    setup_row = text[: text.index("Throughput")]
    assert "XLA" not in setup_row
    assert "TF32" not in setup_row
    assert "accumulation" not in setup_row
    assert "<b>XLA</b></td><td>off" in text


def test_knobs_are_added_to_the_setup_line_only_where_it_lacks_them() -> None:
    line = "float32, batch size 32, loss scale none"
    assert with_knobs(api.Setup("float32", 32), line) == line
    assert with_knobs(KNOBBED, line) == (
        f"{line}, XLA, 4 steps per execution, TF32 matmuls, 2 accumulation steps (global batch 64)"
    )
    # An engine line that names them already is left as it is.
    full = "float32+tf32, batch size 32, loss scale none, XLA, spe4, acc2 (global batch 64)"
    assert with_knobs(KNOBBED, full) == full
    assert with_knobs(KNOBBED, KNOBBED.describe()) == KNOBBED.describe()


def tuned_config(setup: api.Setup) -> api.TunedConfig:
    return api.TunedConfig.from_dict(
        {
            "schema": "mptune.config",
            "schema_version": 1,
            "model": "builtin:mlp",
            "setup": setup.to_dict(explicit=True),
            "evidence": {"samples_per_second": 900.0, "trials": [1]},
            "hardware": {"device": "gpu", "gpu_name": "NVIDIA A100", "compute_capability": "8.0"},
        }
    )


def test_the_export_dialog_shows_the_knobs(qtbot) -> None:
    controller = Controller(api)
    dialog = QtExportDialog(tuned_config(KNOBBED), controller)
    qtbot.addWidget(dialog)
    try:
        qtbot.waitUntil(lambda: dialog.text() != "", timeout=10_000)
        assert dialog.setup_line.text() == f"Setup: {KNOBBED.describe()}"
        setup = json.loads(dialog.text())["setup"]
        assert setup["xla"] is True
        assert setup["tf32"] is True
        assert setup["steps_per_execution"] == 4
        assert setup["gradient_accumulation_steps"] == 2
    finally:
        dialog.close()
        assert controller.wait(10), "an engine call did not end"


def test_a_save_stays_confirmed_until_the_user_chooses_again(qtbot, tmp_path) -> None:
    """ "Saved to" stays while the choice it saved does: a render of that choice ending after
    the save (switching formats and back queues one) left it cleared in a real search's export
    (CI, 2026-12-03); choosing another format clears it."""
    controller = Controller(api)
    dialog = QtExportDialog(tuned_config(KNOBBED), controller)
    qtbot.addWidget(dialog)
    try:
        qtbot.waitUntil(lambda: dialog.text() != "", timeout=10_000)
        with qtbot.waitSignal(dialog.saved) as saved:
            dialog.save_to(tmp_path / "tuned.json")
        assert dialog.confirmation.text() == f"Saved to {saved.args[0]}"
        dialog._show(dialog.fmt, dialog.keras.currentData(), dialog.text(), None)  # late render
        assert dialog.confirmation.text() == f"Saved to {saved.args[0]}"
        dialog.format.setCurrentIndex(list(FORMATS.values()).index("snippet"))
        assert dialog.confirmation.text() == ""
        qtbot.waitUntil(lambda: not dialog.text().lstrip().startswith("{"))  # the snippet
    finally:
        dialog.close()
        assert controller.wait(10), "an engine call did not end"


def test_float8_shows_in_the_table_the_recommendation_and_the_export(qtbot) -> None:
    """Issue 53: a float8 setup (on TensorFlow, with the XLA it brings) reads fp8 in the trials
    table's knobs column, float8 in the recommendation's setup line and its evidence row, and
    the export dialog's setup and snippet."""
    setup = api.Setup("mixed_bfloat16", 64, float8=True)
    table = QtTrialsTable()
    qtbot.addWidget(table)
    table.trials.add(TrialRow(0, "float8", result(setup, sps=900.0)))
    assert not table.isColumnHidden(COLUMNS.index("knobs"))
    assert cell(table.trials, 0, "knobs", Qt.ItemDataRole.DisplayRole) == "xla fp8"
    assert "float8 matmuls" in cell(table.trials, 0, "knobs", Qt.ItemDataRole.ToolTipRole)

    panel = QtRecommendation()
    qtbot.addWidget(panel)
    panel.set_recommendation(recommendation(setup))
    text = panel.text()
    assert "float8 matmuls" in text[: text.index("Throughput")]
    assert "<b>Float8</b></td><td>on" in text

    controller = Controller(api)
    dialog = QtExportDialog(tuned_config(setup), controller)
    qtbot.addWidget(dialog)
    try:
        qtbot.waitUntil(lambda: dialog.text() != "", timeout=10_000)
        assert "float8 matmuls" in dialog.setup_line.text()
        assert json.loads(dialog.text())["setup"]["float8"] is True
    finally:
        dialog.close()
        assert controller.wait(10), "an engine call did not end"


def test_the_trials_table_fits_beside_the_settings_with_knobs(make_window, qtbot) -> None:
    """At 1280 pixels across every figure keeps its width and nothing scrolls sideways; the
    stage gives way first, but never below a readable width (it read only "..."), the status
    last (both elided, their tooltips whole)."""
    window = make_window()
    window.resize(1280, 688)
    window.show()
    qtbot.waitExposed(window)
    table = window.table
    model = table.trials
    long_scale = api.Setup("mixed_float16", 1024, "dynamic:1024:500", xla=True)
    model.add(TrialRow(0, "steps-per-execution", result(KNOBBED, sps=123456.0)))
    model.add(TrialRow(1, "neighbourhood", result(long_scale, sps=98765.0)))
    bf16 = api.Setup("mixed_bfloat16", 512, steps_per_execution=16, xla=True)
    model.add(TrialRow(2, "steps-per-execution", result(bf16, sps=98765.0), stopped=True))
    qtbot.waitUntil(lambda: not table.isColumnHidden(COLUMNS.index("knobs")))
    assert table.isColumnHidden(COLUMNS.index("skipped"))  # no trial skipped a step yet
    assert table.horizontalScrollBar().maximum() == 0
    status_at = COLUMNS.index("status")
    assert table.columnViewportPosition(status_at) + table.columnWidth(status_at) <= (
        table.viewport().width()
    )
    assert table.columnWidth(COLUMNS.index("stage")) >= GIVE_WAY_MIN_PX
    for name in ("precision", "batch", "knobs", "samples/s", "loss gap"):
        at = COLUMNS.index(name)
        assert table.columnWidth(at) >= table.sizeHintForColumn(at), name  # in full
    tooltip = Qt.ItemDataRole.ToolTipRole
    assert cell(model, 0, "stage", tooltip) == "steps-per-execution"
    # A trial that skipped steps brings the column in.
    skipping = dataclasses.replace(result(long_scale, sps=90000.0), skipped_steps=3)
    model.add(TrialRow(3, "loss-scale", skipping))
    assert not table.isColumnHidden(COLUMNS.index("skipped"))
    assert cell(model, 3, "skipped", Qt.ItemDataRole.DisplayRole) == "3"


# -- the Keras backend ------------------------------------------------------------------------
def test_the_backend_choice_goes_into_the_search_settings(
    qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    panel = panel_at(qtbot, tmp_path / "settings.ini")
    names = [panel.backend.itemData(i) for i in range(panel.backend.count())]
    assert names == list(api.BACKENDS)
    assert panel.backend_choice() == "tensorflow"  # Keras' default, as the CLI's
    assert panel.tune_request(list(api.POLICIES)).settings.backend == "tensorflow"

    # The detection says which are installed: the others are greyed out, saying how to
    # install them.
    panel.set_installed_backends({"tensorflow": "2.21.0", "jax": None, "torch": "2.7.1"})
    items = panel.backend.model()
    jax, torch = items.item(names.index("jax")), items.item(names.index("torch"))
    assert not jax.isEnabled()
    assert torch.isEnabled()
    assert jax.text() == "JAX (not installed)"
    assert torch.text() == "PyTorch 2.7.1"
    tooltip = panel.backend.itemData(names.index("jax"), Qt.ItemDataRole.ToolTipRole)
    assert tooltip == "Not installed here: pip install 'mptune[jax]'"
    assert "torch.compile" in panel.backend.itemData(
        names.index("torch"), Qt.ItemDataRole.ToolTipRole
    )
    assert panel.valid

    panel.backend.setCurrentIndex(names.index("torch"))
    settings = panel.tune_request(list(api.POLICIES)).settings
    assert isinstance(settings, api.SearchSettings)
    assert settings.backend == "torch"
    assert panel.valid

    # A choice that is not installed (a stored one, or picked by a script) stops the search,
    # and the panel says how to install it.
    panel.backend.setCurrentIndex(names.index("jax"))
    assert not panel.valid
    assert panel.problem() == (
        "JAX is not installed: pip install 'mptune[jax]', or choose another backend"
    )
    assert "pip install 'mptune[jax]'" in panel.model_problem.text()
    panel.set_installed_backends({"tensorflow": "2.21.0", "jax": "0.6.2", "torch": "2.7.1"})
    assert panel.valid
    assert items.item(names.index("jax")).isEnabled()

    # Remembered between runs.
    panel.save()
    again = panel_at(qtbot, tmp_path / "settings.ini")
    assert again.backend_choice() == "jax"


def test_the_first_backend_is_keras_backend_from_the_environment(
    qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    assert panel_at(qtbot, tmp_path / "first.ini").backend_choice() == "torch"
    monkeypatch.setenv("KERAS_BACKEND", "numpy")  # not tuned by mptune: Keras' default
    assert panel_at(qtbot, tmp_path / "second.ini").backend_choice() == "tensorflow"


@pytest.mark.parametrize("knob", api.KNOBS, ids=lambda k: k.name)
def test_the_knobs_column_explains_every_knob_in_a_label(knob: api.Knob) -> None:
    """The tables' knobs column tooltip is derived from the knobs' declarations: a knob added
    to ``api.KNOBS`` is explained there with nothing more to write."""
    setup = api.Setup("float32", 64, **{knob.name: knob.example()})
    word = knob.short(setup)
    if word is None:  # said by the precision: float32+tf32
        assert knob.name not in TOOLTIPS["knobs"]
        return
    assert f"{word}: {knob.say(setup)}" in TOOLTIPS["knobs"]
