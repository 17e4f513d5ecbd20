"""State schema -> channels: reducers, update validation, and the delta encoding of reducer channels.

Each field of the state schema (a pydantic model, a TypedDict or a dataclass) is a *channel*. A plain field keeps
the last write. A field declared ``Annotated[T, reducer]`` folds every write into its value with
``reducer(old, new)``; the built-in reducers are :func:`append` (list concatenation) and :func:`merge` (dict update).

A reducer field starts at its declared default or, in a TypedDict, at the empty value of its type (``list()``,
``dict()``, ``set()``, ``int()``, ``str()``, ``tuple()``, ...; abstract collections such as ``Sequence`` start as the
concrete empty one), so ``operator.add`` and ``max`` see a value of the right type on the first write, and a reducer
field nobody wrote reads as that empty value, as in LangGraph. A type that cannot be built without arguments
(``list[str] | None``, a model with required fields) has no start: its reducer gets ``None`` first. (Only values
change: stored threads load as before, an unwritten field filled in from the start value.)

"""

from __future__ import annotations

import collections.abc
import dataclasses
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic
import typing_extensions

from graphckpt.errors import GraphSetupError, InvalidUpdateError

__all__ = ["Channel", "Reducer", "ReducerError", "StateSchema", "append", "merge"]

Reducer = Callable[[Any, Any], Any]


def append(old: Sequence[Any] | None, new: Sequence[Any]) -> list[Any]:
    """Reducer: concatenate lists. ``Annotated[list[str], append]``; a write is a list of items to add."""
    if old is None:
        return list(new)
    return [*old, *new]


def merge(old: Mapping[Any, Any] | None, new: Mapping[Any, Any]) -> dict[Any, Any]:
    """Reducer: shallow dict update, later writes win per key. ``Annotated[dict[str, int], merge]``."""
    if old is None:
        return dict(new)
    return {**old, **new}


_MISSING: Any = object()


class ReducerError(InvalidUpdateError):
    """A field's reducer raised on a write: ``update`` is the position of the update that carried it (see
    :meth:`StateSchema.apply`)."""

    def __init__(self, message: str, *, field: str, update: int) -> None:
        super().__init__(message)
        self.field = field
        self.update = update


@dataclass(slots=True)
class Channel:
    """One state field."""

    name: str
    annotation: Any
    adapter: pydantic.TypeAdapter[Any]
    reducer: Reducer | None
    default: Callable[[], Any] | None  # None: no default (required for pydantic, absent for TypedDict)

    def validate(self, value: Any, *, node: str) -> Any:
        try:
            return self.adapter.validate_python(value)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            detail = f" at {where}" if where else ""
            raise InvalidUpdateError(
                f"{node}: value for field {self.name!r} does not fit {_type_name(self.annotation)}{detail}: "
                f"{first['msg']} (got {type(value).__name__})"
            ) from None
        except Exception as exc:  # a validator of the user's raised something else: still the field's fault
            raise InvalidUpdateError(
                f"{node}: value for field {self.name!r} was refused: its validator raised {type(exc).__name__}: "
                f"{str(exc)[:200]}"
            ) from exc

    def fold(self, value: Any, writes: Sequence[Any]) -> Any:
        """The channel's value after ``writes`` (in order)."""
        if self.reducer is None:
            return writes[-1]
        if self.reducer is append:
            out = [] if value is _MISSING or value is None else list(value)  # no default: starts empty too
            for w in writes:
                out.extend(w)
            return out
        if value is _MISSING:
            value = None if self.default is None else self.default()
        for w in writes:
            value = self.reducer(value, w)
        return value


