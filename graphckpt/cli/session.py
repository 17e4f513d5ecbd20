"""What every command needs: the database, the user's graph, JSON arguments, and one clear error per mistake.

Graph references. ``run MODULE:ATTR`` records ``MODULE:ATTR`` in the thread's checkpoint tags (``tags={"graph": ...}``);
``resume`` and ``fork`` find it there (``--graph`` overrides it) and say on stderr which graph they load. Reading
commands never import or call anything named by stored data (a recorded reference arrives verbatim in an imported
file or a database row): they read values with :class:`~graphckpt.reader.RawReader` (plain data), or with the graph
the user names with ``--graph``.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from graphckpt.app import App
from graphckpt.checkpoint import Snapshot
from graphckpt.diff import Diff
from graphckpt.errors import CheckpointNotFoundError, SaverError, StoreNotSetUpError
from graphckpt.graph import StateGraph
from graphckpt.reader import RawReader
from graphckpt.savers.base import Saver
from graphckpt.savers.dsn import redact_url, scrub_password

__all__ = [
    "DEFAULT_DB",
    "CliError",
    "Database",
    "Reader",
    "Session",
    "UsageError",
    "compile_with",
    "load_target",
    "parse_assignments",
    "parse_json",
    "redact_url",
    "scrub_password",
]

DEFAULT_DB = "graphckpt.db"


class CliError(Exception):
    """A mistake the user can fix, reported as one line and exit status 1 (runtime) or 2 (usage)."""

    exit_code = 1


class UsageError(CliError):
    """The command line itself is wrong: bad JSON, bad ``MODULE:ATTR``, bad checkpoint spec."""

    exit_code = 2


class Reader(Protocol):
    """What reading commands use: an :class:`App` or a :class:`RawReader`."""

    async def aget_state(self, thread_id: str, checkpoint_id: str | None = None) -> Snapshot: ...

    async def ahistory(
        self, thread_id: str, *, limit: int | None = None, before: str | None = None
    ) -> list[Snapshot]: ...

    async def adiff(self, a: Snapshot | tuple[str, str | None], b: Snapshot | tuple[str, str | None]) -> Diff: ...


# -- arguments ---------------------------------------------------------------------------------------------------------


def parse_json(text: str, what: str) -> Any:
    """``text`` as JSON; ``@path`` reads the file. Raises :class:`UsageError` naming ``what`` (e.g. ``--input``)."""
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"{what}: cannot read {text[1:]!r}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise UsageError(f"{what}: {text[1:]!r} is not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None


def parse_assignments(items: Sequence[str], what: str = "--set") -> dict[str, Any]:
    """``["key=JSON", ...]`` as a dict. A string value needs JSON quotes: ``verdict='"fix"'``."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{what} {item!r}: expected KEY=JSON, e.g. {what} verdict='\"fix\"'")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            raise UsageError(
                f"{what} {key}: {value!r} is not valid JSON (quote strings: {key}='\"{value}\"')"
            ) from None
    return out


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
    found = [(n, type(v).__name__) for n, v in vars(module).items() if isinstance(v, App | StateGraph) and
             not n.startswith("_")]  # fmt: skip
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
                raise CliError("a postgresql:// database needs: pip install 'graphckpt[postgres]'") from None
            return PostgresSaver(self.dsn, schema=self.schema)
        from graphckpt.savers.sqlite import SqliteSaver

        path = self.path
        if path != ":memory:":
            if Path(path).is_dir():
                raise CliError(f"database {path!r} is a directory, not a SQLite file")
            if not create and not Path(path).exists():
                raise CliError(
                    f"no database at {path!r} (choose one with --db or GRAPHCKPT_DB; `graphckpt run` creates it)"
                )
        return SqliteSaver(path)

    async def require_tables(self) -> None:
        """Raise :class:`CliError` unless graphckpt's tables exist, creating nothing: commands that do not create
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
            raise CliError(
                f"no graphckpt tables in {where} (nothing was created; `graphckpt run` or `graphckpt import` "
                f"creates them, {hint})"
            ) from None
        except SaverError as exc:
            raise CliError(f"database {self.display}: cannot read: {exc}") from None
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


class Session:
    """The savers, reader and apps one command opens; ``async with`` closes them all."""

    def __init__(self, db: Database, *, note: Any = None) -> None:
        self.db = db
        self._note = note
        self._savers: list[Saver] = []
        self._reader: RawReader | None = None
        self._apps: dict[str, App] = {}

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for saver in reversed(self._savers):
            await saver.aclose()

    def note(self, message: str) -> None:
        """A one-line remark on stderr (not an error)."""
        if self._note is not None:
            self._note(message)

    def saver(self, *, create: bool = False) -> Saver:
        """A saver of this database, closed with the session."""
        saver = self.db.saver(create=create)
        self._savers.append(saver)
        return saver

    def reader(self) -> RawReader:
        """The schema-free reader (metadata, frontiers, and values as plain data)."""
        if self._reader is None:
            self._reader = RawReader(self.saver())
        return self._reader

    def app(self, ref: str, *, create: bool = False) -> App:
        """The app of graph ``ref`` bound to this database."""
        if ref not in self._apps:
            self._apps[ref] = compile_with(load_target(ref), self.saver(create=create))
        return self._apps[ref]

    async def graph_ref(self, thread_id: str, override: str | None) -> str | None:
        """``override``, else the graph recorded in the thread's lineage (raises if the thread does not exist).
        Only for commands that run the graph (``resume``, ``fork``): reading commands never use a recorded one."""
        recorded = await self.reader().atag(thread_id, "graph")
        if override:
            return override
        return recorded if isinstance(recorded, str) else None

    async def app_for(self, thread_id: str, override: str | None, *, action: str) -> tuple[App, str]:
        """The app that can ``action`` (resume, fork) ``thread_id``: it needs the graph code. A graph taken from the
        thread's record (not ``override``) is named on stderr before it is imported: it is code the data chose."""
        ref = await self.graph_ref(thread_id, override)
        if ref is None:
            raise UsageError(
                f"cannot {action} thread {thread_id!r}: it records no graph (it was not started by `graphckpt run`); "
                "pass --graph MODULE:ATTR"
            )
        if not override:
            self.loading(f"loading graph {ref} recorded in thread {thread_id!r}")
        try:
            return self.app(ref), ref
        except CliError as exc:
            if override:
                raise
            raise UsageError(f"cannot {action} thread {thread_id!r} with its recorded graph: {exc}; "
                             "pass --graph MODULE:ATTR") from None  # fmt: skip

    def loading(self, message: str) -> None:
        """The one line saying which recorded graph a command imports (``graphckpt: ...`` on stderr)."""
        sys.stderr.write(f"graphckpt: {' '.join(message.split())}\n")
        sys.stderr.flush()

    async def values_reader(self, thread_ids: Sequence[str], override: str | None, *, raw: bool) -> tuple[Reader, bool]:
        """A reader for the values of these threads: the app of ``override`` (``--graph``, given by the user), else
        the raw reader. Returns ``(reader, is_raw)``. The graph recorded in the threads is never used here: reading
        must not run code that the data names."""
        if raw or not override:
            if not raw:
                self.note(
                    "values are read without the graph code (models as plain data); --graph MODULE:ATTR decodes "
                    "them with it"
                )
            return self.reader(), True
        return self.app(override), False

    async def checkpoint_at_step(self, thread_id: str, step: int) -> str:
        """The id of the checkpoint of step ``step`` in ``thread_id``'s lineage."""
        history = await self.reader().ahistory(thread_id)
        found = [s for s in history if s.step == step]
        if not found:
            steps = f"steps {history[-1].step}-{history[0].step}" if history else "no checkpoints"
            raise CheckpointNotFoundError(f"thread {thread_id!r} has no checkpoint of step {step} ({steps})")
        return found[0].checkpoint_id  # newest first: the thread's own, should a lineage repeat a step

    async def checkpoint_id(self, thread_id: str, spec: str) -> str:
        """The id of the checkpoint of ``thread_id``'s lineage that ``spec`` names: a full id or a unique prefix."""
        history = await self.reader().ahistory(thread_id)
        if any(s.checkpoint_id == spec for s in history):
            return spec
        found = [s for s in history if s.checkpoint_id.startswith(spec)]
        if len(found) == 1:
            return found[0].checkpoint_id
        if not found:
            raise CheckpointNotFoundError(f"thread {thread_id!r} has no checkpoint {spec!r} in its lineage")
        shown = ", ".join(f"{s.checkpoint_id} (step {s.step})" for s in found[:5]) + (", ..." if len(found) > 5 else "")
        raise UsageError(
            f"checkpoint prefix {spec!r} is ambiguous in thread {thread_id!r} ({len(found)} match: {shown})"
        )
