"""What every command needs: the database, the user's graph, JSON arguments, and one clear error per mistake.

Graph references. ``run MODULE:ATTR`` records ``MODULE:ATTR`` in the thread's checkpoint tags (``tags={"graph": ...}``);
``resume`` and ``fork`` find it there (``--graph`` overrides it) and say on stderr which graph they load. Reading
commands never import or call anything named by stored data (a recorded reference arrives verbatim in an imported
file or a database row): they read values with :class:`~graphckpt.reader.RawReader` (plain data), or with the graph
the user names with ``--graph``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from graphckpt.app import App
from graphckpt.checkpoint import Snapshot
from graphckpt.diff import Diff
from graphckpt.errors import CheckpointNotFoundError
from graphckpt.reader import RawReader
from graphckpt.savers.base import Saver
from graphckpt.savers.dsn import redact_url, scrub_password
from graphckpt.targets import DEFAULT_DB, Database, UsageError, UserError, compile_with, load_target

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

CliError = UserError
"""A mistake the user can fix, reported as one line and exit status 1 (runtime) or 2 (usage: :class:`UsageError`)."""


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


# -- a command's session -----------------------------------------------------------------------------------------------


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
        return self.app_of(thread_id, await self.graph_ref(thread_id, override), override, action=action)

    def app_of(self, thread_id: str, ref: str | None, override: str | None, *, action: str) -> tuple[App, str]:
        """:meth:`app_for` with the graph reference already known (``override``, else the one the thread
        records): no read of the thread."""
        ref = override or ref
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
            raise UsageError(
                f"cannot {action} thread {thread_id!r} with its recorded graph: {exc}; pass --graph MODULE:ATTR"
            ) from None

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
