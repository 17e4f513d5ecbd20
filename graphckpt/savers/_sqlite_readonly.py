"""Opening a SQLite database this process may not write: a read-only file, or a file in a read-only directory
(where SQLite cannot create the ``-wal`` and ``-shm`` files WAL mode needs).

Such a database still serves every read: :func:`read_only_reason` says why a file must be opened read-only (or
``None``), and :func:`open_read_only` opens it with ``mode=ro``, or, when even that cannot open the WAL's shared
memory, as ``immutable`` (SQLite then reads the main file as it is, without the WAL: what a writer left in a WAL
that was never checkpointed is not seen). Writes are refused by the saver with one clear :class:`SaverError`
(:func:`read_only_error`), before any transaction begins.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from urllib.parse import quote

from graphckpt.errors import SaverError
from graphckpt.savers._sqlite_schema import MIGRATIONS

__all__ = ["open_read_only", "read_only_error", "read_only_reason"]


def read_only_reason(path: str) -> str | None:
    """Why this process cannot write the existing database ``path`` (``"the file is read-only"``, ``"its directory
    is read-only"``), or ``None`` when it can (or the file does not exist yet, or is ``:memory:`` or a URI)."""
    if path == ":memory:" or path.startswith("file:") or not os.path.isfile(path):
        return None
    if not os.access(path, os.W_OK):
        return "the file is read-only for this user"
    directory = Path(path).resolve().parent
    if not os.access(directory, os.W_OK):
        sidecars = [f"{os.path.realpath(path)}-{end}" for end in ("wal", "shm")]
        if not all(os.path.exists(p) and os.access(p, os.W_OK) for p in sidecars):
            return "its directory is read-only for this user (SQLite cannot create the -wal and -shm files there)"
    return None


def open_read_only(path: str, timeout: float) -> tuple[sqlite3.Connection, str]:
    """A connection to ``path`` that never writes, and the URI every further connection uses: ``mode=ro``, else
    ``mode=ro&immutable=1`` when ``mode=ro`` cannot open (no ``-shm`` file, which a read-only directory cannot
    get). Refuses a database whose schema this graphckpt would have to migrate first."""
    base = "file:" + quote(os.path.realpath(path)) + "?mode=ro"
    last: sqlite3.Error | None = None
    for uri in (base, base + "&immutable=1"):
        conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False)
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.Error as exc:
            conn.close()
            last = exc
            continue
        if 0 < version < len(MIGRATIONS):
            conn.close()
            raise SaverError(
                f"SQLite database {path!r} is read-only and has schema version {version}; this graphckpt reads "
                f"version {len(MIGRATIONS)} and cannot migrate a file it may not write (open it once writable)"
            )
        return conn, uri
    raise SaverError(f"cannot open SQLite database {path!r} read-only: {last}")


def read_only_error(path: str, reason: str) -> SaverError:
    """The error of a write to a database opened read-only."""
    return SaverError(f"SQLite database {path!r} is open read-only ({reason}): nothing can be written to it")
