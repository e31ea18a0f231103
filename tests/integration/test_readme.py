"""README.md stays a short guide whose commands exist.

Every ``refactx ...`` and ``refactx-pipeline ...`` command the README names (in its ``bash`` and
``text`` blocks and in inline code; ``./dev demo`` is ``refactx-pipeline demo``) must be a
command of the installed wheels, and every ``--option`` written with it must be in the
``--help`` of that command. An option in inline code on its own (``--dsn``) must be in the help
of one of the commands the README names. The commands run from the installed wheels (the
``bin`` folder of this Python, else ``.venv/bin``); a command that is not installed is skipped.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_BYTES = 12_500
MAX_LINE = 200

# a command and its subcommand: `refactx ask`, `.venv/bin/refactx-pipeline build`, `./dev demo`
COMMAND = re.compile(r"(?:^|(?<=[\s/`(]))(refactx-pipeline|refactx|\./dev)(?![\w-])(?:[ \t]+([a-z][a-z-]*))?")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+(?:\n[^`\n]+)?)`")
STANDALONE_OPTION = re.compile(r"^--[a-z][a-z0-9-]*(?:[ =].*)?$", re.S)


def _command_key(program: str, sub: str | None) -> tuple[str, str | None] | None:
    if program == "./dev":
        return ("refactx-pipeline", "demo") if sub == "demo" else None  # ./dev test is pytest
    return program, sub


def _invocations(text: str) -> list[tuple[tuple[str, str | None], set[str]]]:
    """(command, subcommand) and the options written after it, up to the next command."""
    found = []
    matches = list(COMMAND.finditer(text))
    for i, match in enumerate(matches):
        key = _command_key(match.group(1), match.group(2))
        if key is None:
            continue
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        found.append((key, set(OPTION.findall(text[match.end():end]))))
    return found


def readme_commands(markdown: str) -> tuple[dict[tuple[str, str | None], set[str]], set[str]]:
    """Options per command the README names, and the options it names in inline code alone."""
    commands: dict[tuple[str, str | None], set[str]] = {}
    standalone: set[str] = set()

    def add(found):
        for key, options in found:
            commands.setdefault(key, set()).update(options)

    prose = markdown
    for fence in FENCE.finditer(markdown):
        prose = prose.replace(fence.group(0), "")
        if fence.group(1) not in ("bash", "sh", "text", ""):
            continue
        for line in fence.group(2).replace("\\\n", " ").splitlines():
            add(_invocations(line.removeprefix("$ ")))
    for span in INLINE.finditer(prose):
        code = " ".join(span.group(1).split())
        if STANDALONE_OPTION.match(code):
            standalone.update(OPTION.findall(code.split(" ")[0].split("=")[0]))
        elif COMMAND.match(code):
            add(_invocations(code))
    return commands, standalone


def _bin(program: str) -> Path | None:
    for folder in (Path(sys.executable).parent, ROOT / ".venv" / "bin"):
        if (folder / program).exists():
            return folder / program
    return None


@functools.cache
def help_text(program: str, sub: str | None) -> str:
    path = _bin(program)
    if path is None:
        pytest.skip(f"{program} is not installed (./dev setup installs it)")
    argv = [str(path)] + ([sub] if sub else []) + ["--help"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(argv[-3:])} exits {proc.returncode}: {proc.stderr.strip()[-500:]}"
    return proc.stdout


def _has_option(help_out: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", help_out) is not None


COMMANDS, STANDALONE = readme_commands(README.read_text(encoding="utf-8"))


def test_readme_is_a_short_guide():
    data = README.read_bytes()
    assert len(data) <= MAX_BYTES, f"README.md is {len(data)} bytes (at most {MAX_BYTES})"
    long_lines = [n for n, line in enumerate(data.decode("utf-8").splitlines(), 1) if len(line) > MAX_LINE]
    assert not long_lines, f"README.md lines over {MAX_LINE} characters: {long_lines}"


def test_the_reader_finds_commands_and_options():
    # the parser itself: a README sample with a block, a continuation, inline code and a comment
    sample = (
        "Run `refactx-pipeline builds --release NAME`; options (`--dsn`).\n\n"
        "```bash\n.venv/bin/refactx serve --index-file a=b.rfx \\\n    --port 8000   # or --engine vllm\n"
        "./dev demo --no-question\n./dev test -x\n```\n"
    )
    commands, standalone = readme_commands(sample)
    assert commands == {
        ("refactx-pipeline", "builds"): {"--release"},
        ("refactx", "serve"): {"--index-file", "--port", "--engine"},
        ("refactx-pipeline", "demo"): {"--no-question"},
    }
    assert standalone == {"--dsn"}
    # and the README names both wheels' commands
    assert {program for program, _ in COMMANDS} == {"refactx", "refactx-pipeline"}


@pytest.mark.parametrize("command", sorted(COMMANDS, key=lambda k: (k[0], k[1] or "")),
                         ids=lambda k: " ".join(p for p in k if p))
def test_readme_command_and_its_options_exist(command):
    program, sub = command
    out = help_text(program, sub)
    missing = sorted(o for o in COMMANDS[command] if not _has_option(out, o))
    assert not missing, f"README.md names {missing} for `{program} {sub or ''}`, not in its --help"


@pytest.mark.parametrize("option", sorted(STANDALONE))
def test_readme_option_in_prose_exists_in_some_command(option):
    helps = [help_text(program, sub) for program, sub in COMMANDS]
    assert any(_has_option(out, option) for out in helps), \
        f"README.md names {option}, which no command it names has"
