"""The README's quick start runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


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
