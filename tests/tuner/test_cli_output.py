"""What the command line writes and prints for a user: the files it writes where the user said
(a folder, a read-only place, a missing folder, the modes an editor would give them), the
sessions list at a terminal's width, the trials table's status cells, a session whose model
failed in its own code, and the batch-size flag's messages (issue 33)."""

from __future__ import annotations

import errno
import fcntl
import os
import pty
import re
import select
import stat
import struct
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

import pytest
from test_faults import SPEEDS, HereProfile
from test_search_strategy import Machine, run
from tests_support import HAZARDS, make_config

from tuner import cli
from tuner.errors import MptuneError
from tuner.search.session import TuningSession, list_sessions
from tuner.trials.result import TrialStatus

ROOT = Path(__file__).resolve().parents[2]


def mptune(
    *args: str, umask: int | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``mptune`` as a user runs it, under ``umask`` when one is given."""
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, **(env or {})},
        preexec_fn=None if umask is None else (lambda: os.umask(umask)),
    )


def one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """The one line of a bad-input error (exit 2, no traceback), checked for ``fragments``."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "internal error" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tuned.json"
    make_config().save(path)
    return path


# -- files the user names: mptune export -o, mptune tune --out ------------------------------------
@pytest.mark.parametrize("fmt", ["json", "script"])
def test_export_to_a_folder_names_it_in_one_line(
    config_file: Path, tmp_path: Path, fmt: str
) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    proc = mptune("export", str(config_file), "--format", fmt, "-o", str(folder))
    one_line_error(proc, str(folder), "is a directory")
    assert list(folder.iterdir()) == []


def test_export_under_a_file_names_the_file_in_one_line(config_file: Path, tmp_path: Path) -> None:
    target = config_file / "again.json"  # the "folder" is the config file itself
    proc = mptune("export", str(config_file), "-o", str(target))
    one_line_error(proc, str(target), "not a directory")


def test_export_to_a_read_only_place_is_one_line(
    config_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A read-only file system (errno 30) fails only when the file is put in place: the check
    before writing cannot see it. The entry point in this process, with the rename failing as
    it does there."""

    def read_only(src: str, dst: str) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(dst))

    monkeypatch.setattr(os, "replace", read_only)
    target = tmp_path / "out" / "train.py"
    assert cli.main(["export", str(config_file), "--format", "script", "-o", str(target)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("mptune: error: ")
    assert "internal error" not in line
    assert str(target) in line
    assert os.strerror(errno.EROFS) in line
    # Nothing is left behind: no half-written file, no temporary file.
    assert not target.exists()
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["tuned.json"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder anyway")
def test_export_into_a_folder_without_write_permission_is_one_line(
    config_file: Path, tmp_path: Path
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    proc = mptune("export", str(config_file), "-o", str(locked / "tuned.json"))
    one_line_error(proc, str(locked / "tuned.json"), "cannot write")


def test_export_says_which_folder_it_created(config_file: Path, tmp_path: Path) -> None:
    target = tmp_path / "new" / "scripts" / "train.py"
    proc = mptune("export", str(config_file), "--format", "script", "-o", str(target))
    assert proc.returncode == 0, proc.stderr
    assert target.is_file()
    assert f"created folder {target.parent}" in proc.stderr
    # Into a folder that exists, nothing is said about folders.
    again = mptune("export", str(config_file), "-o", str(tmp_path / "tuned2.json"))
    assert again.returncode == 0
    assert "created folder" not in again.stderr


def test_tune_out_says_which_folder_it_created_and_refuses_a_folder(tmp_path: Path) -> None:
    """``tune --out`` writes the other user-named file: the same rules as ``export -o``."""
    storage = f"sqlite:///{tmp_path / 's.db'}"
    from test_faults import run_scripted

    run_scripted(Machine(speed=SPEEDS), tmp_path, "r", profile=HereProfile())
    # A finished session continued: nothing runs, the config is written.
    target = tmp_path / "configs" / "tuned.json"
    proc = mptune("tune", "--resume", "r", "--storage", storage, "--out", str(target))
    assert proc.returncode == 0, proc.stderr
    assert target.is_file()
    assert f"created folder {target.parent}" in proc.stderr
    proc = mptune("tune", "--resume", "r", "--storage", storage, "--out", str(tmp_path))
    one_line_error(proc, str(tmp_path), "is a directory")


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_exported_files_get_the_modes_an_editor_gives_them(
    config_file: Path, tmp_path: Path, umask: int
) -> None:
    """New files: 0666 and, for the script, 0777, less the umask (mkstemp's 0600 was kept)."""
    for fmt, mode in (("json", 0o666), ("snippet", 0o666), ("script", 0o777)):
        target = tmp_path / f"new-{fmt}.out"
        proc = mptune("export", str(config_file), "--format", fmt, "-o", str(target), umask=umask)
        assert proc.returncode == 0, proc.stderr
        assert stat.S_IMODE(target.stat().st_mode) == mode & ~umask, fmt


def test_an_exported_file_written_over_keeps_its_mode(config_file: Path, tmp_path: Path) -> None:
    """Written over, a file keeps the mode its owner gave it (as an editor keeps it); a script
    becomes executable where it is readable."""
    private = tmp_path / "private.json"
    private.write_text("{}")
    private.chmod(0o600)
    script = tmp_path / "train.py"
    script.write_text("")
    script.chmod(0o640)
    for fmt, target in (("json", private), ("script", script)):
        proc = mptune("export", str(config_file), "--format", fmt, "-o", str(target), umask=0o022)
        assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE(script.stat().st_mode) == 0o750


# -- mptune sessions: the name is never cut --------------------------------------------------------
def on_a_terminal(*args: str, columns: int) -> str:
    """``mptune`` run on a terminal ``columns`` wide (a pseudo-terminal): what it shows."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tuner", *args],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.DEVNULL,
        env={**env, "TERM": "xterm", "NO_COLOR": "1"},
    )
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the program ended and closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=60) == 0
    text = b"".join(chunks).decode()
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r\n", "\n")


LONG_NAME = "mnist_convnet_keras_io_example-20261126-054512"


@pytest.fixture
def two_sessions(tmp_path: Path) -> str:
    """A store with a finished session of a long name and an unfinished one of a short name."""
    run(Machine(speed=SPEEDS), tmp_path, study=LONG_NAME)
    storage = f"sqlite:///{tmp_path / 's.db'}"
    TuningSession.create("short", storage, {"model": "builtin:mlp"})
    return storage


@pytest.mark.parametrize("columns", [120, 80, 60, 40])
def test_sessions_never_cuts_a_name_at_a_terminals_width(two_sessions: str, columns: int) -> None:
    text = on_a_terminal("sessions", "--storage", two_sessions, columns=columns)
    lines = text.splitlines()
    # Each name whole, on a line of its own or at the start of its row: the string show,
    # export and --resume take can be copied from it.
    for name in (LONG_NAME, "short"):
        assert any(re.match(rf"\W*{re.escape(name)}(\s|$)", line) for line in lines), text
    # The other columns gave way, and nothing else is wider than the terminal.
    assert all(len(line) <= max(columns, len(LONG_NAME)) for line in lines), text
    for shown in ("builtin:cnn", "builtin:mlp", "float32"):
        assert shown in text


def test_sessions_in_a_log_is_a_table_with_whole_names(two_sessions: str) -> None:
    proc = mptune("sessions", "--storage", two_sessions)
    assert proc.returncode == 0, proc.stderr
    (row,) = [line for line in proc.stdout.splitlines() if LONG_NAME in line]
    assert "builtin:cnn" in row  # one row a session, at the 120 columns of a log


# -- the trials table's status cells ---------------------------------------------------------------
def test_a_long_status_is_cut_at_a_word_with_a_mark() -> None:
    """An unsafe trial's status: the reason, then its hazards. A reason too long for the cell is
    shortened at a word boundary and marked with an ellipsis, never cut inside a word."""
    from rich.console import Console

    from tuner import api
    from tuner.console import trials_table
    from tuner.trials.result import TrialError

    reason = HAZARDS[0].evidence
    spec = api.TrialSpec("builtin:mlp", api.Setup("mixed_float16", 64, "dynamic"))
    result = api.TrialResult(
        spec,
        TrialStatus.UNSAFE,
        error=TrialError(reason),
        hazards=(HAZARDS[0],),
        samples_per_second=900.0,
    )
    console = Console(width=120, record=True)
    console.print(trials_table([api.StoredTrial(3, "policies", result, "COMPLETE")]))
    lines = console.export_text().splitlines()
    assert all(len(line) <= 120 for line in lines)
    (header,) = [line for line in lines if line.rstrip().endswith("status")]
    start = header.rindex("status")
    cell = " ".join(line[start:].strip() for line in lines[lines.index(header) + 2 :]).strip()
    assert cell.startswith("unsafe: "), cell
    assert cell.endswith("(hazard: integer_cast)"), cell
    words = set(reason.split())
    for token in cell.removeprefix("unsafe: ").removesuffix("(hazard: integer_cast)").split():
        if token.endswith("…"):
            stem = token.removesuffix("…")
            assert not stem or any(w.startswith(stem) for w in words), token
        else:
            assert token in words, f"{token!r} is cut inside a word: {cell!r}"
    assert "…" in cell  # the reason is longer than a cell: it says it is shortened


def test_the_progress_line_of_a_failed_trial_is_cut_at_a_word() -> None:
    from tuner import api
    from tuner.console import _result_cell
    from tuner.trials.result import TrialError

    reason = HAZARDS[0].evidence + " " + HAZARDS[0].fix
    spec = api.TrialSpec("builtin:mlp", api.Setup("mixed_float16", 64, "dynamic"))
    cell = _result_cell(api.TrialResult(spec, TrialStatus.UNSAFE, error=TrialError(reason)))
    cut = cell.rpartition(" ")[2]
    assert cut.endswith("…")
    assert cut.removesuffix("…") in [*reason.split(), ""]
    assert reason.startswith(cell.removeprefix("unsafe: ").removesuffix("…").rstrip())


# -- a session whose model failed in its own code --------------------------------------------------
BROKEN = {("float32", "none"): TrialStatus.USER_ERROR}


def test_a_failed_session_says_so_and_a_fixed_model_resumes_it(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 's.db'}"
    broken = Machine(speed=SPEEDS, status=BROKEN)
    with pytest.raises(MptuneError, match="fails in its own code") as info:
        run(broken, tmp_path, study="broken")
    # The error says how to go on: fix the file, then resume.
    assert "[[resume broken]]" in str(info.value)  # the CLI says: mptune tune --resume broken
    (summary,) = list_sessions(storage)
    assert summary.outcome == "failed: model error"

    listed = mptune("sessions", "--storage", storage)
    assert listed.returncode == 0, listed.stderr
    (row,) = [line for line in listed.stdout.splitlines() if "broken" in line]
    assert "failed: model error" in row
    assert "did not finish" not in row

    shown = mptune("show", "broken", "--storage", storage)
    assert shown.returncode == 0, shown.stderr
    assert "did not finish" not in shown.stdout
    assert "failed in the model's own code" in shown.stdout
    assert "scripted user_error" in shown.stdout  # what failed
    assert "mptune tune --resume broken" in shown.stdout
    assert "fixed" in shown.stdout

    exported = mptune("export", "broken", "--storage", storage)
    one_line_error(exported, "failed in the model's own code", "--resume broken")

    # The model fixed: --resume runs the trial that failed again, and the search goes on.
    fixed = Machine(speed=SPEEDS)
    result = run(fixed, tmp_path, study="broken", resume=True)
    assert fixed.calls
    assert fixed.calls[0].setup == broken.calls[0].setup
    assert result.recommendation.setup.policy == "float32"
    (summary,) = list_sessions(storage)
    assert summary.outcome.startswith("float32 b")
    shown = mptune("show", "broken", "--storage", storage)
    assert "failed in the model's own code" not in shown.stdout


def test_a_resumed_session_that_fails_again_says_so_again(tmp_path: Path) -> None:
    with pytest.raises(MptuneError):
        run(Machine(speed=SPEEDS, status=BROKEN), tmp_path, study="b")
    still = Machine(speed=SPEEDS, status=BROKEN)
    with pytest.raises(MptuneError, match="fails in its own code"):
        run(still, tmp_path, study="b", resume=True)
    assert len(still.calls) == 1  # run again, not recalled
    (summary,) = list_sessions(f"sqlite:///{tmp_path / 's.db'}")
    assert summary.outcome == "failed: model error"


@pytest.mark.slow
def test_a_broken_model_file_fails_its_session_and_the_fixed_file_resumes_it(
    tmp_path: Path,
) -> None:
    """Real trials: build_model() returns None; the session says it failed; the file fixed,
    ``tune --resume`` runs with it."""
    model = tmp_path / "net.py"
    model.write_text("def build_model():\n    return None\n")
    storage = f"sqlite:///{tmp_path / 's.db'}"
    # On JAX, whose workers start fastest: how a session fails and resumes is the same on
    # every backend.
    tune = [
        "--storage", storage, "--device", "cpu", "--max-trials", "1", "--measure-seconds", "0.2",
        "--backend", "jax",
    ]  # fmt: skip
    proc = mptune("tune", "--model", str(model), "--study", "net", *tune)
    # (A log shows each trial as it ends, on stderr too: the error is the last line.)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("mptune: error: the model fails in its own code"), last
    assert "mptune tune --resume net" in last
    listed = mptune("sessions", "--storage", storage)
    assert "failed: model error" in listed.stdout
    model.write_text(
        textwrap.dedent("""\
        import keras

        def build_model():
            inputs = keras.Input((4,))
            model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
            model.compile("adam", "mse")
            return model
    """)
    )
    proc = mptune("tune", "--resume", "net", *tune)
    assert proc.returncode == 0, proc.stderr
    shown = mptune("show", "net", "--storage", storage)
    assert "Recommendation:" in shown.stdout
    assert "failed" not in shown.stdout


# -- --batch-sizes ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "given, fragments",
    [
        ("0-64", ["0 is not a valid batch size", "the smallest is 1"]),
        ("0,16,32", ["0 is not a valid batch size", "the smallest is 1"]),
        ("64-8", ["the range 64-8 ends below its start", "8-64"]),
        ("8-", ["write a list (16,32,64) or a range (8-1024)"]),
    ],
)
def test_batch_sizes_name_the_real_problem(given: str, fragments: list[str]) -> None:
    line = one_line_error(mptune("tune", "--batch-sizes", given), "--batch-sizes", *fragments)
    if given != "8-":
        assert "write a list" not in line


# -- the trials table at 100 and 120 columns (issue 54) --------------------------------------------
def _transformer_trials() -> list:
    """A tune of a text transformer: float32, an unsafe mixed_bfloat16 with its long status,
    mixed_float16 (the rows the issue saw at 15 lines for two)."""
    from tuner import api
    from tuner.trials.result import TrialError

    def ok(policy: str) -> api.TrialResult:
        spec = api.TrialSpec("builtin:transformer", api.Setup(policy, 64))
        return api.TrialResult(
            spec,
            TrialStatus.OK,
            samples_per_second=1234.0,
            losses=(2.0,) * 40,
            peak_memory_mb=3456.0,
            step_time_ms={"p50": 12.3},
        )

    reason = (
        "mixed_bfloat16 is unsafe for this model: whole numbers up to 30,000 in its float32 "
        "input (token ids) lose their value in bfloat16"
    )
    spec = api.TrialSpec("builtin:transformer", api.Setup("mixed_bfloat16", 64))
    unsafe = api.TrialResult(
        spec,
        TrialStatus.UNSAFE,
        error=TrialError(reason),
        hazards=(HAZARDS[0],),
        samples_per_second=900.0,
    )
    return [
        api.StoredTrial(0, "baseline", ok("float32"), "COMPLETE"),
        api.StoredTrial(1, "policies", unsafe, "COMPLETE"),
        api.StoredTrial(2, "policies", ok("mixed_float16"), "COMPLETE"),
    ]


@pytest.mark.parametrize("width", [100, 120])
def test_the_trials_table_keeps_every_word_whole_at_100_and_120_columns(width: int) -> None:
    """A long status wraps in its own column or moves to a line under its row: no word is cut,
    no row takes more than 3 lines, every line fits the width."""
    from rich.console import Console

    from tuner.console import trials_table

    trials = _transformer_trials()
    console = Console(width=width, record=True)
    console.print(trials_table(trials))
    lines = console.export_text().splitlines()
    assert all(len(line) <= width for line in lines), lines
    text = "\n".join(lines)
    assert "…" not in text.replace("up…", ""), text  # the reason's own shortening, at a word
    words = {
        w
        for t in trials
        for w in (
            f"{t.result.spec.setup.precision} {t.result.spec.setup.loss_scale} {t.stage} "
            f"{t.result.status.value} {t.result.status.value}: "
            f"{t.result.error.message if t.result.error else ''} (hazard: integer_cast)"
        ).split()
    }
    header = next(i for i, line in enumerate(lines) if line.rstrip().endswith("status"))
    body = lines[header + 2 :]
    for token in " ".join(body).split():
        if token.endswith("…"):  # the reason shortened at a word, marked
            assert any(w.startswith(token.removesuffix("…")) for w in words), token
        elif not any(c.isdigit() for c in token) and token not in ("n/a",):
            assert token in words, f"{token!r} is cut: {text}"
    # Each trial's row and whatever it says under it: 3 lines at most.
    starts = [i for i, line in enumerate(body) if line[:1].isdigit()]
    spans = [b - a for a, b in zip(starts, [*starts[1:], len(body)], strict=True)]
    assert max(spans) <= 3, text
    # The precision never cut: each one whole in its row.
    for t, start in zip(trials, starts, strict=True):
        assert t.result.spec.setup.precision in body[start].split(), body[start]
    (unsafe,) = [i for i, start in enumerate(starts) if "unsafe" in body[start]]
    assert "whole numbers" in " ".join(body[starts[unsafe] : starts[unsafe] + spans[unsafe]])


def test_a_wide_table_wraps_headings_and_knobs_before_it_cuts_a_precision() -> None:
    """With knobs and skipped steps too, at 120 columns: headings wrap at their spaces, the
    knobs and skipped steps at theirs, the stage is elided, and no precision is cut."""
    from rich.console import Console

    from tuner import api
    from tuner.console import trials_table

    spec = api.TrialSpec(
        "builtin:transformer",
        api.Setup("mixed_float16", 1024, "dynamic:1024:500", xla=True, steps_per_execution=16),
    )
    knobbed = api.TrialResult(
        spec,
        TrialStatus.OK,
        samples_per_second=123456.0,
        peak_memory_mb=34567.0,
        step_time_ms={"p50": 112.3},
        skipped_steps=3,
        calibration_steps=12,
    )
    trials = [
        *_transformer_trials(),
        api.StoredTrial(13, "steps-per-execution", knobbed, "COMPLETE"),
    ]
    console = Console(width=120, record=True)
    console.print(trials_table(trials))
    lines = console.export_text().splitlines()
    assert all(len(line) <= 120 for line in lines)
    text = "\n".join(lines)
    for precision in ("float32", "mixed_bfloat16", "mixed_float16"):
        assert f" {precision} " in text
    for whole in (
        "dynamic:1024:500",
        "123,456",
        "34,567",
        "calibrating)",
        "spe16",
        "whole numbers",
    ):
        assert whole in text, text
