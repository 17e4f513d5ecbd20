"""The async core of the LangGraph checkpointer: LangGraph's operations on graphckpt's ``Saver``, one family per
LangGraph thread (the layout is :mod:`graphckpt.compat._lgvalues`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from graphckpt import ids
from graphckpt.compat._lgread import COMPAT_RUN_ID
from graphckpt.compat._lgvalues import (
    INLINE_MAX,
    Body,
    ValueCache,
    channel_blob,
    decode_body,
    encode_body,
    family_of,
    fold_chains,
    member_name,
    parse_member,
    value_ranges,
)
from graphckpt.compat._lgwrites import Packed, encode_writes, read_writes, ref_rows
from graphckpt.errors import SerializationError, ThreadConflictError, ThreadNotFoundError
from graphckpt.savers.base import Blob, BlobRange, Saver, StoredCheckpoint, StoredWrite, ThreadRecord
from graphckpt.serde import Serializer

__all__ = ["RUN_ID", "Loaded", "Store"]

RUN_ID = COMPAT_RUN_ID
"""The ``run_id`` every member thread is created with: the compat saver's writes pass the fence while no graphckpt
run claimed the thread."""


@dataclass(slots=True)
class Loaded:
    """One checkpoint read back: LangGraph's parts."""

    thread_id: str
    ns: str
    checkpoint: dict[str, Any]
    metadata: dict[str, Any]
    parent_id: str | None
    writes: list[tuple[str, str, Any]]


@dataclass(slots=True)
class _Found:
    member: str
    cp: StoredCheckpoint
    body: Body


