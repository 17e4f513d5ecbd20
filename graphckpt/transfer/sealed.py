"""An export of an encrypted store stays encrypted: the lines' values sealed on the way out, opened on the way in.

A saver with a keyring (see :mod:`graphckpt.savers._sealing`) exports ciphertext unless asked to decrypt: each
checkpoint's ``body``, each of its blobs, its metadata outside the allow-list and each pending write's data are
sealed under the keyring's current key, bound to the ids the file names them by (the checkpoint's thread and id, the
blob's channel, step and kind, the write's task, kind and index), exactly as the saver binds its rows. So a value
cannot be moved to another line, and the file imports into any store holding the key: :func:`opened_lines` opens
each sealed field with the target's keyring before the file is checked (a target without the key refuses the file
with one :class:`~graphckpt.errors.EncryptionError` naming the key id), and the target seals again as it stores.
A field that is not sealed (an export written with ``decrypt``, or from a plaintext store) is read as it is.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from graphckpt.encryption import MAGIC, TEXT_PREFIX, Keyring, is_sealed
from graphckpt.savers._sealing import SEALED_KEY, Sealer, context

__all__ = ["opened_lines", "sealed_item", "sealer_of"]

_SEALED_B64 = '"' + base64.b64encode(MAGIC).decode("ascii")
"""How a field holding sealed bytes starts in a line (``MAGIC`` is 3 bytes: 4 base64 characters of its own)."""


def sealer_of(saver: object) -> Sealer:
    """The saver's sealer, or one without a keyring (which opens nothing and refuses sealed values by key id)."""
    found = getattr(saver, "sealer", None)
    return found if isinstance(found, Sealer) else Sealer(None, require=False)


def sealed_item(item: dict[str, Any], ring: Keyring) -> dict[str, Any]:
    """An export line (a checkpoint's or a head's writes) with its values sealed under ``ring``'s current key."""
    kind, tid = item.get("kind"), str(item.get("thread_id"))
    if kind == "checkpoint":
        cid, step = item["checkpoint_id"], item["step"]
        return {
            **item,
            "metadata": Sealer(ring).seal_metadata(ring, item["metadata"], tid, cid),
            "body": _b64(ring.seal(_raw(item["body"]), context("body", tid, cid))),
            "blobs": [
                [channel, bkind, _b64(ring.seal(_raw(data), context("blob", tid, channel, step, bkind)))]
                for channel, bkind, data in item["blobs"]
            ],
        }
    if kind in ("writes", "kept"):  # a head's pending writes; a checkpoint's kept writes (a LangGraph thread's)
        cid, field = item["checkpoint_id"], "write" if kind == "writes" else "kept"
        return {
            **item,
            "writes": [
                [task, wkind, index, _b64(ring.seal(_raw(data), context(field, tid, cid, task, wkind, index)))]
                for task, wkind, index, data in item["writes"]
            ],
        }
    return item


def opened_lines(lines: Iterable[str], sealer: Sealer) -> Iterator[str]:
    """The lines of an export with every sealed field opened by ``sealer`` (the import's target). A line that is
    not the shape :func:`sealed_item` writes is passed on unchanged, for the import's checks to name what is wrong."""
    for line in lines:
        if TEXT_PREFIX not in line and _SEALED_B64 not in line:  # no sealed text, no base64 of sealed bytes
            yield line
            continue
        try:
            item = json.loads(line)
        except ValueError:
            yield line
            continue
        opened = _opened(item, sealer) if isinstance(item, dict) else None
        yield line if opened is None else json.dumps(opened, separators=(",", ":"), ensure_ascii=False)


def _opened(item: dict[str, Any], sealer: Sealer) -> dict[str, Any] | None:
    kind, tid, cid = item.get("kind"), item.get("thread_id"), item.get("checkpoint_id")
    if not isinstance(tid, str) or not isinstance(cid, str):
        return None
    where = f"the export's checkpoint {cid[:40]!r} of thread {tid[:80]!r}"
    if kind == "checkpoint":
        step = item.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            return None
        out = dict(item)
        metadata = item.get("metadata")
        if isinstance(metadata, Mapping) and isinstance(metadata.get(SEALED_KEY), str):
            out["metadata"] = dict(sealer.open_metadata(metadata, tid, cid))
        out["body"] = _open(sealer, item.get("body"), context("body", tid, cid), f"the body of {where}")
        blobs = item.get("blobs")
        if isinstance(blobs, list):
            out["blobs"] = [
                [b[0], b[1], _open(sealer, b[2], context("blob", tid, b[0], step, b[1]), f"a blob of {where}")]
                if isinstance(b, list) and len(b) == 3 and isinstance(b[0], str) and isinstance(b[1], str)
                else b
                for b in blobs
            ]
        return out
    if kind in ("writes", "kept") and isinstance(item.get("writes"), list):
        field = "write" if kind == "writes" else "kept"
        return {
            **item,
            "writes": [
                [*w[:3], _open(sealer, w[3], context(field, tid, cid, *w[:3]), f"a {field} write of {where}")]
                if isinstance(w, list) and len(w) == 4 and _write_key(w)
                else w
                for w in item["writes"]
            ],
        }
    return None


def _write_key(w: list[Any]) -> bool:
    return isinstance(w[0], str) and isinstance(w[1], str) and isinstance(w[2], int) and not isinstance(w[2], bool)


def _open(sealer: Sealer, value: Any, ctx: bytes, what: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return value
    if not is_sealed(data):
        return value
    if sealer.keyring is None:
        sealer.open_value(data, ctx, what)  # raises: encrypted with key ..., and no key is configured
    return _b64(sealer.open_value(data, ctx, what))


def _raw(value: str) -> bytes:
    return base64.b64decode(value)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
