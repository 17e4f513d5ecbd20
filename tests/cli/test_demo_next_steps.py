"""After ``graphckpt demo``, the commands it prints work as pasted: in a fresh directory, each one exits 0.

The demo leaves ``graphckpt.db`` in the current directory (where the other commands look by default), its threads
record a graph the CLI can load (``graphckpt.cli.demo:graph``), and it ends with commands to paste: the tree, a
fork after step 2 with another instruction, and running that fork.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CLI = f"{shlex.quote(sys.executable)} -m graphckpt.cli"


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "GRAPHCKPT_"))}


def _shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` as a user pastes it into a shell, with ``graphckpt`` meaning this checkout's CLI."""
    assert command.startswith("graphckpt ")
    return subprocess.run(
        CLI + command.removeprefix("graphckpt"),
        shell=True,
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _printed_commands(out: str) -> list[str]:
    return re.findall(r"^ +\$ (graphckpt .+)$", out, re.MULTILINE)


def test_the_commands_the_demo_prints_work_as_pasted(tmp_path: Path) -> None:
    demo = _shell("graphckpt demo", tmp_path)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert (tmp_path / "graphckpt.db").is_file()
    commands = _printed_commands(demo.stdout)
    assert [c.split()[1] for c in commands] == ["history", "fork", "resume"], demo.stdout
    assert "--step 2" in commands[1] and "--db" not in " ".join(commands)
    results = [_shell(command, tmp_path) for command in commands]
    for command, result in zip(commands, results, strict=True):
        assert result.returncode == 0, f"{command}: {result.stderr}"
    assert "weather-fahrenheit" in results[0].stdout  # the tree shows the demo's fork
    assert "done at step 6" in results[2].stdout
    assert "graphckpt.cli.demo:graph" in results[2].stderr  # the recorded graph is named before it is loaded
    threads = _shell("graphckpt threads --json", tmp_path)
    assert "weather-async" in threads.stdout and '"graph": "graphckpt.cli.demo:graph"' in threads.stdout
    assert _shell("graphckpt graph graphckpt.cli.demo:graph", tmp_path).stdout.startswith("flowchart")


def test_with_another_database_the_commands_name_it(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    demo = _shell("graphckpt --db 'elsewhere/my demo.db' demo", tmp_path)
    assert demo.returncode == 0, demo.stderr
    commands = _printed_commands(demo.stdout)
    assert all(c.startswith("graphckpt --db 'elsewhere/my demo.db' ") for c in commands), commands
    for command in commands:
        result = _shell(command, tmp_path)
        assert result.returncode == 0, f"{command}: {result.stderr}"
    assert not (tmp_path / "graphckpt.db").exists()
