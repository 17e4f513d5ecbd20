"""A private PostgreSQL cluster for a test that must stop or restart its server (never the shared one on 5432).

    with private_cluster() as cluster:          # initdb + pg_ctl start on a free port, trust auth, database "test"
        dsn = cluster.dsn                        # postgresql://postgres@127.0.0.1:<port>/test
        cluster.restart()                        # pg_ctl restart -m fast: every connection is dropped
    # stopped (immediate) and its directory removed

PostgreSQL refuses to run as root: as root, every ``initdb``/``pg_ctl`` runs as the ``postgres`` user through
``runuser``, in a directory made under the system temp dir and owned by that user (a pytest ``tmp_path`` sits under
a root-only directory the server could not enter). :func:`require_private_cluster` skips (fails under CI) when the
binaries or that user are missing.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["PrivateCluster", "private_cluster", "require_private_cluster"]


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def require_private_cluster() -> None:
    """Fail under CI, skip elsewhere, when this machine cannot start a private cluster."""
    why = None
    if _bindir() is None:
        why = "no initdb/pg_ctl found (install the PostgreSQL server package)"
    elif os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            why = "running as root and there is no 'postgres' user to run the server as"
    if why is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"a private PostgreSQL cluster cannot start: {why}")
    pytest.skip(f"a private PostgreSQL cluster cannot start: {why}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateCluster:
    """One cluster: its data directory, port and socket directory under ``root``."""

    def __init__(self, root: Path) -> None:
        bindir = _bindir()
        assert bindir is not None
        self.bindir, self.root = bindir, root
        self.data, self.sockets, self.log = root / "data", root / "sockets", root / "server.log"
        self.port = _free_port()
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/test"

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        argv = list(args)
        if os.geteuid() == 0:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=self.root)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(args)} exited {done.returncode}: {done.stderr.strip()}\n{log}")
        return done

    def init(self) -> None:
        self.sockets.mkdir()
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            for path in (self.root, self.sockets):
                os.chown(path, user.pw_uid, user.pw_gid)
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")

    def _ctl(self, action: str, *extra: str) -> None:
        options = f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            str(self.bindir / "pg_ctl"), action, "-D", str(self.data), "-l", str(self.log), "-w", "-o", options, *extra
        )

    def start(self) -> None:
        self._ctl("start")

    def restart(self) -> None:
        """Stop (fast: open connections are dropped) and start again on the same port."""
        self._ctl("restart", "-m", "fast")

    def stop(self) -> None:
        self._run(str(self.bindir / "pg_ctl"), "stop", "-D", str(self.data), "-m", "immediate", "-w")

    def create_database(self, name: str = "test") -> None:
        self._run(str(self.bindir / "createdb"), "-h", str(self.sockets), "-p", str(self.port), "-U", "postgres", name)


@contextlib.contextmanager
def private_cluster() -> Iterator[PrivateCluster]:
    """A running private cluster with a database ``test``; stopped and removed afterwards."""
    require_private_cluster()
    root = Path(tempfile.mkdtemp(prefix="graphckpt-pg-"))
    cluster = PrivateCluster(root)
    started = False
    try:
        cluster.init()
        cluster.start()
        started = True
        cluster.create_database()
        yield cluster
    finally:
        if started:
            with contextlib.suppress(Exception):
                cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
