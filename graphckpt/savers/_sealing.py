"""The rows a saver stores, sealed and opened: which fields are encrypted, and what each is bound to.

Every saver holds one :class:`Sealer` and passes what it writes through ``seal_*`` and what it reads through
``open_*``, at its public methods only: the layer between the engine's bytes and the database. With a
:class:`~graphckpt.encryption.Keyring` it encrypts

- a checkpoint's ``body`` (frontier, task payloads, interrupt payloads, small inline values), bound to
  ``(thread, checkpoint id)``;
- every blob's ``data`` (channel values), bound to ``(thread, channel, step, kind)`` of the blob's own row: a fork
  that reads its parent's blobs reads rows whose ``thread_id`` is the parent's, so they open as they were sealed;
- every pending write's ``data`` (task results, journaled effect results, interrupt payloads, resume answers,
  errors), bound to ``(thread, checkpoint id, task id, kind, index)``;
- a durable wait's answer, bound to ``(thread, checkpoint id)`` of the wait, and sealed again to the resume run
  its firing queues;
- the values of a ``task.finished`` event's ``update`` (the streamed update), each bound to ``(thread, step, task
  id, key)``; the keys stay readable (they are the schema's field names);
- checkpoint metadata outside the allow-list :data:`PLAIN_METADATA` (and run tags outside the keyring's
  ``plain_tags`` plus ``graph``), moved into one sealed ``"$sealed"`` entry bound to ``(thread, checkpoint id)``.
  What stays plain can be filtered on; a ``list_checkpoints`` filter on a sealed key is refused with
  :class:`~graphckpt.errors.EncryptionError` (it could never match).

Without a keyring nothing is sealed, but a sealed value read is still refused with one clear error naming its key
id (never returned as bytes the engine would call corrupt). With ``require`` a plaintext body, blob or write is
refused on read, and writing needs a keyring.

What stays plaintext: ids, steps, statuses, timestamps, field and node names, the allowed metadata, error messages
(a thread's ``error``, a ``run.failed`` event: keep secrets out of exception messages) and the server's run rows
(their input and config).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from graphckpt.encryption import TEXT_PREFIX, Keyring, is_sealed, sealed_key_id
from graphckpt.errors import EncryptionError
from graphckpt.savers._checks import brief
from graphckpt.savers._rows import Blob, FinishedTask, StoredCheckpoint, StoredEvent, StoredWrite, ThreadRecord
from graphckpt.savers.events import encode_payload
from graphckpt.savers.queue import RunRecord

__all__ = ["PLAIN_METADATA", "SEALED_KEY", "Sealer", "context", "is_token"]

PLAIN_METADATA: Final = frozenset(
    {"source", "step", "writes", "durations_ms", "usage", "replayed_ms", "forked_from", "subgraph", "trace"}
)
"""Metadata keys that stay plaintext (and filterable) when a keyring seals: ids, step, source, node and field names,
timings, token counts. ``tags`` stay plain only for the tags the keyring allows (``graph`` always: recovery reads
it in SQL)."""
SEALED_KEY: Final = "$sealed"
_ALWAYS_PLAIN_TAGS: Final = frozenset({"graph"})


def context(*parts: str | int) -> bytes:
    """The associated data of a row: its identity, unambiguous (each part typed and length-prefixed)."""
    out = bytearray()
    for part in parts:
        data = part.encode() if isinstance(part, str) else b"%d" % part
        out += (b"s" if isinstance(part, str) else b"i") + len(data).to_bytes(4, "big") + data
    return bytes(out)


class Sealer:
    """Seals what a saver writes and opens what it reads (see the module docstring)."""

    def __init__(self, keyring: Keyring | None, *, require: bool | None = None) -> None:
        self.keyring = keyring
        self.require = bool(require if require is not None else keyring is not None and keyring.require)
        if self.require and keyring is None:
            raise EncryptionError("require_encryption needs a keyring (encryption=Keyring(...) or the env keys)")

    @classmethod
    def configured(cls, encryption: Keyring | None, require_encryption: bool | None) -> Sealer:
        """The sealer of a saver: ``encryption`` or, when ``None``, :meth:`Keyring.from_env`."""
        return cls(encryption if encryption is not None else Keyring.from_env(), require=require_encryption)

    # -- writing -----------------------------------------------------------------------------------------------------

    def seal_checkpoint(self, cp: StoredCheckpoint) -> StoredCheckpoint:
        ring = self.keyring
        if ring is None:
            return cp
        tid, cid = cp.thread_id, cp.checkpoint_id
        return StoredCheckpoint(  # (not dataclasses.replace: this runs at every commit)
            tid,
            cid,
            cp.parent_thread_id,
            cp.parent_checkpoint_id,
            cp.step,
            cp.created_at,
            cp.status,
            self.seal_metadata(ring, cp.metadata, tid, cid),
            ring.seal(cp.body, context("body", tid, cid)),
            [
                Blob(b.thread_id, b.channel, b.step, b.kind, ring.seal(b.data, context("blob", *_blob_key(b))))
                for b in cp.blobs
            ],
            [self._seal_task(ring, t, tid, cp.step) for t in cp.tasks],
        )

    def seal_writes(self, thread_id: str, checkpoint_id: str, writes: Sequence[StoredWrite]) -> Sequence[StoredWrite]:
        ring = self.keyring
        if ring is None:
            return writes
        return [
            dataclasses.replace(
                w, data=ring.seal(w.data, context("write", thread_id, checkpoint_id, w.task_id, w.kind, w.index))
            )
            for w in writes
        ]

    def seal_run(self, run: RunRecord) -> RunRecord:
        """A queued run with its payload (the input, or the answer) sealed, bound to ``(run, thread, kind)``."""
        ring = self.keyring
        if ring is None or run.payload is None:
            return run
        return dataclasses.replace(
            run, payload=ring.seal(run.payload, context("run", run.run_id, run.thread_id, run.kind))
        )

    def open_run(self, run: RunRecord | None) -> RunRecord | None:
        if run is None or run.payload is None:
            return run
        ctx = context("run", run.run_id, run.thread_id, run.kind)
        payload = self.open_value(run.payload, ctx, f"the payload of run {brief(run.run_id)!r}")
        return run if payload is run.payload else dataclasses.replace(run, payload=payload)

    def open_runs(self, runs: list[RunRecord]) -> list[RunRecord]:
        return [r for run in runs if (r := self.open_run(run)) is not None]

    def seal_wait(self, thread_id: str, checkpoint_id: str, answer: bytes | None) -> bytes | None:
        """A durable wait's answer sealed, bound to ``(thread, checkpoint id)`` of the wait."""
        ring = self.keyring
        if ring is None or answer is None:
            return answer
        return ring.seal(answer, context("wait", thread_id, checkpoint_id))

    def open_wait(self, thread_id: str, checkpoint_id: str, answer: bytes | None) -> bytes | None:
        if answer is None:
            return None
        what = f"the answer of the wait of thread {brief(thread_id)!r}"
        return self.open_value(answer, context("wait", thread_id, checkpoint_id), what)

    def wake_payload(self, run_id: str, thread_id: str, checkpoint_id: str, answer: bytes | None) -> bytes | None:
        """The payload of the resume run a wait's firing queues: its answer opened from the wait's binding and sealed
        again to the run's (``None`` and, without a keyring, the stored bytes stay as they are)."""
        if self.keyring is None or answer is None:
            return answer
        opened = self.open_wait(thread_id, checkpoint_id, answer)
        return self.seal_run(RunRecord(run_id, thread_id, "resume", "queued", payload=opened)).payload

    def check_filter(self, filter: Mapping[str, Any] | None) -> None:
        """Refuse a metadata filter on a key this sealer hides (it could never match)."""
        ring = self.keyring
        if ring is None or not filter:
            return
        for key, value in filter.items():
            if key == "tags" and isinstance(value, Mapping):
                hidden = [k for k in value if k not in ring.plain_tags and k not in _ALWAYS_PLAIN_TAGS]
                if hidden:
                    raise EncryptionError(
                        f"cannot filter on tag {hidden[0]!r}: it is encrypted (allow it with plain_tags)"
                    )
            elif key not in PLAIN_METADATA and key != "tags":
                raise EncryptionError(f"cannot filter on metadata key {brief(key)!r}: it is encrypted")

    def split_filter(self, filter: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        """The part of a thread filter SQL can match on stored rows: ``filter`` itself, or, when it names keys this
        sealer hides (or ``tags``, whose hidden part is sealed), only its plain keys; the caller matches the whole
        filter on the opened records (see :func:`graphckpt.savers._thread_pages.sealed_page`)."""
        if self.keyring is None or not filter:
            return filter
        return {k: v for k, v in filter.items() if k in PLAIN_METADATA}

    def seal_metadata(self, ring: Keyring, meta: Mapping[str, Any], tid: str, cid: str) -> Mapping[str, Any]:
        plain: dict[str, Any] = {}
        hidden: dict[str, Any] = {}
        for key, value in meta.items():
            if key in PLAIN_METADATA:
                plain[key] = value
            elif key == "tags" and isinstance(value, Mapping):
                shown = ring.plain_tags | _ALWAYS_PLAIN_TAGS
                kept = {k: v for k, v in value.items() if k in shown}
                if kept:
                    plain["tags"] = kept
                if len(kept) < len(value):
                    hidden["tags"] = {k: v for k, v in value.items() if k not in shown}
            else:
                hidden[key] = value
        if hidden:
            plain[SEALED_KEY] = ring.seal_text(encode_payload(hidden), context("meta", tid, cid))
        return plain

    @staticmethod
    def _seal_task(ring: Keyring, t: FinishedTask, tid: str, step: int) -> FinishedTask:
        if t.update_in_checkpoint or not t.update:
            return t
        sealed = {
            k: ring.seal_text(encode_payload({"v": v}), context("event", tid, step, t.task_id, k))
            for k, v in t.update.items()
        }
        return dataclasses.replace(t, update=sealed)

    # -- reading -----------------------------------------------------------------------------------------------------

    def open_checkpoint(self, cp: StoredCheckpoint | None) -> StoredCheckpoint | None:
        if cp is None:
            return None
        tid, cid = cp.thread_id, cp.checkpoint_id
        body = self.open_value(cp.body, context("body", tid, cid), f"checkpoint {brief(cid)} of thread {brief(tid)!r}")
        metadata = self.open_metadata(cp.metadata, tid, cid)
        if body is cp.body and metadata is cp.metadata:
            return cp
        return dataclasses.replace(cp, body=body, metadata=metadata)

    def open_checkpoints(self, cps: list[StoredCheckpoint]) -> list[StoredCheckpoint]:
        if self.keyring is None and not self.require:
            if any(is_sealed(cp.body) for cp in cps):
                return [c for cp in cps if (c := self.open_checkpoint(cp)) is not None]
            return cps
        return [c for cp in cps if (c := self.open_checkpoint(cp)) is not None]

    def open_thread(self, record: ThreadRecord | None) -> ThreadRecord | None:
        if record is None or self.keyring is None:
            return record
        metadata = self.open_metadata(record.metadata, record.thread_id, record.head_checkpoint_id)
        return record if metadata is record.metadata else dataclasses.replace(record, metadata=metadata)

    def open_threads(self, records: list[ThreadRecord]) -> list[ThreadRecord]:
        if self.keyring is None:
            return records
        return [r for record in records if (r := self.open_thread(record)) is not None]

    def open_blobs(self, blobs: list[Blob]) -> list[Blob]:
        out = blobs
        for i, b in enumerate(blobs):
            data = self.open_value(
                b.data,
                context("blob", *_blob_key(b)),
                f"the {b.kind} of channel {brief(b.channel)!r} at step {b.step} of thread {brief(b.thread_id)!r}",
            )
            if data is not b.data:
                if out is blobs:
                    out = list(blobs)
                out[i] = dataclasses.replace(b, data=data)
        return out

    def open_writes(self, thread_id: str, checkpoint_id: str, writes: list[StoredWrite]) -> list[StoredWrite]:
        out = writes
        for i, w in enumerate(writes):
            data = self.open_value(
                w.data,
                context("write", thread_id, checkpoint_id, w.task_id, w.kind, w.index),
                f"the {w.kind} write {w.index} of task {brief(w.task_id)!r} in thread {brief(thread_id)!r}",
            )
            if data is not w.data:
                if out is writes:
                    out = list(writes)
                out[i] = dataclasses.replace(w, data=data)
        return out

    def open_events(self, events: list[StoredEvent]) -> list[StoredEvent]:
        out = events
        for i, e in enumerate(events):
            if e.kind != "task.finished":
                continue
            update = e.payload.get("update")
            if not isinstance(update, Mapping) or not any(is_token(v) for v in update.values()):
                continue
            task_id = e.payload.get("task_id")
            opened = {
                k: self.open_token(v, context("event", e.thread_id, e.step, str(task_id), k), f"event {e.id}")
                if is_token(v)
                else v
                for k, v in update.items()
            }
            if out is events:
                out = list(events)
            out[i] = dataclasses.replace(e, payload={**e.payload, "update": opened})
        return out

    def open_value(self, data: bytes, ctx: bytes, what: str) -> bytes:
        """The plaintext of stored bytes bound to ``ctx`` (plaintext stays as it is unless ``require``)."""
        if not is_sealed(data):
            if self.require:
                raise EncryptionError(f"{what} is stored in plaintext, and encryption is required")
            return data
        ring = self.keyring
        if ring is None:
            key_id = sealed_key_id(data)
            raise EncryptionError(
                f"{what} is encrypted with key {key_id!r}, and no key is configured (set GRAPHCKPT_ENCRYPTION_KEYS "
                "or pass encryption=Keyring(...))",
                key_id=key_id,
            )
        return ring.open(data, ctx, what)

    def open_token(self, token: str, ctx: bytes, what: str) -> Any:
        ring = self.keyring
        if ring is None:
            from graphckpt.encryption import text_key_id

            key_id = text_key_id(token)
            raise EncryptionError(
                f"{what} is encrypted with key {key_id!r}, and no key is configured (set GRAPHCKPT_ENCRYPTION_KEYS)",
                key_id=key_id,
            )
        return json.loads(ring.open_text(token, ctx, what))["v"]

    def open_metadata(self, meta: Mapping[str, Any], tid: str, cid: str) -> Mapping[str, Any]:
        if self.keyring is None:
            return meta
        token = meta.get(SEALED_KEY)
        if not isinstance(token, str):
            return meta
        hidden = json.loads(self.keyring.open_text(token, context("meta", tid, cid), f"metadata of checkpoint {cid}"))
        out = {k: v for k, v in meta.items() if k != SEALED_KEY}
        for key, value in hidden.items():
            if key == "tags" and isinstance(out.get("tags"), Mapping):
                out["tags"] = {**out["tags"], **value}
            else:
                out[key] = value
        return out


def _blob_key(b: Blob) -> tuple[str, str, int, str]:
    return b.thread_id, b.channel, b.step, b.kind


def is_token(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(TEXT_PREFIX)