class Store:
    """LangGraph's checkpointer operations over one graphckpt saver (used from a single event loop)."""

    def __init__(self, saver: Saver, ser: Serializer) -> None:
        self.saver = saver
        self.ser = ser
        self.plain = Serializer()
        self.cache = ValueCache()
        self._where: dict[tuple[str, str], str] = {}  # (family, checkpoint id) -> member holding it
        self._early: dict[tuple[str, str, str], list[StoredWrite]] = {}  # writes before their checkpoint
        self._appended: dict[tuple[str, str], list[Packed]] = {}  # (family, checkpoint id) -> its appending writes
        self._new_items: list[tuple[Blob, list[bytes]]] = []  # the list blobs of the checkpoint being put
        self._heads: dict[tuple[str, str], _Found] = {}  # (family, ns) -> the checkpoint this saver put last there
        self._lock = asyncio.Lock()

    # -- finding -----------------------------------------------------------------------------------------------------

    async def _members(self, family: str, ns: str | None) -> list[ThreadRecord]:
        members = await self.saver.list_family(family)
        return [
            m
            for m in members
            if (found := parse_member(family, m.thread_id)) is not None and (ns is None or found == ns)
        ]

    async def _find(self, family: str, ns: str, checkpoint_id: str, members: Sequence[ThreadRecord]) -> _Found | None:
        known = self._where.get((family, checkpoint_id))
        order = [m.thread_id for m in members]
        if known in order:
            order.remove(known)
            order.insert(0, known)
        for member in order:
            cp = await self.saver.get_checkpoint(member, checkpoint_id)
            if cp is not None:
                body = decode_body(self.plain, cp)
                if body is not None:
                    self._where[(family, checkpoint_id)] = member
                    return _Found(member, cp, body)
        return None

    # -- put ---------------------------------------------------------------------------------------------------------

    async def put(
        self,
        thread_id: str,
        ns: str,
        parent_id: str | None,
        checkpoint: Mapping[str, Any],
        metadata: Mapping[str, Any],
        new_versions: Mapping[str, Any],
        *,
        attach: bool = True,
    ) -> None:
        """Store one LangGraph checkpoint. ``attach=False``: as a new root whatever its parent (a rebuild)."""
        async with self._lock:
            await self._put(thread_id, ns, parent_id, checkpoint, metadata, new_versions, attach=attach)

    async def _put(
        self,
        thread_id: str,
        ns: str,
        parent_id: str | None,
        checkpoint: Mapping[str, Any],
        metadata: Mapping[str, Any],
        new_versions: Mapping[str, Any],
        *,
        attach: bool,
    ) -> None:
        family, cid = family_of(thread_id), str(checkpoint["id"])
        meta = _json_metadata(metadata)
        head = self._heads.get((family, ns))
        if attach and parent_id and head is not None and head.cp.checkpoint_id == parent_id:
            # the usual case, a checkpoint after the one this saver put last: no read; the commit's compare-and-set
            # on the head verifies that nobody moved the member since
            try:
                await self._commit(family, ns, cid, head, parent_id, checkpoint, meta, new_versions, fast=True)
                return
            except (ThreadConflictError, ThreadNotFoundError):  # moved or deleted by another writer: read afresh
                self._forget_heads(family)
        await self._commit(family, ns, cid, None, parent_id, checkpoint, meta, new_versions, fast=False, attach=attach)

    async def _commit(
        self,
        family: str,
        ns: str,
        cid: str,
        parent: _Found | None,
        parent_id: str | None,
        checkpoint: Mapping[str, Any],
        meta: dict[str, Any],
        new_versions: Mapping[str, Any],
        *,
        fast: bool,
        attach: bool = True,
    ) -> None:
        """Commit one checkpoint. ``fast``: ``parent`` is the head of its member as this saver last wrote it (no
        read; a conflict is raised to the caller); else the parent and the family's members are read first."""
        if fast:
            assert parent is not None
            names: set[str] = set()
            heads = {parent.member: parent.cp.checkpoint_id}
        else:
            members = await self._members(family, ns)
            parent = await self._find(family, ns, parent_id, members) if parent_id and attach else None
            names = {m.thread_id for m in await self.saver.list_family(family)}
            heads = {m.thread_id: m.head_checkpoint_id for m in members}
        for attempt in range(1 if fast else 2):
            if parent is not None and attempt == 0 and heads.get(parent.member) == parent.cp.checkpoint_id:
                member, expected, step = parent.member, parent.cp.checkpoint_id, parent.cp.step + 1
                lineage = parent.body.lineage
            else:
                member = member_name(family, ns)
                if member in names:
                    member = member_name(family, ns, cid)
                    if member in names:
                        member = member_name(family, ns, f"{cid}.{ids.new_id()}")
                expected, step = None, parent.cp.step + 1 if parent is not None else 0
                lineage = [(member, step), *(parent.body.lineage if parent is not None else [])]
            self._new_items = []
            stored = self._checkpoint(member, step, cid, parent, parent_id, checkpoint, meta, new_versions, lineage)
            kept: dict[str, list[StoredWrite]] = {}
            early = self._early.get((family, ns, cid))
            if early:
                kept[cid] = early
            appended = self._appended.get((family, parent_id)) if parent is not None and parent_id else None
            refs = []
            if appended and parent is not None:  # the parent's writes whose items this checkpoint's blobs hold
                refs = ref_rows(self.ser, appended, self._new_items)
                if refs and parent.member == member:
                    kept[parent.cp.checkpoint_id] = refs
            try:
                await self.saver.commit(stored, expected_head=expected, run_id=RUN_ID, kept_writes=kept or None)
            except ThreadConflictError:
                if fast or attempt or expected is None:
                    raise
                continue  # the member moved on since it was read: this checkpoint starts a branch instead
            break
        self._where[(family, cid)] = member
        self._early.pop((family, ns, cid), None)
        if parent is not None and parent_id:
            self._appended.pop((family, parent_id), None)
            if refs and parent.member != member:  # a branch's first checkpoint: the parent lives in another member
                await self.saver.put_kept_writes(parent.member, parent.cp.checkpoint_id, refs, run_id=RUN_ID)
        body = decode_body(self.plain, stored)
        assert body is not None
        self._heads[(family, ns)] = _Found(member, stored, body)
        while len(self._heads) > 1024:
            del self._heads[next(iter(self._heads))]

    def _forget_heads(self, family: str) -> None:
        for key in [k for k in self._heads if k[0] == family]:
            del self._heads[key]

    def _checkpoint(
        self,
        member: str,
        step: int,
        cid: str,
        parent: _Found | None,
        parent_id: str | None,
        checkpoint: Mapping[str, Any],
        meta: dict[str, Any],
        new_versions: Mapping[str, Any],
        lineage: list[tuple[str, int]],
    ) -> StoredCheckpoint:
        versions = dict(checkpoint.get("channel_versions") or {})
        seen = dict(parent.body.checkpoint.get("channel_versions") or {}) if parent is not None else {}
        pointers: dict[str, tuple[str, int]] = {}
        inline: dict[str, bytes] = {}
        blobs: list[Blob] = []
        for channel, value in (checkpoint.get("channel_values") or {}).items():
            version = versions.get(channel)
            old = parent.body.pointers.get(channel) if parent is not None else None
            if parent is not None and channel not in new_versions and channel in seen and seen[channel] == version:
                if old is not None:  # LangGraph re-sends an unchanged value: the parent's blob holds it
                    pointers[channel] = old
                    continue
                if channel in parent.body.inline:
                    inline[channel] = parent.body.inline[channel]
                    continue
            try:
                if type(value) is not list:
                    whole = self.ser.dumps(value)
                    if len(whole) <= INLINE_MAX:
                        inline[channel] = whole
                        continue
                blob, items = channel_blob(self.ser, self.cache, member, step, channel, value, old)
            except SerializationError as exc:
                raise SerializationError(f"channel {channel!r}: {exc}") from None
            blobs.append(blob)
            if items:
                self._new_items.append((blob, items))
            pointers[channel] = (member, step)
        rest = {k: v for k, v in checkpoint.items() if k not in ("id", "channel_values")}
        body = Body(rest, parent_id, pointers, lineage, inline)
        parent_column = parent.cp.checkpoint_id if parent is not None else None
        return StoredCheckpoint(
            thread_id=member,
            checkpoint_id=cid,
            parent_thread_id=parent.member if parent is not None else None,
            parent_checkpoint_id=parent_column,
            step=step,
            created_at=ids.now(),
            status="running",
            metadata=meta,
            body=encode_body(self.plain, body, member, parent_column),
            blobs=blobs,
        )

    # -- writes ------------------------------------------------------------------------------------------------------

    async def put_writes(
        self, thread_id: str, ns: str, checkpoint_id: str, writes: Sequence[tuple[str, Any]], task_id: str, path: str
    ) -> None:
        rows, packed = encode_writes(self.ser, task_id, writes, path)
        # rewritten as references at the next put, unless that UPDATE would leave the whole row behind as a dead one
        appended = [packed] if packed is not None and not self.saver.keeps_dead_rows else []
        family = family_of(thread_id)
        async with self._lock:
            if appended:
                self._appended.setdefault((family, checkpoint_id), []).extend(appended)
                while len(self._appended) > 256:  # only the latest checkpoints' writes can be referred to
                    del self._appended[next(iter(self._appended))]
            member = self._where.get((family, checkpoint_id))
            if member is None:
                found = await self._find(family, ns, checkpoint_id, await self._members(family, ns))
                member = found.member if found is not None else None
            if member is None:  # its put has not arrived yet (LangGraph's durability="async"): kept until it does
                self._early.setdefault((family, ns, checkpoint_id), []).extend(rows)
                return
            await self.saver.put_kept_writes(member, checkpoint_id, rows, run_id=RUN_ID)

    # -- reads -------------------------------------------------------------------------------------------------------

    async def get(self, thread_id: str, ns: str, checkpoint_id: str | None) -> Loaded | None:
        family = family_of(thread_id)
        members = await self._members(family, ns)
        if checkpoint_id is None:
            if not members:
                return None
            newest = max(members, key=lambda m: m.head_checkpoint_id)
            checkpoint_id = newest.head_checkpoint_id
            members = [newest, *[m for m in members if m is not newest]]
        found = await self._find(family, ns, checkpoint_id, members)
        return await self._load(thread_id, ns, found) if found is not None else None

    async def list(
        self,
        thread_id: str | None,
        ns: str | None,
        checkpoint_id: str | None,
        *,
        filter: Mapping[str, Any] | None,
        before: str | None,
        limit: int | None,
    ) -> Sequence[Loaded]:
        if thread_id is not None:
            families = [(thread_id, family_of(thread_id))]
        else:
            families = sorted(
                {(_unq(t.thread_id), family_of(_unq(t.thread_id))) for t in await self.saver.list_threads()}
            )
        found: list[tuple[str, str, str, StoredCheckpoint]] = []
        for lg_thread, family in families:
            for record in await self._members(family, ns):
                member_ns = parse_member(family, record.thread_id)
                assert member_ns is not None
                cps = await self.saver.list_checkpoints(record.thread_id, filter=filter or None)
                found.extend((lg_thread, member_ns, record.thread_id, cp) for cp in cps)
        found = [f for f in found if (before is None or f[3].checkpoint_id < before)]
        found = [f for f in found if checkpoint_id is None or f[3].checkpoint_id == checkpoint_id]
        found.sort(key=lambda f: f[3].checkpoint_id, reverse=True)
        out = []
        for lg_thread, member_ns, member, cp in found:
            body = decode_body(self.plain, cp)
            if body is None:
                continue
            out.append(await self._load(lg_thread, member_ns, _Found(member, cp, body)))
            if limit is not None and len(out) >= limit:
                break
        return out

    async def _load(self, thread_id: str, ns: str, found: _Found) -> Loaded:
        body, step = found.body, found.cp.step
        heads_ranges = [BlobRange(m, ch, at, at) for ch, (m, at) in body.pointers.items()]
        heads = {b.channel: b for b in await self.saver.get_blobs(heads_ranges)} if heads_ranges else {}
        values, ranges = value_ranges(self.ser, body, step, heads)
        if ranges:
            values.update(fold_chains(self.ser, await self.saver.get_blobs(ranges)))
        checkpoint = dict(body.checkpoint)
        checkpoint["id"] = found.cp.checkpoint_id
        checkpoint["channel_values"] = values
        rows = await self.saver.get_kept_writes(found.member, found.cp.checkpoint_id)
        writes = await read_writes(self.ser, self.saver, rows)
        return Loaded(thread_id, ns, checkpoint, dict(found.cp.metadata), body.parent_id, writes)

    # -- deleting and copying ----------------------------------------------------------------------------------------

    async def delete(self, thread_id: str) -> None:
        family = family_of(thread_id)
        async with self._lock:
            await self._delete_members(await self.saver.list_family(family))
            for where in [k for k in self._where if k[0] == family]:
                del self._where[where]
            for early in [k for k in self._early if k[0] == family]:
                del self._early[early]
            self._forget_heads(family)

    async def _delete_members(self, members: Sequence[ThreadRecord]) -> None:
        for member in sorted(members, key=lambda m: m.created_at, reverse=True):  # forks before their parents
            self.cache.forget(member.thread_id)
            with contextlib.suppress(ThreadNotFoundError):
                await self.saver.delete_thread(member.thread_id)

    async def copy(self, source: str, target: str) -> None:
        loaded = await self.list(source, None, None, filter=None, before=None, limit=None)
        await self._replay(target, loaded, attach=True)

    async def rebuild(self, thread_id: str, keep: Sequence[Loaded]) -> None:
        """Replace the family of ``thread_id`` by the checkpoints ``keep`` (new members first, then the old ones
        go): what pruning and deleting runs come to, since a graphckpt thread keeps its whole lineage."""
        family = family_of(thread_id)
        old = await self.saver.list_family(family)
        kept_ids = {item.checkpoint["id"] for item in keep}
        for key in [k for k in self._where if k[0] == family]:
            del self._where[key]
        self._forget_heads(family)
        await self._replay(thread_id, keep, attach=False, kept_ids=kept_ids)
        await self._delete_members([m for m in old])

    async def _replay(
        self, target: str, loaded: Sequence[Loaded], *, attach: bool, kept_ids: set[str] | None = None
    ) -> None:
        for item in sorted(loaded, key=lambda i: i.checkpoint["id"]):  # parents before children
            cp = item.checkpoint
            parent = item.parent_id
            stay = attach or (kept_ids is not None and parent in kept_ids)
            versions = dict(cp.get("channel_versions") or {})
            async with self._lock:
                if stay and kept_ids is not None:  # the new member of a kept parent, not the old one
                    stay = (family_of(target), parent) in self._where
                await self._put(target, item.ns, parent, cp, item.metadata, versions, attach=stay)
                if item.writes:
                    member = self._where[(family_of(target), cp["id"])]
                    by_task: dict[str, list[tuple[str, Any]]] = {}
                    for task, ch, value in item.writes:
                        by_task.setdefault(task, []).append((ch, value))
                    rows = [r for task, ws in by_task.items() for r in encode_writes(self.ser, task, ws, "")[0]]
                    await self.saver.put_kept_writes(member, cp["id"], rows, run_id=RUN_ID)


def _in_ns(member_ns: str | None, ns: str | None) -> bool:
    return member_ns is not None and (ns is None or member_ns == ns)


def _unq(member: str) -> str:
    """The LangGraph thread id of any member thread name."""
    from graphckpt.savers.base import FAMILY_SEP

    family = member.split(FAMILY_SEP, 1)[0]
    return family.replace("%7E", FAMILY_SEP).replace("%25", "%")


def _json_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """LangGraph's metadata as graphckpt stores it (JSON); refuses, naming the key, what JSON cannot hold."""
    out = {}
    for key, value in metadata.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise SerializationError(f"metadata key {key!r} cannot be stored as JSON ({exc})") from None
        out[key] = value
    return out
