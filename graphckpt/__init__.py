"""graphckpt: a durable graph engine for multi-step AI agents.

Every super-step of a :class:`StateGraph` run is checkpointed (state *and* frontier) to a saver, so a thread can be
resumed after a crash without re-running finished work, read at any past checkpoint, forked into a branch, and
diffed against another.
"""

from graphckpt.app import App, StreamMode
from graphckpt.checkpoint import (
    CheckpointMetadata,
    CheckpointRef,
    Interrupt,
    NodeUsage,
    Snapshot,
    Source,
    Status,
    Task,
    TaskError,
    ThreadInfo,
)
from graphckpt.context import Context, current_context, get_stream_writer, interrupt
from graphckpt.control import END, START, Command, Send
from graphckpt.diff import Diff, FieldChange
from graphckpt.encryption import Keyring
from graphckpt.errors import (
    CheckpointNotFoundError,
    CorruptCheckpointError,
    EncryptionError,
    GraphckptError,
    GraphckptWarning,
    GraphSetupError,
    InvalidNodeUpdateError,
    InvalidUpdateError,
    LeaseLostError,
    NodeError,
    NodeSerializationError,
    NodeTimeoutError,
    RecursionLimitError,
    SaverError,
    SerializationError,
    StoreNotSetUpError,
    SyncCallError,
    ThreadBusyError,
    ThreadConflictError,
    ThreadHasForksError,
    ThreadNotFoundError,
    ThreadStateError,
)
from graphckpt.graph import StateGraph
from graphckpt.messages import REMOVE_ALL_MESSAGES, MessagesState, RemoveMessage, add_messages
from graphckpt.records import CrashedThread, RecoveryResult
from graphckpt.retry import RetryPolicy, default_retry_on
from graphckpt.savers.base import Lease, Owner, Saver
from graphckpt.savers.memory import MemorySaver
from graphckpt.savers.queue import RunRecord, RunStatus
from graphckpt.state import append, merge
from graphckpt.worker import Worker

__version__ = "0.1.0"

__all__ = [
    "App",
    "CheckpointMetadata",
    "CheckpointNotFoundError",
    "CheckpointRef",
    "Command",
    "Context",
    "CorruptCheckpointError",
    "CrashedThread",
    "Diff",
    "END",
    "EncryptionError",
    "FieldChange",
    "GraphSetupError",
    "GraphckptError",
    "GraphckptWarning",
    "Interrupt",
    "InvalidNodeUpdateError",
    "InvalidUpdateError",
    "Keyring",
    "Lease",
    "LeaseLostError",
    "MemorySaver",
    "MessagesState",
    "NodeError",
    "NodeSerializationError",
    "NodeTimeoutError",
    "NodeUsage",
    "Owner",
    "REMOVE_ALL_MESSAGES",
    "RecoveryResult",
    "RecursionLimitError",
    "RemoveMessage",
    "RetryPolicy",
    "RunRecord",
    "RunStatus",
    "START",
    "Saver",
    "SaverError",
    "Send",
    "SerializationError",
    "Snapshot",
    "Source",
    "StateGraph",
    "Status",
    "StoreNotSetUpError",
    "StreamMode",
    "SyncCallError",
    "Task",
    "TaskError",
    "ThreadBusyError",
    "ThreadConflictError",
    "ThreadHasForksError",
    "ThreadInfo",
    "ThreadNotFoundError",
    "ThreadStateError",
    "Worker",
    "add_messages",
    "append",
    "current_context",
    "default_retry_on",
    "get_stream_writer",
    "interrupt",
    "merge",
]
