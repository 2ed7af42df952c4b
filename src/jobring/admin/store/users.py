"""Users, API tokens and key/value settings."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, delete, func, insert, or_, select, update
from sqlalchemy.dialects import mysql as mysql_dialect
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.exc import IntegrityError

from jobring.admin.store.base import Repository, fetch_page, like_pattern, new_id, to_record
from jobring.admin.store.engine import utc_naive
from jobring.admin.store.errors import Conflict, NotFound
from jobring.admin.store.records import ApiToken, Page, RevokedAccess, Session, User
from jobring.admin.store.tables import api_token, job_user, session, setting

_USER_COLUMNS = (
    job_user.c.id,
    job_user.c.username,
    job_user.c.role,
    job_user.c.permission,
    job_user.c.password_hash,
    job_user.c.must_change_password,
    job_user.c.glue_permission,
    job_user.c.add_time,
)


class UserRepository(Repository):
    """Console users; ``password_hash`` holds argon2id hashes. The reference's MD5
    ``password`` is never written: an adopted user's MD5 is accepted once at login (then
    replaced by an argon2 hash with a forced change) and emptied when the password changes."""

    async def get(self, user_id: int) -> User | None:
        """The user, or ``None``."""
        return await self._one(job_user.c.id == user_id)

    async def by_username(self, username: str) -> User | None:
        """The user with this exact username, or ``None``."""
        return await self._one(job_user.c.username == username)

    async def _one(self, where: ColumnElement[bool]) -> User | None:
        async with self._db.read() as conn:
            row = (await conn.execute(select(*_USER_COLUMNS).where(where))).first()
        return None if row is None else to_record(User, row)

    async def list(
        self, *, username: str | None = None, role: int | None = None, offset: int = 0, limit: int = 20
    ) -> Page[User]:
        """A page of users by username; ``username`` is a substring filter."""
        where: list[ColumnElement[bool]] = []
        if username:
            where.append(job_user.c.username.like(like_pattern(username), escape="\\"))
        if role is not None:
            where.append(job_user.c.role == role)
        async with self._db.read() as conn:
            page = await fetch_page(conn, job_user, dict, where, (job_user.c.username,), offset, limit)
        users = [User(**{c.name: item[c.name] for c in _USER_COLUMNS}) for item in page.items]
        return Page(users, page.total)

    async def create(
        self,
        *,
        username: str,
        role: int,
        password_hash: str | None = None,
        permission: str | None = None,
        must_change_password: bool = False,
        glue_permission: bool = False,
        now: datetime | None = None,
    ) -> int:
        """Insert a user; returns the id. Conflict when the username is taken."""
        stamp = utc_naive(now or datetime.now(UTC))
        try:
            async with self._db.write() as conn:
                result = await conn.execute(
                    insert(job_user).values(
                        username=username,
                        password="",
                        role=role,
                        permission=permission,
                        password_hash=password_hash,
                        must_change_password=must_change_password,
                        glue_permission=glue_permission,
                        add_time=stamp,
                    )
                )
                return new_id(result)
        except IntegrityError as exc:
            raise Conflict(f"username {username!r} is already taken") from exc

    async def count(self) -> int:
        """How many users exist."""
        async with self._db.read() as conn:
            return int((await conn.execute(select(func.count()).select_from(job_user))).scalar_one())

    async def update(self, user: User) -> None:
        """Write username, role, permission and glue_permission (not the password)."""
        try:
            async with self._db.write() as conn:
                result = await conn.execute(
                    update(job_user)
                    .where(job_user.c.id == user.id)
                    .values(
                        username=user.username,
                        role=user.role,
                        permission=user.permission,
                        glue_permission=user.glue_permission,
                    )
                )
                if result.rowcount == 0:
                    raise NotFound(f"user {user.id} does not exist")
        except IntegrityError as exc:
            raise Conflict(f"username {user.username!r} is already taken") from exc

    async def set_password_hash(
        self, user_id: int, password_hash: str, *, must_change: bool = False, clear_legacy: bool = False
    ) -> None:
        """Replace the user's password hash; ``clear_legacy`` also empties XXL-JOB's MD5."""
        values: dict[str, Any] = {"password_hash": password_hash, "must_change_password": must_change}
        if clear_legacy:
            values["password"] = ""
        async with self._db.write() as conn:
            result = await conn.execute(update(job_user).where(job_user.c.id == user_id).values(**values))
            if result.rowcount == 0:
                raise NotFound(f"user {user_id} does not exist")

    async def legacy_md5(self, user_id: int) -> str | None:
        """XXL-JOB's unsalted MD5 of an adopted user that has no argon2 hash yet, else None."""
        async with self._db.read() as conn:
            row = (await conn.execute(
                select(job_user.c.password)
                .where(job_user.c.id == user_id, job_user.c.password_hash.is_(None))
            )).first()
        return str(row[0]) if row is not None and row[0] else None

    async def grant_glue_to_legacy_users(self) -> int:
        """GLUE permission for the users XXL-JOB created (MD5 only): XXL-JOB lets every user
        edit the GLUE code of the groups they may use. Returns how many."""
        async with self._db.write() as conn:
            result = await conn.execute(
                update(job_user)
                .where(job_user.c.password != "", job_user.c.password_hash.is_(None))
                .values(glue_permission=True)
            )
            return int(result.rowcount)

    async def revoke_access(
        self, user_id: int, now_ms: int, *, keep_session: str | None = None
    ) -> RevokedAccess:
        """End every session of the user (but ``keep_session``, a session id hash) and revoke
        every API token that has not expired by ``now_ms``, in one transaction; returns how
        many (expired ones are dead already and not counted)."""
        sessions = [session.c.user_id == user_id, session.c.revoked.is_(False), session.c.expires > now_ms]
        if keep_session is not None:
            sessions.append(session.c.id_hash != keep_session)
        now = datetime.fromtimestamp(now_ms / 1000, UTC).replace(tzinfo=None)
        tokens = [api_token.c.user_id == user_id, api_token.c.revoked.is_(False),
                  or_(api_token.c.expires_at.is_(None), api_token.c.expires_at > now)]
        async with self._db.write() as conn:
            ended = (await conn.execute(update(session).where(*sessions).values(revoked=True))).rowcount
            revoked = (await conn.execute(update(api_token).where(*tokens).values(revoked=True))).rowcount
        return RevokedAccess(sessions=int(ended), tokens=int(revoked))

    async def delete(self, user_id: int) -> bool:
        """Delete the user, their API tokens and sessions; False when absent."""
        async with self._db.write() as conn:
            await conn.execute(delete(api_token).where(api_token.c.user_id == user_id))
            await conn.execute(delete(session).where(session.c.user_id == user_id))
            return (await conn.execute(delete(job_user).where(job_user.c.id == user_id))).rowcount > 0


