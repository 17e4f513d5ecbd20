"""``graphckpt rekey``: re-encrypt every row of the database under the current key (see
:mod:`graphckpt.savers._rekey`)."""

from __future__ import annotations

import argparse
import asyncio
import json

from graphckpt.cli.session import Session
from graphckpt.encryption import ENV_KEYS, Keyring
from graphckpt.savers._rekey import Rekeyed, rekey_postgres, rekey_sqlite
from graphckpt.targets import UserError

__all__ = ["cmd_rekey"]


async def cmd_rekey(args: argparse.Namespace, s: Session) -> int:
    """Seal every row under the first key of ``GRAPHCKPT_ENCRYPTION_KEYS``, ``--batch`` rows per transaction;
    prints how many rows changed per table. Safe to kill and run again."""
    keyring = Keyring.from_env()
    if keyring is None:
        raise UserError(f"rekey needs {ENV_KEYS} (ID:BASE64,...; rows are sealed again under the first key)")
    await s.db.require_tables()
    saver = s.saver()
    await saver.setup(create=False)  # migrations applied before rows are touched
    await saver.aclose()
    db = s.db
    done: Rekeyed
    if db.is_postgres:
        done = await asyncio.to_thread(rekey_postgres, db.dsn, db.schema, keyring, batch=args.batch)
    else:
        done = await asyncio.to_thread(rekey_sqlite, db.path, keyring, batch=args.batch)
    total = sum(done.rows.values())
    if args.json:
        print(json.dumps({"key_id": keyring.current_id, "rekeyed": done.rows, "checked": done.checked}))
    else:
        tables = ", ".join(f"{t} {n}" for t, n in done.rows.items() if n) or "none"
        print(f"every row is under key {keyring.current_id!r}: {total} rows sealed again ({tables})")
    return 0
