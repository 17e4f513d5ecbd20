"""``graphckpt`` processes on one database running ``support.lease_graph:graph``, for the lease and recovery tests:
started and read back as a user would, with the graph's side file (which effect ran in which pid) and gate (how many
times the slow node was reached)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from support import child_env

__all__ = ["Cli"]


class Cli:
    """``graphckpt`` processes on one database, with the side file and gate of ``lease_graph``."""

    def __init__(self, tmp_path: Path, db: str) -> None:
        self.db, self.side, self.gate = db, tmp_path / "side.txt", tmp_path / "gate"
        base = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHCKPT_")}
        self.env = child_env(base=base, LEASE_SIDE=str(self.side), LEASE_GATE=str(self.gate), COLUMNS="200")
        self.cwd = tmp_path

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "graphckpt.cli", *args, "--db", self.db],
            cwd=self.cwd,
            env={**self.env, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        proc = self.start(*args)
        out, err = proc.communicate(timeout=60)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def reached(self) -> int:
        """How many times ``wait`` got past its journaled ``wait:before`` (see ``lease_graph``)."""
        path = Path(f"{self.gate}.reached")
        return len(path.read_text().splitlines()) if path.exists() else 0

    def effects(self) -> Counter[str]:
        text = self.side.read_text() if self.side.exists() else ""
        return Counter(line.split("\t")[0] for line in text.splitlines())

    def pids(self, effect: str) -> list[int]:
        text = self.side.read_text() if self.side.exists() else ""
        return [int(p) for e, p in (line.split("\t") for line in text.splitlines()) if e == effect]

    def thread(self, thread_id: str) -> dict[str, object]:
        done = self.run("threads", "--json")
        assert done.returncode == 0, done.stderr
        [row] = [t for t in json.loads(done.stdout) if t["thread_id"] == thread_id]
        return dict(row)

    def steps(self, thread_id: str) -> list[int]:
        done = self.run("history", thread_id, "--json")
        assert done.returncode == 0, done.stderr
        return sorted(int(c["step"]) for c in json.loads(done.stdout))
