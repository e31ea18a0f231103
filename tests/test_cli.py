"""The CLI: every command explains itself, and bad input is a clear error."""

from __future__ import annotations

import subprocess
import sys

import pytest

from refactx_pipeline.cli import build_parser

COMMANDS = ["demo", "build", "complete", "builds"]


def test_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert command in out


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
    assert "unknown config key" in proc.stderr or "unknown TreeConfig keys" in proc.stderr