class StateSchema:
    """The channels of a state schema, and how to build, validate and update state values."""

    def __init__(self, schema: type[Any]) -> None:
        self.schema = schema
        self.is_model = isinstance(schema, type) and issubclass(schema, pydantic.BaseModel)
        self.is_dataclass = isinstance(schema, type) and dataclasses.is_dataclass(schema)
        if not self.is_model and not self.is_dataclass and not typing_extensions.is_typeddict(schema):
            raise GraphSetupError(
                f"state schema must be a pydantic BaseModel, a TypedDict or a dataclass, not {schema!r}"
            )
        self.channels: dict[str, Channel] = {}
        hints = typing.get_type_hints(schema, include_extras=True)
        model_fields = schema.model_fields if self.is_model else {}
        data_fields = {f.name: f for f in dataclasses.fields(schema)} if self.is_dataclass else {}
        self.required: tuple[str, ...] = ()
        """Fields an input must give (pydantic and dataclass fields without a default)."""
        for name, hint in hints.items():
            if (self.is_model and name not in model_fields) or (self.is_dataclass and name not in data_fields):
                continue  # ClassVar, InitVar and private attributes
            base, reducer = _split_reducer(name, hint)
            default: Callable[[], Any] | None = None
            checked = base
            if self.is_dataclass:
                dfield = data_fields[name]
                if dfield.default_factory is not dataclasses.MISSING:
                    default = dfield.default_factory
                elif dfield.default is not dataclasses.MISSING:
                    default = _copying(dfield.default)
                else:
                    self.required += (name,)
            if self.is_model:
                field = model_fields[name]
                if field.default_factory is not None:
                    default = typing.cast(Callable[[], Any], field.default_factory)
                elif not field.is_required():
                    default = _copying(field.default)
                if field.metadata and reducer is None:
                    # `x: int = Field(ge=0)` keeps its constraints here, not in the hint (`Annotated[int, Field(ge=0)]`
                    # has them in both): a value the model would refuse must not be stored. (A reducer field's write
                    # is not its value: its constraints cannot be checked on one write.)
                    checked = typing.Annotated[(base, *field.metadata)]
                if field.is_required():
                    self.required += (name,)
            elif not self.is_dataclass and reducer is not None:  # a TypedDict reducer field starts empty
                default = _empty_value(base)
            self.channels[name] = Channel(name, base, pydantic.TypeAdapter(checked), reducer, default)

    def defaults(self) -> dict[str, Any]:
        return {name: ch.default() for name, ch in self.channels.items() if ch.default is not None}

    def make(self, values: Mapping[str, Any]) -> Any:
        """The state as a node sees it: a model instance (not re-validated) or a dict.

        Lists, dicts and sets are copied (shallowly), so a node that appends to ``state.notes`` in place changes
        only its own copy, never the engine's values, a retry's input or a sibling's; what a node changes must be in
        its returned update. Objects nested deeper are shared: treat the state as read-only."""
        copied = {k: _shallow_copy(v) for k, v in values.items()}
        if self.is_model:
            return self.schema.model_construct(**copied)
        if self.is_dataclass:  # like model_construct: no __init__, no __post_init__ (the values were validated)
            obj = object.__new__(self.schema)
            for key, value in copied.items():
                object.__setattr__(obj, key, value)
            return obj
        return copied

    def validate_update(self, update: Any, *, node: str) -> dict[str, Any]:
        """Check that ``update`` is a mapping of known fields with values of the right type; returns it validated."""
        if update is None:
            return {}
        if (self.is_model or self.is_dataclass) and isinstance(update, self.schema):
            raise InvalidUpdateError(
                f"{node}: returned the state object; return a dict of only the fields it changes (a whole state "
                "would append every reducer field to itself)"
            )
        if not isinstance(update, Mapping):
            raise InvalidUpdateError(
                f"{node}: an update must be a dict of state fields (or a Command), not {type(update).__name__}"
            )
        out: dict[str, Any] = {}
        for key, value in update.items():
            channel = self.channels.get(key)
            if channel is None:
                known = ", ".join(sorted(self.channels))
                raise InvalidUpdateError(f"{node}: unknown state field {key!r} (the schema has: {known})")
            out[key] = channel.validate(value, node=node)
        return out

    def check_required(self, values: Mapping[str, Any], *, node: str) -> None:
        missing = [n for n in self.required if n not in values]
        if missing:
            raise InvalidUpdateError(f"{node}: required state field(s) missing: {', '.join(missing)}")

    def apply(
        self, values: dict[str, Any], updates: Sequence[Mapping[str, Any]], *, sources: Sequence[str] = ()
    ) -> tuple[dict[str, Any], dict[str, list[Any]]]:
        """Fold validated ``updates`` (in task order) into a copy of ``values``.

        Returns the new values and, per changed channel, the list of writes it received (its delta). A reducer that
        raises is reported as :class:`ReducerError` naming the field and ``sources[i]`` (the writer of the update,
        ``"input"`` by default) of the update ``i`` whose write it failed on; ``values`` are unchanged."""
        writes: dict[str, list[Any]] = {}
        for update in updates:
            for key, value in update.items():
                writes.setdefault(key, []).append(value)
        if not writes:
            return values, writes
        new = dict(values)
        for key, ws in writes.items():
            channel = self.channels[key]
            old = values.get(key, _MISSING)
            try:
                new[key] = channel.fold(old, ws)
            except Exception as exc:
                raise self._reducer_error(channel, old, updates, sources, exc) from exc
        return new, writes

    def _reducer_error(
        self,
        channel: Channel,
        old: Any,
        updates: Sequence[Mapping[str, Any]],
        sources: Sequence[str],
        exc: Exception,
    ) -> ReducerError:
        """Find the update whose write made ``channel``'s reducer raise ``exc`` (folding the writes one at a time,
        which only this error path does) and name its writer."""
        at, value = 0, old
        for i, update in enumerate(updates):
            if channel.name not in update:
                continue
            at = i
            try:
                value = channel.fold(value, [update[channel.name]])
            except Exception as cause:
                exc = cause
                break
        source = sources[at] if at < len(sources) else "input"
        return ReducerError(
            f"{source}: the reducer of field {channel.name!r} failed on its update: {type(exc).__name__}: {exc}",
            field=channel.name,
            update=at,
        )


