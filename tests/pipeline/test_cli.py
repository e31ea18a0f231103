"""The CLI: every command explains itself, and bad input is a clear error."""

from __future__ import annotations

import subprocess
import sys

import pytest

from refactx_pipeline.cli.commands import build_parser

COMMANDS = ["demo", "build", "builds", "path-index", "graph-index", "questions"]
# what the runtime's command, refactx, does over a built index: no pipeline subcommand repeats it
RUNTIME_COMMANDS = ["ask", "complete", "explore", "facts", "eval", "serve", "paths"]


def test_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert command in out


def test_the_two_commands_share_no_subcommand():
    from refactx_index.cli import build_parser as runtime_parser

    def subcommands(parser) -> set[str]:
        (action,) = [a for a in parser._actions if a.choices and a.dest == "command"]
        return set(action.choices)

    pipeline, runtime = subcommands(build_parser()), subcommands(runtime_parser())
    assert pipeline == set(COMMANDS) and runtime == set(RUNTIME_COMMANDS)
    assert not pipeline & runtime


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([command, "--help"])
    assert exc.value.code == 0
    assert "--config" in capsys.readouterr().out


def test_console_script_reports_config_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[tree]\nnosuch = 1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "refactx_pipeline.cli", "build", "--config", str(bad)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1
    assert "tree.nosuch: unknown key" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_console_script_names_every_bad_override(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "refactx_pipeline.cli", "build", "--set", "tree.subtree_threshold=0",
         "--set", "labels.collision_policy=merge"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert proc.returncode == 1
    assert "tree.subtree_threshold" in proc.stderr and "labels.collision_policy" in proc.stderr


class _Result:
    def __init__(self, seconds: float, counts: dict) -> None:
        self.seconds, self.counts = seconds, counts


def test_progress_off_a_terminal_is_plain_lines():
    import io

    from refactx_pipeline.cli.progress import BuildProgress

    out = io.StringIO()
    with BuildProgress(["parse", "labels"], out=out, interactive=False) as progress:
        progress.on_stage("parse", None)
        progress.on_stage("parse", _Result(1.5, {"lines_in": 10, "rejected": 0}))
        progress.on_stage("labels", None)
        progress.on_stage("labels", _Result(0.5, {"labels": 3}))
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    assert text.splitlines() == [
        "  parse        started",
        "  parse           1.5s  lines_in=10, rejected=0",
        "  labels       started",
        "  labels          0.5s  labels=3",
    ]


def test_progress_on_a_terminal_is_a_bar():
    import io

    from refactx_pipeline.cli.progress import BuildProgress

    out = io.StringIO()
    with BuildProgress(["parse"], out=out, interactive=True) as progress:
        progress.on_stage("parse", None)
        progress.on_stage("parse", _Result(1.5, {"lines_in": 10}))
    assert "\r" in out.getvalue() and "1/1" in out.getvalue()
