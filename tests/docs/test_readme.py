"""The README's quick start runs as written."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from support import REPO

README = REPO / "README.md"


def test_readme_starts_with_the_two_commands() -> None:
    first_block = re.search(r"```bash\n(.*?)```", README.read_text(), re.S)
    assert first_block is not None
    lines = [line.split("#")[0].strip() for line in first_block.group(1).strip().splitlines()]
    assert lines == ["pip install -e '.[openai]' && graphckpt demo", "pip install -e '.[dev]' && pytest"]


def test_readme_python_example_runs(tmp_path: Path) -> None:
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert code is not None
    script = tmp_path / "quickstart.py"
    script.write_text(code.group(1))
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("diff t1@")
    again = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr  # the example can be run twice on the same database
    assert "~ request: 'weather function' -> 'weather in Fahrenheit'" in out.stdout
    assert "code for weather in Fahrenheit" in out.stdout
    assert (tmp_path / "runs.db").exists()


def test_readme_cli_commands_run_as_written(tmp_path: Path) -> None:
    # The `graphckpt` command section, line by line, on the quick start's graph saved as mymodule.py (its checkpoint
    # placeholder 01a2... replaced by a real id of t1).
    text = README.read_text()
    quickstart = re.search(r"```python\n(.*?)```", text, re.S)
    assert quickstart is not None
    graph_code = quickstart.group(1).split("\napp = ")[0]
    (tmp_path / "mymodule.py").write_text(graph_code + "\ngraph = g\n")
    section = text.split("## The `graphckpt` command", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    commands = [line.split("  #")[0].strip() for line in block.group(1).strip().splitlines()]
    names = ["run", "threads", "threads", "resume", "history", "show", "fork", "diff", "export"]
    assert [c.split()[1] for c in commands] == names
    env = {**os.environ, "PYTHONPATH": str(README.parent), "NO_COLOR": "1"}
    env.pop("GRAPHCKPT_DB", None)
    cli = f"{shlex.quote(sys.executable)} -m graphckpt"
    outputs: list[str] = []
    for command in commands:
        if "01a2..." in command:
            history = json.loads(_run(f"{cli} history t1 --json", tmp_path, env))
            command = command.replace("01a2...", history[2]["checkpoint_id"])
        outputs.append(_run(re.sub(r"(^|&& )graphckpt ", rf"\g<1>{cli} ", command), tmp_path, env))
    assert "thread t1: done" in outputs[0]
    assert json.loads(outputs[5].split("\n", 2)[2])["request"] == "weather"  # show: the state as JSON
    assert "t2" in outputs[6] and "~ request" in outputs[7]
    assert (tmp_path / "t2.jsonl").exists() and (tmp_path / "other.db").exists()


def _run(command: str, cwd: Path, env: dict[str, str]) -> str:
    out = subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"{command}: {out.stderr}"
    return out.stdout


def test_readme_audit_excerpt_shows_a_failed_attempt_a_lost_call_and_the_totals() -> None:
    section = README.read_text().split("## The audit record", 1)[1]
    block = re.search(r"```text\n(.*?)```", section, re.S)
    assert block is not None
    excerpt = block.group(1)
    assert "failed attempts\n  step 2 tools attempt 1" in excerpt and "ConnectionError" in excerpt
    assert "calls lost (started, never finished)\n  step 2 tools execute_tool lookup started" in excerpt
    assert re.search(r"^total: 2 model calls, 37 tokens .* 2 calls lost \(tokens unknown\), cost \$", excerpt, re.M)
