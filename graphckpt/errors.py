"""Every error graphckpt raises, rooted at :class:`GraphckptError`.

Errors that refine a builtin also subclass it, so ``except LookupError`` keeps working::

    GraphckptError
    ├── GraphSetupError(ValueError)          the graph definition is wrong (found at add_* or compile time)
    ├── InvalidUpdateError(ValueError)       a node, input or fork update does not fit the state schema
    ├── InvalidArgumentError(ValueError)     an argument a saver refuses (a filter that is not JSON, an overlong id)
    ├── SerializationError(TypeError)        a value cannot be stored (names the field and its type)
    ├── CorruptCheckpointError(ValueError)   stored bytes cannot be loaded (names thread and checkpoint)
    ├── CheckpointNotFoundError(LookupError) no such checkpoint in that thread
    ├── ThreadNotFoundError(LookupError)     no such thread
    ├── ThreadConflictError                  another writer moved the thread head first
    │   ├── ThreadBusyError                  a live process holds the thread's lease (names host, pid, worker)
    │   └── LeaseLostError                   this process's lease was taken over: it writes nothing more
    ├── ThreadStateError                     the thread's status does not allow the call (invoke on a failed thread)
    │   ├── ThreadHasForksError              a delete of a thread that forks depend on (names them)
    │   └── InterruptClosedError             an answer to an interrupt that is no longer open (answered, timed out)
    ├── RecursionLimitError(RecursionError)  a run took more super-steps than ``recursion_limit``
    ├── NodeError                            a node failed a run (thread, node, step); the original is ``__cause__``
    │   ├── InvalidNodeUpdateError(InvalidUpdateError)   its update does not fit the state schema
    │   └── NodeSerializationError(SerializationError)   what it wrote cannot be stored
    ├── NodeTimeoutError(TimeoutError)       a node ran longer than its ``timeout`` (raised inside the retry loop)
    ├── EncryptionError                      an encrypted row cannot be read or written: its key is missing or
    │                                        wrong (names the key id), or plaintext where encryption is required
    ├── InvalidCursorError(ValueError)       a page of threads asked with a cursor no page returned, or a bad limit
    ├── SaverError                           the storage backend failed (unreachable, locked too long, ...)
    │   └── StoreNotSetUpError               graphckpt's tables are not there, and the saver may not create them
    └── SyncCallError(RuntimeError)          a blocking call cannot run: inside the app's own loop, or app closed

    GraphckptWarning(UserWarning)            a graph that runs but is likely a mistake (an unreachable node, ...)
"""

from __future__ import annotations

__all__ = [
    "CheckpointNotFoundError",
    "CorruptCheckpointError",
    "EncryptionError",
    "GraphSetupError",
    "GraphckptError",
    "GraphckptWarning",
    "InvalidCursorError",
    "InterruptClosedError",
    "InvalidArgumentError",
    "InvalidNodeUpdateError",
    "InvalidUpdateError",
    "LeaseLostError",
    "NodeError",
    "NodeSerializationError",
    "NodeTimeoutError",
    "RecursionLimitError",
    "SaverError",
    "SerializationError",
    "StoreNotSetUpError",
    "SyncCallError",
    "ThreadBusyError",
    "ThreadConflictError",
    "ThreadHasForksError",
    "ThreadNotFoundError",
    "ThreadStateError",
]


class GraphckptError(Exception):
    """The root of every error raised by graphckpt."""


class GraphckptWarning(UserWarning):
    """Something graphckpt accepts, as LangGraph does, that is likely a mistake: a node nothing leads to, a node with
    no way on to END. Turn it into an error with ``warnings.simplefilter("error", GraphckptWarning)``."""


class GraphSetupError(GraphckptError, ValueError):
    """The graph definition is invalid: unknown or unreachable nodes, bad edges, bad schema."""


class InvalidUpdateError(GraphckptError, ValueError):
    """An update (from a node, the input or a fork) does not fit the state schema. Nothing was committed."""


class InvalidArgumentError(GraphckptError, ValueError):
    """An argument of a call is not one it accepts, refused before anything is read or written: a metadata filter
    that is not a JSON object (a ``datetime``, a ``set``, NaN, a key that is not text), an id longer than
    :data:`~graphckpt.savers.base.MAX_ID_BYTES`. The message names the argument (the filter key, the id)."""


