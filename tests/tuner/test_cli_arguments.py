"""The command line's arguments, declared as tables in tuner/cli.py: the same flags, types,
defaults and help texts as before they were tables (tests/tuner/data/cli_arguments.json was
written from the parser of 304 lines they replaced), and the CLI's modules kept readable.

A deliberate change to a flag or a help text rewrites the golden file:

    python tests/tuner/test_cli_arguments.py
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path
from typing import Any

import pytest

from tuner import cli

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "data" / "cli_arguments.json"


def _value(value: Any) -> Any:
    """An action's attribute as JSON: a type function by its name, tuples as lists."""
    if callable(value):
        return getattr(value, "__name__", repr(value))
    if isinstance(value, tuple):
        return list(value)
    return value


def describe(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """Every command's words and arguments, in order, as plain data (no help formatting, which
    differs between Python versions)."""
    fields = ("option_strings", "dest", "nargs", "const", "default", "type", "choices")
    fields += ("required", "help", "metavar")

    def arguments(p: argparse.ArgumentParser) -> list[dict[str, Any]]:
        exclusive = {
            a.dest: i for i, g in enumerate(p._mutually_exclusive_groups) for a in g._group_actions
        }
        return [
            {
                "action": type(a).__name__,
                **{f: _value(getattr(a, f)) for f in fields},
                "exclusive_group": exclusive.get(a.dest),
            }
            for a in p._actions
            if not isinstance(a, argparse._SubParsersAction)
        ]

    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in sub._choices_actions}
    return {
        "mptune": {"description": parser.description, "arguments": arguments(parser)},
        **{
            name: {
                "help": helps.get(name),
                "description": p.description,
                "handler": _value(p.get_default("handler")),
                "arguments": arguments(p),
            }
            for name, p in sub.choices.items()
        },
    }


def test_the_arguments_are_what_they_were() -> None:
    assert describe(cli.build_parser()) == json.loads(GOLDEN.read_text())


def test_a_table_group_is_mutually_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.build_parser().parse_args(["tune", "--study", "a", "--resume", "b"])
    assert stopped.value.code == 2
    assert "--resume: not allowed with argument --study" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["cli.py", "console.py", "api.py"])
def test_the_faces_modules_stay_readable(module: str) -> None:
    """No function of the CLI, its console or the engine's face over 80 lines, and the CLI
    under 800 lines (issue 24)."""
    source = (ROOT / "tuner" / module).read_text()
    long = [
        f"{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > 80
    ]
    assert not long, long
    if module == "cli.py":
        assert len(source.splitlines()) < 800


def write_golden() -> None:
    """Write :data:`GOLDEN` from the parser as it is now, one argument a line."""
    data = describe(cli.build_parser())
    commands = []
    for name, command in data.items():
        words = [
            f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in command.items() if k != "arguments"
        ]
        rows = ",\n".join(f"   {json.dumps(a)}" for a in command["arguments"])
        commands.append(
            f" {json.dumps(name)}: {{\n"
            + "\n".join(words)
            + f'\n  "arguments": [\n{rows}\n  ]\n }}'
        )
    GOLDEN.write_text("{\n" + ",\n".join(commands) + "\n}\n")


if __name__ == "__main__":
    write_golden()
