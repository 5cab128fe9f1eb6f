"""The window's words for what the engine says in the command line's words.

The engine words its findings once, for its first face, the command line: "--xla auto tries
XLA on a GPU only". A window user has a combo box, not a flag, so every engine text the window
shows passes through :func:`window_words`, which names the control instead ("XLA: auto in the
Search panel"). The table below is the window face's one wording layer; the CLI keeps its own
words. tests/app/test_words.py checks that no flag is left in any text a recorded search makes.
"""

from __future__ import annotations

import re

#: (the command line's words, the window's), most specific first. The window's names are the
#: labels of its controls (app/qt_setup.py's form rows, the toolbar's buttons).
_CONTROLS: tuple[tuple[str, str], ...] = (
    (r"`?mptune tune --resume [\w.-]+`? runs that check", "Resume runs that check"),
    (r"\(continue with mptune tune --resume [\w.-]+\)", "(press Resume to continue it)"),
    (r"finish it with mptune tune --resume [\w.-]+", "finish it with Resume"),
    (r"`?mptune tune --resume [\w.-]+`?", "Resume"),
    (r"--xla auto tries XLA", "XLA: auto in the Search panel tries XLA"),
    (r"--xla off", "XLA: off in the Search panel"),
    (r"--xla\b", "XLA in the Search panel"),
    (r"--policies or the hardware prior", "the Policies boxes or the hardware's advice"),
    (r"--policies\b", "Policies in the Search panel"),
    (r"search with --global-batch (\d+)", r"search with Global batch \1"),
    (r"\(--global-batch\)", "(Global batch in the Search panel)"),
    (r"--global-batch\b", "Global batch"),
    (r"--budget-minutes sets another", "Time budget in the Search panel sets another"),
    (r"--budget-minutes\b", "Time budget"),
    (r"--max-trials\b", "Max trials"),
    (r"--measure-seconds\b", "Trial length"),
    (r"--parallel auto\b", "Trials at once: auto"),
    (r"--parallel\b", "Trials at once"),
    (r"--storage postgresql://\.\.\.", "Storage: postgresql://..."),
    (r"--storage\b", "Storage"),
    (r"--format snippet --keras 2", "Snippet with Keras 2"),
    (r"\(--keras 3\)", "(Keras 3)"),
    (r"--keras (\d)", r"Keras \1"),
    (r"mptune tune --backend (\w+)", r"choose Backend \1 and search again"),
    (r"--backend\b", "Backend"),
    (
        r"Leave out --model to continue it, or give another --study to start a new session",
        "Open that session from History to continue it, or choose another model",
    ),
    (r"Give another --study for this machine", "Start a new search on this machine"),
    (r"--model\b", "Model"),
    (r"--timeout\b", "the trial time limit"),
)
_COMPILED = tuple((re.compile(pattern), window) for pattern, window in _CONTROLS)
#: A name said twice in a row, the first time as a heading ("XLA: XLA: auto in the Search
#: panel ..."). The engine words a finding as "what: why" ("XLA: --xla auto tries XLA ..."),
#: and a why that starts with the knob's flag reads well on the command line; the window
#: names the flag's control, whose name is the knob's, so the heading said it first.
_SAID_TWICE = re.compile(r"\b([A-Z][A-Za-z]*(?: [a-z]+)*): (?=\1\b)")
#: A command-line flag, for tests and for a text the table does not know yet.
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]+")


def window_words(text: str) -> str:
    """``text`` with each command-line flag it names replaced by the window's control."""
    for pattern, window in _COMPILED:
        text = pattern.sub(window, text)
    return _SAID_TWICE.sub("", text)