class SerializationError(GraphckptError, TypeError):
    """A value cannot be stored by the serializer. Raised at write time; the previous checkpoint stays the head.
    ``field`` names the state field when the value was one."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class CorruptCheckpointError(GraphckptError, ValueError):
    """Stored bytes could not be decoded. Loading never executes code named by the data."""

    def __init__(self, message: str, *, thread_id: str | None = None, checkpoint_id: str | None = None) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id


class EncryptionError(GraphckptError):
    """A stored row is encrypted with a key the keyring does not hold (``key_id`` names it), does not decrypt with
    the key it names (a wrong key, or a ciphertext moved to another row or altered), or is plaintext where
    ``require_encryption`` is set; or the keys themselves are malformed. Never garbage instead."""

    def __init__(self, message: str, *, key_id: str | None = None) -> None:
        super().__init__(message)
        self.key_id = key_id


class CheckpointNotFoundError(GraphckptError, LookupError):
    """The thread has no checkpoint with that id (or step)."""


class ThreadNotFoundError(GraphckptError, LookupError):
    """No thread with that id exists in the saver."""


class ThreadConflictError(GraphckptError):
    """Another writer moved the thread's head (or claimed the thread) first. Nothing of ours was committed."""


class _LeaseError(ThreadConflictError):
    def __init__(self, message: str, *, thread_id: str, lease: object = None) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.lease = lease
        """The :class:`~graphckpt.savers.base.Lease` of the process that holds the thread, when one does."""


class ThreadBusyError(_LeaseError):
    """The thread is held by a live process (its lease has not expired): a second ``resume``, or a ``submit`` with
    ``multitask="reject"``, is refused. The message names the owner (worker id, host, pid) and its heartbeat's age."""


class LeaseLostError(_LeaseError):
    """This process's lease on the thread was taken over (it was paused or cut off past its lease, and another
    process resumed the thread): its write was refused and the run stops before any further node or effect runs.
    The message names the new owner."""


class ThreadStateError(GraphckptError):
    """The call does not fit the thread's status, e.g. ``invoke`` on a thread that must be resumed."""


class ThreadHasForksError(ThreadStateError):
    """A delete of a thread whose lineage forks still use, without ``cascade``; :attr:`forks` names them."""

    def __init__(self, message: str, forks: list[str] | None = None) -> None:
        super().__init__(message)
        self.forks: list[str] = list(forks or [])


class InterruptClosedError(ThreadStateError):
    """An answer named an interrupt (``resume(thread_id, {interrupt.id: answer})``) that is no longer open: it was
    answered already, or its deadline passed and its ``on_timeout`` took effect. Nothing was answered or run: of two
    answers racing for one interrupt (a person's and the deadline's), exactly one takes effect."""


class RecursionLimitError(GraphckptError, RecursionError):
    """The run exceeded ``recursion_limit`` super-steps. The last checkpoint stays the head."""


class NodeError(GraphckptError):
    """A node failed the run: it raised after its retries, or its output was refused. The thread is marked
    ``failed``; ``resume`` re-runs what did not finish. Every node failure is one (``except NodeError``)."""

    def __init__(self, message: str, *, thread_id: str, node: str, step: int) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.node = node
        self.step = step


class InvalidNodeUpdateError(NodeError, InvalidUpdateError):
    """A node's update (or its routing) does not fit the schema or the graph; the thread is ``failed``."""


class NodeSerializationError(NodeError, SerializationError):
    """A node wrote a value (an update, a ``Send`` payload, an interrupt payload) that cannot be stored; the thread
    is ``failed``."""


class NodeTimeoutError(GraphckptError, TimeoutError):
    """A node ran longer than the ``timeout`` given to ``add_node``."""


class SaverError(GraphckptError):
    """The storage backend failed: unreachable, locked for too long, or refused the operation."""


class StoreNotSetUpError(SaverError):
    """The store holds no graphckpt tables and the saver did not create them: ``setup(create=False)`` found none, or
    the SQLite file belongs to another application (it has tables of its own; graphckpt adds nothing to it)."""


class InvalidCursorError(GraphckptError, ValueError):
    """A page of threads was asked with a cursor that no page returned, or a ``limit`` out of range."""


class SyncCallError(GraphckptError, RuntimeError):
    """A blocking call of the sync API cannot run: it was made from inside the app's own background loop (from a
    node: use the async API there), or it needs an app that was closed since (reading the values of a fork made with
    the sync ``fork``, which loads them on first access)."""
