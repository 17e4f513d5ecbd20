"""Smoke test of the benchmark harness: ``bench/run.py --quick`` runs every workload at tiny sizes for every engine
that imports, on memory and SQLite (and PostgreSQL when the server answers), exits 0 and writes its report. No timing
is asserted; the benchmarks themselves are not part of the test run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO


def _postgres_reachable() -> bool:
    sys.path.insert(0, str(REPO))
    try:
        from bench.storage import postgres_reachable

        return postgres_reachable() is None
    finally:
        sys.path.remove(str(REPO))


@pytest.mark.slow
def test_quick_run_writes_report(tmp_path: Path) -> None:
    out = tmp_path / "RESULTS.md"
    savers = "memory,sqlite,postgres" if _postgres_reachable() else "memory,sqlite"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "run.py"), "--quick", "--savers", savers, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    text = out.read_text()
    assert text.startswith("# graphckpt benchmark results")
    assert "| workload | saver | measure |" in text
    assert "| W1 | sqlite |" in text
    floor = next(line for line in text.splitlines() if line.startswith("| graphckpt | sqlite |"))
    assert "- |" not in floor.split("|", 4)[4], floor  # both FLOORs (plain and WAL written ahead) were measured
