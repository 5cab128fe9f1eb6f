"""The front page keeps its promises (issue 72): its synopsis names every flag the command line
has, its test command is the one CI runs, a newcomer finds how to tune a script in its first
80 lines, and every relative link in README.md, tests/README.md and docs/ leads somewhere."""

import re
from pathlib import Path

import pytest

from tuner.cli import build_parser
from tuner.cli_arguments import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def _synopsis() -> dict[str, str]:
    """README's synopsis, each command's lines joined: {"tune": "mptune tune [--model ...", ...}."""
    text = README.read_text()
    block = text.split("## Command line", 1)[1].split("```", 2)[1]
    commands: dict[str, str] = {}
    name = ""
    for line in block.splitlines():
        started = re.match(r"mptune (?:\[[^]]*\] )?(\w+)", line)
        if started:
            name = started.group(1)
            commands[name] = line
        elif name:
            commands[name] += " " + line.strip()
    return commands


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_synopsis_names_every_flag_of_the_command(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    usage = capsys.readouterr().out.split("\n\n")[0]
    flags = set(re.findall(r"--[a-z0-9][a-z0-9-]*", usage)) - {"--help"}
    line = _synopsis().get(command, "")
    assert line, f"README's synopsis has no line for mptune {command}"
    missing = sorted(flag for flag in flags if not re.search(re.escape(flag) + r"\b", line))
    assert not missing, f"README's synopsis of mptune {command} lacks {missing}"


def test_the_test_command_is_the_one_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    install = re.search(r"^(python3 -m venv .*)$", ci, re.M)
    passes = re.findall(r"^\.venv/bin/python -m pytest .*$", ci, re.M)
    assert install, ".ci/run has no venv and install line"
    assert len(passes) == 2, f".ci/run's pytest passes: {passes}"
    command = " && ".join([install.group(1), *passes])
    assert f"```bash\n{command}\n```" in README.read_text()


def test_a_newcomer_finds_how_to_tune_a_script_in_the_first_80_lines() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines"
    head = "\n".join(lines[:80])
    assert "mptune tune --script" in head
    assert "mptune run" in head


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to -."""
    found = set()
    for heading in re.findall(r"^#+ (.*)$", page.read_text(), re.M):
        found.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return found


@pytest.mark.parametrize(
    "page",
    [README, ROOT / "tests" / "README.md", *sorted((ROOT / "docs").glob("*.md"))],
    ids=lambda page: str(page.relative_to(ROOT)),
)
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
            continue
        if anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: links that lead nowhere: {broken}"
