"""What a user names to run or serve graphs: a graph target ``MODULE:ATTR`` and a database (a SQLite path or a
``postgresql://`` URL, with ``?schema=NAME``), each turned into the object it names, with one clear error per mistake.

The CLI (``graphckpt run``, ``serve``, ...) and the server (``create_app(db=...)``, ``python -m
graphckpt.server.ui``) both load them from here.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from graphckpt.app import App
from graphckpt.errors import SaverError, StoreNotSetUpError
from graphckpt.graph import StateGraph
from graphckpt.savers.base import Saver
from graphckpt.savers.dsn import redact_url

__all__ = ["DEFAULT_DB", "Database", "UsageError", "UserError", "compile_with", "load_target"]

DEFAULT_DB = "graphckpt.db"


class UserError(Exception):
    """A mistake the user can fix, reported as one line and exit status 1 (runtime) or 2 (usage)."""

    exit_code = 1


class UsageError(UserError):
    """The command line itself is wrong: bad JSON, bad ``MODULE:ATTR``, bad checkpoint spec."""

    exit_code = 2


# -- the user's graph --------------------------------------------------------------------------------------------------


def load_target(spec: str) -> App | StateGraph:
    """Import ``MODULE:ATTR`` (``ATTR`` may be dotted): an :class:`App`, a :class:`StateGraph`, or a zero-argument
    factory returning one. The current directory is importable, as with ``python -m``."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"{spec!r} is not MODULE:ATTR (e.g. myagent.graph:app)")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # the user's module may raise anything at import time
        raise UsageError(f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
    module = obj
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"{spec!r}: module {module_name!r} has no attribute {attr!r}{_offer(module)}") from None
    if not isinstance(obj, App | StateGraph) and callable(obj):
        try:
            obj = obj()
        except Exception as exc:
            raise UsageError(f"{spec!r}: calling the factory failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(obj, App | StateGraph):
        raise UsageError(
            f"{spec!r} is a {type(obj).__name__}, not a StateGraph, an App, or a zero-argument factory of one"
        )
    return obj


def _offer(module: Any) -> str:
    """What ``module`` does have: `` (it has StateGraph graph, App app: use mymodule:graph)`` or why not."""
    found = [
        (n, type(v).__name__)
        for n, v in vars(module).items()
        if isinstance(v, App | StateGraph) and not n.startswith("_")
    ]
    if not found:
        return " (it has no StateGraph or App; a zero-argument factory returning one works too)"
    listed = ", ".join(f"{kind} {name}" for name, kind in found[:8]) + (", ..." if len(found) > 8 else "")
    return f" (it has {listed}: use {module.__name__}:{found[0][0]})"


def compile_with(target: App | StateGraph, saver: Saver) -> App:
    """The app bound to the CLI's saver: a graph is compiled with it; an app is recompiled with the same options."""
    if isinstance(target, StateGraph):
        return target.compile(saver=saver)
    return target.with_saver(saver)


# -- the database ------------------------------------------------------------------------------------------------------


class Database:
    """Where checkpoints live: a SQLite path (default ``graphckpt.db``) or a ``postgresql://`` URL.

    A PostgreSQL URL may carry ``?schema=NAME``: the tables live in that schema (created by writing commands) instead
    of the connection's ``search_path``. The parameter is removed from the URL before connecting.
    """

    def __init__(self, url: str | None) -> None:
        self.url = url or os.environ.get("GRAPHCKPT_DB") or DEFAULT_DB
        self.dsn, self.schema = (self.url, None)
        if self.is_postgres:
            self.dsn, self.schema = _split_schema(self.url)

    @property
    def is_postgres(self) -> bool:
        return self.url.startswith(("postgresql://", "postgres://"))

    @property
    def path(self) -> str:
        return self.url.removeprefix("sqlite:///") if self.url.startswith("sqlite:///") else self.url

    @property
    def display(self) -> str:
        """The database for messages: the SQLite path, or ``user@host:port/dbname`` (never the password)."""
        if not self.is_postgres:
            return self.path
        where = redact_url(self.dsn)
        return f"{where} (schema {self.schema})" if self.schema else where

    def saver(self, *, create: bool) -> Saver:
        """A new, unopened saver. ``create=False``: a missing SQLite file is an error (reading never creates one);
        for PostgreSQL, :meth:`require_tables` is the matching check (it needs a connection, so it is async)."""
        if self.is_postgres:
            try:
                from graphckpt.savers.postgres import PostgresSaver
            except ImportError:
                raise UserError("a postgresql:// database needs: pip install 'graphckpt[postgres]'") from None
            return PostgresSaver(self.dsn, schema=self.schema)
        from graphckpt.savers.sqlite import SqliteSaver

        path = self.path
        if path != ":memory:":
            if Path(path).is_dir():
                raise UserError(f"database {path!r} is a directory, not a SQLite file")
            if not create and not Path(path).exists():
                raise UserError(
                    f"no database at {path!r} (choose one with --db or GRAPHCKPT_DB; `graphckpt run` creates it)"
                )
        return SqliteSaver(path)

    async def require_tables(self) -> None:
        """Raise :class:`UserError` unless graphckpt's tables exist, creating nothing: commands that do not create
        anything never run the saver's set-up on an empty file, another program's database or an empty schema (see
        ``Saver.setup(create=False)``). A missing SQLite file is :meth:`saver`'s error."""
        saver = self.saver(create=False)
        try:
            await saver.setup(create=False)
        except StoreNotSetUpError:
            if self.is_postgres:
                where = f"schema {self.schema!r} of {redact_url(self.dsn)}" if self.schema else self.display
                hint = "or pick another database with --db or another schema with ?schema=NAME"
            else:
                where, hint = repr(self.path), "or pick another database with --db"
            raise UserError(
                f"no graphckpt tables in {where} (nothing was created; `graphckpt run` or `graphckpt import` "
                f"creates them, {hint})"
            ) from None
        except SaverError as exc:
            raise UserError(f"database {self.display}: cannot read: {exc}") from None
        finally:
            await saver.aclose()


def _split_schema(url: str) -> tuple[str, str | None]:
    """``(url without ?schema=..., schema)``; a usage error for an unparsable URL or an empty or repeated
    ``schema``."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (parsed on access: raises ValueError for a port that is not a number)
    except ValueError as exc:
        raise UsageError(f"--db is not a valid postgresql:// URL ({exc})") from None
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in query if k == "schema"]
    if not schemas:
        return url, None
    if len(schemas) > 1 or not schemas[0]:
        raise UsageError(f"--db {redact_url(url)}: give one non-empty ?schema=NAME")
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schemas[0]