class TokenRepository(Repository):
    """API tokens (only their sha256 hashes are stored)."""

    async def create(
        self, user_id: int, name: str, token_hash: str, now: datetime, expires_at: datetime | None = None,
        *, parent_token_id: int | None = None,
    ) -> int:
        """Store a new token hash; returns its id. Conflict if the hash exists.
        ``parent_token_id``: the token it was created with (revoked with it)."""
        try:
            async with self._db.write() as conn:
                result = await conn.execute(
                    insert(api_token).values(
                        user_id=user_id,
                        name=name,
                        token_hash=token_hash,
                        add_time=utc_naive(now),
                        revoked=False,
                        expires_at=None if expires_at is None else utc_naive(expires_at),
                        parent_token_id=parent_token_id,
                    )
                )
                return new_id(result)
        except IntegrityError as exc:
            raise Conflict("a token with this hash already exists") from exc

    async def get(self, token_id: int) -> ApiToken | None:
        """The token with this id, revoked or not, or ``None``."""
        async with self._db.read() as conn:
            row = (await conn.execute(select(api_token).where(api_token.c.id == token_id))).first()
        return None if row is None else to_record(ApiToken, row)

    async def by_hash(self, token_hash: str) -> ApiToken | None:
        """The token with this hash, revoked or not (check ``revoked``), or ``None``."""
        async with self._db.read() as conn:
            row = (await conn.execute(select(api_token).where(api_token.c.token_hash == token_hash))).first()
        return None if row is None else to_record(ApiToken, row)

    async def list_for_user(self, user_id: int) -> list[ApiToken]:
        """The user's tokens, by id."""
        stmt = select(api_token).where(api_token.c.user_id == user_id).order_by(api_token.c.id)
        async with self._db.read() as conn:
            return [to_record(ApiToken, r) for r in (await conn.execute(stmt)).all()]

    async def revoke(self, token_id: int, *, user_id: int | None = None) -> list[int] | None:
        """Revoke a token (only the user's own when ``user_id`` is given) and every token
        created with it, directly or through others; returns the ids of those descendants
        that were still active, or None when the token was not active."""
        where = [api_token.c.id == token_id, api_token.c.revoked.is_(False)]
        if user_id is not None:
            where.append(api_token.c.user_id == user_id)
        async with self._db.write() as conn:
            if (await conn.execute(update(api_token).where(*where).values(revoked=True))).rowcount == 0:
                return None
            descendants: list[int] = []
            frontier = [token_id]
            while frontier:
                children = (await conn.execute(
                    select(api_token.c.id, api_token.c.revoked)
                    .where(api_token.c.parent_token_id.in_(frontier))
                )).all()
                active = [int(c.id) for c in children if not c.revoked]
                if active:
                    await conn.execute(
                        update(api_token).where(api_token.c.id.in_(active)).values(revoked=True))
                descendants += active
                frontier = [int(c.id) for c in children]
            return descendants

    async def touch_last_used(self, token_id: int, now: datetime) -> None:
        """Record the token's last use."""
        async with self._db.write() as conn:
            await conn.execute(
                update(api_token).where(api_token.c.id == token_id).values(last_used_time=utc_naive(now))
            )


