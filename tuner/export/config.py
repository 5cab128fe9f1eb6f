"""The tuned config: a versioned JSON schema, validated field by field.

A config file is data. Loading one parses JSON and checks types and values; nothing in it is
ever executed, imported or evaluated. Every string is valid Unicode text without control characters
(free text may hold tabs and line breaks), every figure is finite and in its range, and the JSON is
at most :data:`MAX_DEPTH` levels deep, so whatever a config holds, it loads or fails on one line.

The setup names the Keras 3 backend it was tuned on (``setup.backend``: ``tensorflow``, ``jax``
or ``torch``); a config written before backends were tuned has none, and means TensorFlow.

The config carries the recommendation's precision hazards (``hazards``, beside ``evidence``):
each one's kind, policy and severity must be a known name, and its text is bounded by
:data:`MAX_HAZARD_TEXT`. A config written before hazards existed has none.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tuner.errors import MptuneError
from tuner.hardware.fingerprint import HardwareFingerprint as HardwareFingerprint
from tuner.policies import BACKENDS, KNOWN_POLICIES
from tuner.setup import KNOB_DEFAULTS, SETUP_FIELDS, LossScale, Policy, Setup
from tuner.trials.hazards import KINDS, SEVERITIES, WHOSE, Hazard

SCHEMA = "mptune.config"
SCHEMA_VERSION = 1

#: How deep a config's JSON may nest: the schema needs 3 levels; the slack is for later versions.
MAX_DEPTH = 32
#: The largest count (skipped steps, trial numbers) a config may carry: a signed 64-bit integer.
MAX_COUNT = 2**63 - 1
#: The most hazards a config may list: the probe reports a handful per policy.
MAX_HAZARDS = 1000
#: The longest a hazard's text (its layer, evidence or fix) may be, in characters: the probe's
#: sentences are a few hundred; the limit keeps the comments generated code carries readable.
MAX_HAZARD_TEXT = 4000

#: Control characters (Unicode category Cc): C0, DEL and C1.
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: The same, less tab and newline, for free text.
_TEXT_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: A lone surrogate: JSON can spell one ("\\ud800"), but it is not text and cannot be written out.
_SURROGATE_RE = re.compile(r"[\ud800-\udfff]")


class ConfigError(MptuneError):
    """A config file that is missing, not JSON, of another schema, or has a bad field."""


@dataclass(frozen=True)
class Evidence:
    """Why this setup: the figures behind it (see docs/search.md)."""

    samples_per_second: float | None = None
    samples_per_second_spread: tuple[float, float] | None = None
    baseline_samples_per_second: float | None = None
    speedup_vs_float32: float | None = None
    #: what ``speedup_vs_float32`` is against: the float32 setup (its label), the median of its
    #: runs and their trial numbers; ``float32_paired``: the ratio is instead the median of
    #: per-turn ratios of the two measured back to back
    float32_setup: str | None = None
    float32_samples_per_second: float | None = None
    float32_trials: tuple[int, ...] = ()
    float32_paired: bool = False
    #: the trials whose median ``baseline_samples_per_second`` (float32 at the starting batch
    #: size) is
    baseline_trials: tuple[int, ...] = ()
    memory_saving: float | None = None
    peak_memory_mb: float | None = None
    loss_gap: float | None = None
    skipped_steps: int = 0
    reason: str = ""
    trials: tuple[int, ...] = ()
    #: the device's rate from batches in memory, and fit's own loop's on the user's input
    #: (issue 35; before it, the input timed alone): None where the input was not timed
    device_samples_per_second: float | None = None
    input_samples_per_second: float | None = None
    input_fed_by: str | None = None
    input_bound: bool = False
    #: what a training script trains today, in words with its lines (issue 70), where the
    #: baseline (``baseline_samples_per_second``) is that setup run unchanged; None: the
    #: baseline is float32 at the starting batch size. Written only where set.
    today: str | None = None
    #: a trap in what the user runs today (issue 71), the recommendation's first line: "your
    #: run today does not train: ... Fix: ..."; no speed-up is stated against that run. None:
    #: none. Written only where set.
    today_trap: str | None = None


@dataclass(frozen=True)
class TunedConfig:
    """Everything ``mptune export --format json`` writes."""

    setup: Setup
    model: str
    evidence: Evidence
    hardware: HardwareFingerprint
    versions: dict[str, str] = field(default_factory=dict)
    created: str = ""
    mptune_version: str = ""
    session: str | None = None
    #: Every precision hazard the search's numerics probe found, for every policy it probed
    #: (unsafe first), as the recommendation lists them: those of ``setup.policy`` are warnings
    #: about the chosen setup, the unsafe ones of other policies say why those were not chosen.
    hazards: tuple[Hazard, ...] = ()

    def policy_hazards(self) -> tuple[Hazard, ...]:
        """The hazards of the chosen policy (``setup.policy``)."""
        return tuple(h for h in self.hazards if h.policy == self.setup.policy.name)

    def to_dict(self) -> dict[str, Any]:
        evidence = asdict(self.evidence)
        evidence["trials"] = list(self.evidence.trials)
        evidence["float32_trials"] = list(self.evidence.float32_trials)
        evidence["baseline_trials"] = list(self.evidence.baseline_trials)
        if self.evidence.samples_per_second_spread is not None:
            evidence["samples_per_second_spread"] = list(self.evidence.samples_per_second_spread)
        if evidence["today"] is None:
            del evidence["today"]  # a model file's, as configs exported before it was kept
        if evidence["today_trap"] is None:
            del evidence["today_trap"]  # as configs exported before issue 71
        hardware = asdict(self.hardware)
        hardware["cpu_flags"] = list(self.hardware.cpu_flags)
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "created": self.created,
            "mptune_version": self.mptune_version,
            "session": self.session,
            "model": self.model,
            "setup": self.setup.to_dict(explicit=True),
            "evidence": evidence,
            "hazards": [h.to_dict() for h in self.hazards],
            "hardware": hardware,
            "versions": dict(self.versions),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: Any, source: str = "config") -> TunedConfig:
        """Validate and build; every problem names its field.

        Raises:
            ConfigError: naming the file (``source``) and the field.
        """
        v = _Validator(source)
        v.shallow(data)
        root = v.obj(data, "the top level")
        _check_schema(root, source)
        setup = v.setup(root.get("setup"))
        evidence = _evidence(v, root)
        hazards = v.array(root.get("hazards", []), "hazards")
        if len(hazards) > MAX_HAZARDS:
            raise ConfigError(
                f"{source}: field hazards must list at most {MAX_HAZARDS:,} hazards, "
                f"got {len(hazards):,}"
            )
        hardware = _hardware(v, root, source)
        versions = v.obj(root.get("versions", {}), "versions")
        return cls(
            setup=setup,
            # A model file's path may hold a tab or a line break (POSIX allows both); it is
            # only ever written into generated code as a Python literal.
            model=v.string(root.get("model"), "model", text=True),
            evidence=evidence,
            hardware=hardware,
            versions={
                v.key(k, "versions"): v.string(x, f"versions.{k}") for k, x in versions.items()
            },
            created=v.string(root.get("created", ""), "created", allow_empty=True),
            mptune_version=v.string(
                root.get("mptune_version", ""), "mptune_version", allow_empty=True
            ),
            session=v.optional_string(root.get("session"), "session"),
            hazards=tuple(v.hazard(x, f"hazards[{i}]") for i, x in enumerate(hazards)),
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TunedConfig:
        """Read and validate a config file.

        Raises:
            ConfigError: missing, unreadable, not JSON, or a bad field.
        """
        name = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {name}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file {name}: {exc}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{name} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
            ) from None
        except RecursionError:
            raise ConfigError(
                f"{name}: the JSON is nested too deeply (more than {MAX_DEPTH} levels)"
            ) from None
        except ValueError:  # Python refuses integers over 4300 digits (int_max_str_digits)
            raise ConfigError(f"{name} is not valid JSON: a number has too many digits") from None
        return cls.from_dict(data, source=name)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write atomically: a crash leaves the old file or the new one, never half of one."""
        write_atomic(Path(path), self.to_json())


