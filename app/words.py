"""The window's words for the settings the engine names (issue 36, item 4).

The engine does not word a setting in any face's terms: it writes it into its text as data
(:mod:`tuner.said`, ``[[xla auto]]``), and each face says it its own way. The command line says
a flag (``--xla auto``); a window user has a combo box, so every engine text the window shows
passes through :func:`window_words`, which names the control that sets it instead ("XLA: auto in
the Search panel"), by the labels of the Search panel's rows (app/qt_setup.py) and the
toolbar's buttons. tests/app/test_words.py checks that every setting a recorded search names
has its words here, and that no text the window shows keeps one unworded.
"""

from __future__ import annotations

from tuner import api

Setting = api.said.Setting

#: Each setting the engine names: the control that sets it, and where the control is (empty for
#: a button or a setting the window sets itself).
CONTROLS: dict[str, tuple[str, str]] = {
    "backend": ("Backend", " in the Search panel"),
    "budget_minutes": ("Time budget", " in the Search panel"),
    "device": ("the device", ""),  # the window tunes on GPU 0, else the CPU
    "format": ("the format", " in the Export panel"),
    "global_batch": ("Global batch", " in the Search panel"),
    "keras": ("Keras", ""),
    "max_trials": ("Max trials", " in the Search panel"),
    "measure_seconds": ("Trial length", " in the Search panel"),
    "memory_limit": ("the memory limit", ""),
    "model": ("Model", " in the Search panel"),
    "parallel": ("Trials at once", " in the Search panel"),
    "policies": ("the Policies boxes", " in the Search panel"),
    "resume": ("Resume", ""),
    "storage": ("Storage", " in the Search panel"),
    "study": ("session name", ""),
    "timeout": ("the trial time limit", ""),
    "workers": ("workers (mptune worker)", ""),
    # Each switched knob's control in the Search panel, by its label (Knob.switch).
    **{knob.name: (knob.label, " in the Search panel") for knob in api.SWITCHED},
}


def control_words(setting: Setting) -> str:
    """One setting as the window says it: the control, the value it would be set to, and where
    the control is. ``resume`` is the toolbar's button, whatever session it names (the one the
    window shows); an export's format and Keras are what the Export panel offers."""
    label, where = CONTROLS[setting.name]
    if setting.value is None or setting.name == "resume":
        return f"{label}{where}"
    if setting.name == "keras":
        return f"Keras {setting.value}"
    if setting.name == "format":
        return setting.value.capitalize()
    return f"{label}: {setting.value}{where}"


def window_words(text: str) -> str:
    """``text`` with each setting it names as the control that sets it, and a name not said
    twice: the engine words a finding as "what: why", and a why that begins with the knob's own
    setting would read "XLA: XLA: auto in the Search panel ..." in the window."""
    worded = api.said.render(text, control_words)
    for label, _where in CONTROLS.values():
        worded = worded.replace(f"{label}: {label}", label)
    return worded
