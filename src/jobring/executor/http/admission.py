"""Which connections the executor's standalone server keeps when clients open too many.

A connection is *unauthenticated* until one of its request heads carries the executor's access
token (with no token configured: until its first complete head). Unauthenticated connections
are budgeted per client address and in total: past a budget, the oldest ones (of that address,
then of all) are closed. Connections that presented the token (the admin's) never count
against those budgets and are never closed for others, so idle connections opened by others
cannot keep the admin out.

A connection whose request was refused and answered (a wrong or missing token, a limit) is
*lingering*: the server reads and drops what its client still sends for a moment, so that the
client reads the answer instead of a reset. It leaves the budgets (it closes on its own
shortly, and closing it early would lose the answer it was given) but still counts towards
``max_connections``, and a newcomer past that closes the oldest lingering one when no
unauthenticated one is left.

The budgets are enforced by :meth:`Admission.trim`, which the server runs shortly after a
connection arrives rather than at once: connections accepted together (a flood and, among
it, a new connection of the admin) all get their first read before the oldest are chosen,
and the admin's has presented the token by then. Only ``max_connections`` is enforced on
arrival: a newcomer past it closes the oldest unauthenticated connection, and is refused when
every connection has presented the token.
"""

from __future__ import annotations

from typing import Generic, TypeVar

C = TypeVar("C")


class Admission(Generic[C]):
    """The bookkeeping of admitted connections (pure: closing the evicted is the caller's)."""

    def __init__(self, max_connections: int, max_unauthenticated: int, max_unauthenticated_per_address: int
                 ) -> None:
        self.max_connections = max_connections
        self.max_unauthenticated = max_unauthenticated
        self.max_unauthenticated_per_address = max_unauthenticated_per_address
        self._admitted: set[C] = set()
        # Insertion order is age: the first entry is the oldest.
        self._unauthenticated: dict[C, str] = {}
        self._by_address: dict[str, dict[C, None]] = {}
        self._crowded: set[str] = set()  # addresses that went past their budget since the last trim
        self._lingering: dict[C, None] = {}  # answered and refused, closing on their own (oldest first)

    @property
    def admitted(self) -> int:
        return len(self._admitted)

    @property
    def unauthenticated(self) -> int:
        return len(self._unauthenticated)

    def unauthenticated_from(self, address: str) -> int:
        return len(self._by_address.get(address, ()))

    @property
    def needs_trim(self) -> bool:
        return bool(self._crowded) or len(self._unauthenticated) > self.max_unauthenticated

    def admit(self, connection: C, address: str) -> tuple[bool, C | None]:
        """Whether ``connection`` (from ``address``) is served, and the connection to close to
        make room for it (already forgotten here)."""
        evicted: C | None = None
        if len(self._admitted) >= self.max_connections:
            oldest = self._unauthenticated or self._lingering
            if not oldest:
                return False, None
            evicted = self._drop(next(iter(oldest)))
        self._admitted.add(connection)
        self._unauthenticated[connection] = address
        same_address = self._by_address.setdefault(address, {})
        same_address[connection] = None
        if len(same_address) > self.max_unauthenticated_per_address:
            self._crowded.add(address)
        return True, evicted

    def trim(self) -> list[C]:
        """The unauthenticated connections past the budgets, oldest first (forgotten here)."""
        evicted: list[C] = []
        for address in self._crowded:
            while self.unauthenticated_from(address) > self.max_unauthenticated_per_address:
                evicted.append(self._drop(next(iter(self._by_address[address]))))
        self._crowded.clear()
        while len(self._unauthenticated) > self.max_unauthenticated:
            evicted.append(self._drop(next(iter(self._unauthenticated))))
        return evicted

    def authenticated(self, connection: C) -> None:
        """``connection`` presented the token: it no longer counts against the budgets."""
        address = self._unauthenticated.pop(connection, None)
        if address is None:
            return
        same_address = self._by_address[address]
        del same_address[connection]
        if not same_address:
            del self._by_address[address]

    def linger(self, connection: C) -> None:
        """``connection`` was refused and answered, and closes on its own shortly: out of the
        budgets, closed for a newcomer only when no unauthenticated connection is left."""
        if connection in self._unauthenticated:
            self.authenticated(connection)
            self._lingering[connection] = None

    def forget(self, connection: C) -> None:
        """``connection`` is closed (idempotent)."""
        self._admitted.discard(connection)
        self._lingering.pop(connection, None)
        self.authenticated(connection)

    def _drop(self, connection: C) -> C:
        self.forget(connection)
        return connection