def _shallow_copy(value: Any) -> Any:
    tp = type(value)
    if tp is list or tp is dict or tp is set:
        return value.copy()
    return value


def _split_reducer(name: str, hint: Any) -> tuple[Any, Reducer | None]:
    if typing.get_origin(hint) is typing.Annotated:
        base, *extras = typing.get_args(hint)
        reducers = [x for x in extras if callable(x) and not isinstance(x, type) and not _is_pydantic_meta(x)]
        if len(reducers) > 1:
            raise GraphSetupError(f"state field {name!r} has more than one reducer")
        if reducers:
            others = [x for x in extras if x is not reducers[0]]
            return (typing.Annotated[(base, *others)] if others else base), reducers[0]
    return hint, None


def _is_pydantic_meta(x: Any) -> bool:
    return type(x).__module__.startswith(("pydantic", "annotated_types"))


def _copying(default: Any) -> Callable[[], Any]:
    if isinstance(default, (list, dict, set)):
        return lambda: default.copy()
    return lambda: default


_ABSTRACT_EMPTY: dict[Any, Callable[[], Any]] = {
    collections.abc.Sequence: list,
    collections.abc.MutableSequence: list,
    collections.abc.Collection: list,
    collections.abc.Iterable: list,
    collections.abc.Set: set,
    collections.abc.MutableSet: set,
    collections.abc.Mapping: dict,
    collections.abc.MutableMapping: dict,
}


def _empty_value(annotation: Any) -> Callable[[], Any] | None:
    """The start of a reducer field without a default: its type called with no arguments, when that works (for a
    generic alias its origin: ``list[str]`` -> ``list()``). ``None`` when the type cannot be built so."""
    tp = annotation
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    tp = typing.get_origin(tp) or tp
    factory = _ABSTRACT_EMPTY.get(tp, tp)
    if not isinstance(factory, type) or factory is type(None):
        return None  # a Union, a Literal, a TypeVar, Any: no single empty value
    try:
        factory()
    except Exception:
        return None
    return typing.cast(Callable[[], Any], factory)


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or repr(annotation).replace("typing.", "")