class SessionRepository(Repository):
    """Server-side sessions, keyed by the sha256 of the session id (instants: epoch ms)."""

    async def create(self, id_hash: str, user_id: int, now_ms: int, expires_ms: int) -> None:
        """Store a new session; expired rows of every user are purged on the way."""
        async with self._db.write() as conn:
            await conn.execute(delete(session).where(session.c.expires < now_ms))
            await conn.execute(
                insert(session).values(
                    id_hash=id_hash, user_id=user_id, created=now_ms, expires=expires_ms,
                    last_seen=now_ms, revoked=False,
                )
            )

    async def get(self, id_hash: str) -> Session | None:
        """The session with this hash, revoked or expired or not, or ``None``."""
        async with self._db.read() as conn:
            row = (await conn.execute(select(session).where(session.c.id_hash == id_hash))).first()
        return None if row is None else to_record(Session, row)

    async def touch(self, id_hash: str, now_ms: int) -> None:
        """Record the session's last use."""
        async with self._db.write() as conn:
            await conn.execute(update(session).where(session.c.id_hash == id_hash).values(last_seen=now_ms))

    async def revoke(self, id_hash: str) -> bool:
        """End one session; True when it was active."""
        where = [session.c.id_hash == id_hash, session.c.revoked.is_(False)]
        async with self._db.write() as conn:
            return (await conn.execute(update(session).where(*where).values(revoked=True))).rowcount > 0


class SettingRepository(Repository):
    """Cluster-wide key/value settings (``jobring_setting``)."""

    async def get(self, name: str) -> str | None:
        """The value, or ``None``."""
        async with self._db.read() as conn:
            return (await conn.execute(select(setting.c.value).where(setting.c.name == name))).scalar()

    async def set(self, name: str, value: str, now: datetime | None = None) -> None:
        """Create or overwrite a setting."""
        stamp = utc_naive(now or datetime.now(UTC))
        # One atomic upsert: an UPDATE-then-INSERT pair deadlocks on InnoDB when two nodes
        # write the same missing name at once (both take the gap lock, then both insert).
        stmt: Any
        if self._db.backend in ("mysql", "mariadb"):
            stmt = mysql_dialect.insert(setting).values(name=name, value=value, update_time=stamp)
            stmt = stmt.on_duplicate_key_update(
                value=stmt.inserted.value, update_time=stmt.inserted.update_time
            )
        else:
            dialect = pg_dialect if self._db.backend == "postgresql" else sqlite_dialect
            stmt = dialect.insert(setting).values(name=name, value=value, update_time=stamp)
            stmt = stmt.on_conflict_do_update(
                index_elements=[setting.c.name],
                set_={"value": stmt.excluded.value, "update_time": stmt.excluded.update_time},
            )
        async with self._db.write() as conn:
            await conn.execute(stmt)

    async def get_or_create(
        self, name: str, factory: Callable[[], str] | str, now: datetime | None = None
    ) -> str:
        """The stored value; if none, store ``factory()`` (or ``factory`` when a str).
        Race-safe across nodes: when two create at once, both get the value stored first."""
        existing = await self.get(name)
        if existing is not None:
            return existing
        value = factory if isinstance(factory, str) else factory()
        stamp = utc_naive(now or datetime.now(UTC))
        try:
            async with self._db.write() as conn:
                await conn.execute(insert(setting).values(name=name, value=value, update_time=stamp))
            return value
        except IntegrityError:
            stored = await self.get(name)
            if stored is None:
                raise
            return stored

    async def all(self) -> dict[str, str]:
        """Every setting."""
        async with self._db.read() as conn:
            rows = (await conn.execute(select(setting.c.name, setting.c.value))).all()
        return {str(name): str(value) for name, value in rows}