def write_atomic(path: Path, text: str, executable: bool = False) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (a crash leaves the old
    file or the new one, never half of one), creating the folders it needs.

    The file gets the mode an editor gives it: a new one 0666, or 0777 for an ``executable``
    script, less the umask (the kernel applies it when the file is created; ``mkstemp``'s 0600
    made every export private to its owner); a file written over keeps its own mode, and an
    ``executable`` one is made executable where it is readable.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        kept: int | None = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        kept = None
    if kept is not None and executable:
        kept |= (kept & 0o444) >> 2
    fd, tmp = _create_beside(path, 0o777 if executable else 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            if kept is not None:
                os.chmod(tmp, kept)
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _create_beside(path: Path, mode: int) -> tuple[int, str]:
    """A new empty file beside ``path`` under an unused name, opened for writing and created
    with ``mode`` less the umask."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, flags, mode), tmp
        except FileExistsError:
            continue  # another writer's temporary file: draw another name


class _Validator:
    """Type checks that name the field and the file."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, field_name: str, expected: str, value: Any) -> ConfigError:
        try:
            shown = repr(value)
        except (ValueError, RecursionError):  # an integer over 4300 digits, or deep nesting
            shown = f"a {type(value).__name__}"
        shown = shown if len(shown) < 60 else shown[:57] + "..."
        return ConfigError(
            f"{self.source}: field {_printable(field_name)} must be {expected}, got {shown}"
        )

    def shallow(self, data: Any) -> None:
        """Check, without recursion, that ``data`` nests at most :data:`MAX_DEPTH` levels.

        Raises:
            ConfigError: naming the top-level field that nests too deeply.
        """
        # (value, its depth, the top-level field it is in)
        stack: list[tuple[Any, int, str]] = [(data, 1, "the top level")]
        while stack:
            node, depth, top = stack.pop()
            if not isinstance(node, (dict, list)):
                continue
            if depth > MAX_DEPTH:
                raise ConfigError(
                    f"{self.source}: field {_printable(top)} is nested too deeply "
                    f"(more than {MAX_DEPTH} levels)"
                )
            if isinstance(node, dict):
                stack.extend(
                    (child, depth + 1, str(key) if depth == 1 else top)
                    for key, child in node.items()
                )
            else:
                stack.extend((child, depth + 1, top) for child in node)

    def obj(self, value: Any, name: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(name, "an object", value)
        return value

    def array(self, value: Any, name: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(name, "a list", value)
        return value

    def pair(self, value: Any, name: str) -> list[Any]:
        if not isinstance(value, list) or len(value) != 2:
            raise self.fail(name, "a list of two numbers", value)
        return value

    def spread(self, value: Any, name: str) -> tuple[float, float]:
        low, high = (self.number(x, name, False, low=0.0) for x in self.pair(value, name))
        assert low is not None
        assert high is not None  # not optional: number() raised otherwise
        if low > high:
            raise self.fail(name, "a list of two numbers, the lower first", value)
        return low, high

    def string(
        self,
        value: Any,
        name: str,
        allow_empty: bool = False,
        text: bool = False,
        limit: int | None = None,
    ) -> str:
        """A string; ``text`` (free text) may hold tabs and newlines, a name no control
        character at all; ``limit``: at most that many characters."""
        if not isinstance(value, str) or (not value and not allow_empty):
            raise self.fail(name, "a non-empty string" if not allow_empty else "a string", value)
        if limit is not None and len(value) > limit:
            raise ConfigError(
                f"{self.source}: field {_printable(name)} must be at most {limit:,} characters, "
                f"got {len(value):,}"
            )
        surrogate = _SURROGATE_RE.search(value)
        if surrogate:
            raise ConfigError(
                f"{self.source}: field {_printable(name)} must be valid Unicode text, "
                f"got a lone surrogate {surrogate.group()!r}"
            )
        control = (_TEXT_CONTROL_RE if text else _CONTROL_RE).search(value)
        if control:
            raise ConfigError(
                f"{self.source}: field {_printable(name)} must not contain control characters, "
                f"got {control.group()!r} at position {control.start()}"
            )
        return value

    def key(self, value: str, name: str) -> str:
        """A key of object ``name``, held to the rules of a name."""
        return self.string(value, f"{name} (a key)", allow_empty=True)

    def optional_string(self, value: Any, name: str) -> str | None:
        return None if value is None else self.string(value, name, allow_empty=True)

    def number(
        self,
        value: Any,
        name: str,
        optional: bool = True,
        low: float = -math.inf,
        high: float = math.inf,
    ) -> float | None:
        """A finite number from ``low`` to ``high`` (or null where ``optional``)."""
        if value is None and optional:
            return None
        expected = "a finite number" + (" or null" if optional else "")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(name, expected, value)
        try:
            number = float(value)
        except OverflowError:  # an integer beyond any float
            raise self.fail(name, expected, value) from None
        if not math.isfinite(number):
            raise self.fail(name, expected, value)
        if not low <= number <= high:
            bounds = (
                f"from {low:g} to {high:g}"
                if math.isfinite(low) and math.isfinite(high)
                else f"at least {low:g}"
                if math.isfinite(low)
                else f"at most {high:g}"
            )
            raise self.fail(name, f"a number {bounds}", value)
        return number

    def positive_int(self, value: Any, name: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.fail(name, "a positive integer", value)
        return value

    def setup(self, value: Any) -> Setup:
        s = self.obj(value, "setup")
        extra = sorted(map(str, set(s) - SETUP_FIELDS))
        if extra:
            shown = ", ".join(map(_printable, extra))
            raise ConfigError(f"{self.source}: unknown field(s) in setup: {shown}")
        parts: dict[str, Any] = {}
        for name, parse in (("policy", Policy.parse), ("loss_scale", LossScale.parse)):
            try:
                parts[name] = parse(self.string(s.get(name), f"setup.{name}"))
            except ValueError as exc:
                raise ConfigError(f"{self.source}: field setup.{name}: {exc}") from None
        batch_size = self.positive_int(s.get("batch_size"), "setup.batch_size")
        knobs: dict[str, Any] = {}
        for name, default in KNOB_DEFAULTS.items():
            if name not in s:
                continue
            value = s[name]
            if isinstance(default, bool):
                if not isinstance(value, bool):
                    raise self.fail(f"setup.{name}", "true or false", value)
                knobs[name] = value
            elif name == "backend":
                knobs[name] = self.choice(value, "setup.backend", BACKENDS, "Keras backend")
            else:
                knobs[name] = self.positive_int(value, f"setup.{name}")
        # Setup's own rules (ranges, TF32 on float32 only), checked one field at a time so that
        # the message names the field at fault.
        policy, scale = parts["policy"], parts["loss_scale"]
        checks: list[tuple[str, int, dict[str, Any]]] = [("batch_size", batch_size, {})]
        checks += [(name, 1, {name: value}) for name, value in knobs.items()]
        for name, size, knob in checks:
            try:
                Setup(policy, size, scale, **knob)
            except ValueError as exc:
                raise ConfigError(f"{self.source}: field setup.{name}: {exc}") from None
        try:
            return Setup(policy, batch_size, scale, **knobs)
        except ValueError as exc:  # a combination that no one field explains
            raise ConfigError(f"{self.source}: setup: {exc}") from None

    def choice(self, value: Any, name: str, choices: tuple[str, ...], what: str) -> str:
        """A name from ``choices`` (``what`` names the kind of value in the message)."""
        text = self.string(value, name)
        if text not in choices:
            raise ConfigError(
                f"{self.source}: field {_printable(name)}: unknown {what} {text!r}: "
                f"choose one of {', '.join(choices)}"
            )
        return text

    def hazard(self, value: Any, name: str) -> Hazard:
        """One entry of ``hazards``: kind, policy and severity from their known names; layer
        (null for the model as a whole), evidence and fix as free text of at most
        :data:`MAX_HAZARD_TEXT` characters."""
        h = self.obj(value, name)
        layer = h.get("layer")
        return Hazard(
            kind=self.choice(h.get("kind"), f"{name}.kind", KINDS, "hazard kind"),
            policy=self.choice(h.get("policy"), f"{name}.policy", KNOWN_POLICIES, "policy"),
            layer=None
            if layer is None
            else self.string(
                layer, f"{name}.layer", allow_empty=True, text=True, limit=MAX_HAZARD_TEXT
            ),
            evidence=self.string(
                h.get("evidence"), f"{name}.evidence", text=True, limit=MAX_HAZARD_TEXT
            ),
            fix=self.string(h.get("fix"), f"{name}.fix", text=True, limit=MAX_HAZARD_TEXT),
            severity=self.choice(h.get("severity"), f"{name}.severity", SEVERITIES, "severity"),
            figure=None
            if h.get("figure") is None
            else self.string(h.get("figure"), f"{name}.figure", text=True, limit=200),
            at=None
            if h.get("at") is None
            else self.string(h.get("at"), f"{name}.at", text=True, limit=MAX_HAZARD_TEXT),
            whose=None
            if h.get("whose") is None
            else self.choice(h.get("whose"), f"{name}.whose", WHOSE, "hazard owner"),
        )

    def count(self, value: Any, name: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
            raise self.fail(name, "a whole number from 0 to 2**63-1", value)
        return value


def _printable(text: str) -> str:
    """``text`` for a message: characters that cannot be shown are escaped as in ``repr``."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _check_schema(root: dict[str, Any], source: str) -> None:
    """Refuse what is not an mptune config, or one of a schema this mptune cannot read."""
    schema = root.get("schema")
    if schema != SCHEMA:
        raise ConfigError(
            f"{source}: not an mptune config (field schema is {schema!r}, expected {SCHEMA!r})"
        )
    version = root.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ConfigError(f"{source}: field schema_version must be an integer, got {version!r}")
    if version > SCHEMA_VERSION:
        raise ConfigError(
            f"{source}: schema version {version} is newer than this mptune "
            f"understands ({SCHEMA_VERSION}); upgrade mptune"
        )
    if version < 1:
        raise ConfigError(f"{source}: field schema_version must be at least 1, got {version}")


def _evidence(v: _Validator, root: dict[str, Any]) -> Evidence:
    """The config's evidence, validated field by field."""
    e = v.obj(root.get("evidence", {}), "evidence")
    spread = e.get("samples_per_second_spread")
    evidence = Evidence(
        samples_per_second=v.number(
            e.get("samples_per_second"), "evidence.samples_per_second", low=0.0
        ),
        samples_per_second_spread=(
            v.spread(spread, "evidence.samples_per_second_spread") if spread is not None else None
        ),
        baseline_samples_per_second=v.number(
            e.get("baseline_samples_per_second"),
            "evidence.baseline_samples_per_second",
            low=0.0,
        ),
        speedup_vs_float32=v.number(
            e.get("speedup_vs_float32"), "evidence.speedup_vs_float32", low=0.0
        ),
        float32_setup=(
            v.string(e["float32_setup"], "evidence.float32_setup", text=True)
            if e.get("float32_setup") is not None
            else None
        ),
        float32_samples_per_second=v.number(
            e.get("float32_samples_per_second"), "evidence.float32_samples_per_second", low=0.0
        ),
        float32_trials=_counts(v, e, "float32_trials"),
        float32_paired=bool(e.get("float32_paired", False)),
        baseline_trials=_counts(v, e, "baseline_trials"),
        # 1 - mixed peak / float32 peak: negative where the mixed policy used more memory.
        memory_saving=v.number(e.get("memory_saving"), "evidence.memory_saving", high=1.0),
        peak_memory_mb=v.number(e.get("peak_memory_mb"), "evidence.peak_memory_mb", low=0.0),
        loss_gap=v.number(e.get("loss_gap"), "evidence.loss_gap", low=0.0),
        skipped_steps=v.count(e.get("skipped_steps", 0), "evidence.skipped_steps"),
        reason=v.string(e.get("reason", ""), "evidence.reason", allow_empty=True, text=True),
        trials=_counts(v, e, "trials"),
        device_samples_per_second=v.number(
            e.get("device_samples_per_second"), "evidence.device_samples_per_second", low=0.0
        ),
        input_samples_per_second=v.number(
            e.get("input_samples_per_second"), "evidence.input_samples_per_second", low=0.0
        ),
        today=(
            v.string(e["today"], "evidence.today", text=True)
            if e.get("today") is not None
            else None
        ),
        today_trap=(
            v.string(e["today_trap"], "evidence.today_trap", text=True)
            if e.get("today_trap") is not None
            else None
        ),
        input_fed_by=(
            v.string(e["input_fed_by"], "evidence.input_fed_by", text=True)
            if e.get("input_fed_by") is not None
            else None
        ),
        input_bound=bool(e.get("input_bound", False)),
    )
    return evidence


def _counts(v: _Validator, e: dict[str, Any], key: str) -> tuple[int, ...]:
    """A list of trial numbers in the evidence (absent: none)."""
    name = f"evidence.{key}"
    return tuple(v.count(t, name) for t in v.array(e.get(key, []), name))


def _hardware(v: _Validator, root: dict[str, Any], source: str) -> HardwareFingerprint:
    """The hardware the config was tuned on, validated field by field."""
    h = v.obj(root.get("hardware"), "hardware")
    device = v.string(h.get("device"), "hardware.device")
    if device not in ("cpu", "gpu"):
        raise ConfigError(f"{source}: field hardware.device must be 'cpu' or 'gpu', got {device!r}")
    hardware = HardwareFingerprint(
        device=device,
        gpu_name=v.optional_string(h.get("gpu_name"), "hardware.gpu_name"),
        compute_capability=v.optional_string(
            h.get("compute_capability"), "hardware.compute_capability"
        ),
        gpu_memory_total_mb=v.number(
            h.get("gpu_memory_total_mb"), "hardware.gpu_memory_total_mb", low=0.0
        ),
        cpu_model=v.optional_string(h.get("cpu_model"), "hardware.cpu_model"),
        cpu_flags=tuple(
            v.string(f, "hardware.cpu_flags")
            for f in v.array(h.get("cpu_flags", []), "hardware.cpu_flags")
        ),
        digest=v.string(h.get("digest", ""), "hardware.digest", allow_empty=True),
    )
    return hardware
