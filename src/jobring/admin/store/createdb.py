"""Create the PostgreSQL or MySQL/MariaDB database a URL names when the server lacks it
(`jobring db upgrade`); when the user may not, say exactly how to create it."""

from __future__ import annotations

from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from jobring.admin.store.engine import create_engine, normalize_url
from jobring.errors import JobringError

PG_MISSING_DATABASE = "3D000"  # SQLSTATE invalid_catalog_name
MYSQL_UNKNOWN_DATABASE = 1049  # ER_BAD_DB_ERROR
# Databases a PostgreSQL user can usually connect to, to issue CREATE DATABASE from.
PG_MAINTENANCE_DATABASES = ("postgres", "template1")


class DatabaseMissing(JobringError):
    """The database does not exist and could not be created; the message says how to."""


def is_missing_database(exc: BaseException) -> bool:
    """Whether a connection failed because the server has no database of that name."""
    seen: BaseException | None = exc
    while seen is not None:
        orig = getattr(seen, "orig", None)
        for candidate in (seen, orig):
            if candidate is None:
                continue
            if getattr(candidate, "sqlstate", None) == PG_MISSING_DATABASE:
                return True
            args = getattr(candidate, "args", ())
            if args and args[0] == MYSQL_UNKNOWN_DATABASE and "pymysql" in type(candidate).__module__:
                return True
        seen = seen.__cause__
    return False


def how_to_create(url: URL) -> str:
    """The commands an administrator of the server runs to create the database for the user."""
    name, user = url.database or "jobring", url.username or "USER"
    host, backend = url.host or "127.0.0.1", url.get_backend_name()
    if backend == "postgresql":
        port = url.port or 5432
        return (f'as a PostgreSQL superuser run `createdb -h {host} -p {port} -O {user} {name}` '
                f'(or in psql: CREATE DATABASE "{name}" OWNER "{user}";)')
    port = url.port or 3306
    return (f"as a MySQL/MariaDB administrator run (mysql -h {host} -P {port} -u root -p): "
            f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci; "
            f"GRANT ALL PRIVILEGES ON `{name}`.* TO '{user}'@'%';")


async def _exists(url: URL) -> bool:
    engine = create_engine(url, pool_size=1, max_overflow=0)
    try:
        async with engine.connect():
            return True
    except DBAPIError as exc:
        if is_missing_database(exc):
            return False
        raise
    finally:
        await engine.dispose()


async def _create(url: URL) -> None:
    name = url.database or ""
    if url.get_backend_name() == "postgresql":
        servers = [url.set(database=d) for d in PG_MAINTENANCE_DATABASES]
        statement = 'CREATE DATABASE "' + name.replace('"', '""') + '"'
    else:
        servers = [url._replace(database=None)]  # URL.set() leaves a None value unchanged
        statement = ("CREATE DATABASE IF NOT EXISTS `" + name.replace("`", "``")
                     + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
    failure: DBAPIError | None = None
    for server in servers:
        engine = create_engine(server, pool_size=1, max_overflow=0).execution_options(
            isolation_level="AUTOCOMMIT")  # CREATE DATABASE cannot run in a transaction
        try:
            async with engine.connect() as conn:
                await conn.exec_driver_sql(statement)
            return
        except DBAPIError as exc:
            failure = exc
            if not is_missing_database(exc):  # only a missing maintenance database tries the next
                break
        finally:
            await engine.dispose()
    assert failure is not None
    reason = str(getattr(failure, "orig", None) or failure).strip().splitlines()[0]
    raise DatabaseMissing(f"database {name!r} does not exist and user {url.username or '(none)'!r} "
                          f"cannot create it ({reason}): {how_to_create(url)}; then run "
                          "`jobring db upgrade` again")


async def create_missing_database(url: str) -> bool:
    """Create the database ``url`` names when the server lacks it; True when it was created.
    SQLite files are created by the first connection: always False. DatabaseMissing when it
    is missing and the user may not create it; other connection errors propagate."""
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "sqlite" or not parsed.database:
        return False
    if await _exists(parsed):
        return False
    await _create(parsed)
    return True
