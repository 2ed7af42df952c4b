"""The request-spec layer: one description of each API call, sent by either client.

An endpoint is a plain function returning a :class:`Call`; :class:`Endpoint` binds it to
an :class:`ApiGroup`, whose mode (:class:`Sync` or :class:`Async`) decides whether calling
it returns the result or an awaitable of it. Each call is thus written once for both clients.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, ParamSpec, Self, TypeVar, overload

P = ParamSpec("P")
T = TypeVar("T")

JsonObject = dict[str, Any]


class Sync:
    """Mode marker: endpoints return their result."""


class Async:
    """Mode marker: endpoints return a coroutine of their result."""


M = TypeVar("M", Sync, Async)


class SessionEffect(Enum):
    """What a call does to the client's login session once it succeeds."""

    NONE = "none"
    LOGIN = "login"
    LOGOUT = "logout"


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One HTTP exchange: ``path`` is relative to the API root (``/api/v1``); ``decode``
    turns the JSON body (None when empty) into the result."""

    method: str
    path: str
    decode: Callable[[Any], T]
    params: Mapping[str, Any] | None = None
    body: Any = None
    effect: SessionEffect = SessionEffect.NONE


def get(path: str, decode: Callable[[Any], T], **params: Any) -> Call[T]:
    return Call("GET", path, decode, params=params)


def post(path: str, decode: Callable[[Any], T], body: Any = None, **params: Any) -> Call[T]:
    return Call("POST", path, decode, params=params, body=body)


def put(path: str, decode: Callable[[Any], T], body: Any = None) -> Call[T]:
    return Call("PUT", path, decode, body=body)


def patch(path: str, decode: Callable[[Any], T], body: Any = None) -> Call[T]:
    return Call("PATCH", path, decode, body=body)


def delete(path: str, decode: Callable[[Any], T], **params: Any) -> Call[T]:
    return Call("DELETE", path, decode, params=params)


def as_object(body: Any) -> JsonObject:
    """Decoder: the JSON object itself."""
    if not isinstance(body, dict):
        raise TypeError(f"expected a JSON object from the admin, got {type(body).__name__}")
    return body


def as_list(body: Any) -> list[JsonObject]:
    """Decoder: a JSON array of objects."""
    if not isinstance(body, list):
        raise TypeError(f"expected a JSON array from the admin, got {type(body).__name__}")
    return [as_object(item) for item in body]


def as_nothing(body: Any) -> None:
    """Decoder for calls whose answer carries nothing the caller needs."""
    return None


def compact(fields: Mapping[str, Any]) -> JsonObject:
    """``fields`` without the entries that are None (not given)."""
    return {key: value for key, value in fields.items() if value is not None}


class ApiGroup(Generic[M]):
    """A set of related endpoints, bound to one client's send function."""

    def __init__(self, send: Callable[[Call[Any]], Any]) -> None:
        self._send = send


class Endpoint(Generic[P, T]):
    """Descriptor turning a spec function into a method of an :class:`ApiGroup`."""

    def __init__(self, spec: Callable[P, Call[T]]) -> None:
        self.spec = spec
        self.__doc__ = spec.__doc__

    @overload
    def __get__(self, group: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(self, group: ApiGroup[Sync], owner: type[Any]) -> Callable[P, T]: ...

    @overload
    def __get__(
        self, group: ApiGroup[Async], owner: type[Any]
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...

    def __get__(self, group: ApiGroup[Any] | None, owner: type[Any]) -> Any:
        if group is None:
            return self
        spec = self.spec
        send = group._send

        def bound(*args: P.args, **kwargs: P.kwargs) -> Any:
            return send(spec(*args, **kwargs))

        bound.__doc__ = spec.__doc__
        bound.__name__ = spec.__name__
        return bound
