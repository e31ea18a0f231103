"""The one way both wheels open a PostgreSQL connection, and what they say when it fails.

The runtime's readers (:func:`refactx_index.tree.pg.open_index`, its pool and its activation
listener) and the pipeline's stages, run history and catalog commands
(``refactx_pipeline.db.connect``) take their connection settings from
:func:`connection_kwargs`, so one DSN means the same session everywhere:

- the DSN's own ``options`` (a ``search_path``, a role's settings) are kept, and the settings
  of the caller (its ``statement_timeout``, read-only sessions) are added after them, so those
  win where both name one;
- the DSN's own ``connect_timeout`` wins over the caller's default (an operator who wrote one
  meant it); without one, an unreachable server fails the caller in ``connect_timeout_s``;
- ``application_name`` names the caller (at most 63 bytes, PostgreSQL's limit) unless the DSN
  names one.

A failed first connection is told permanent (a wrong password, user or database, a malformed
DSN, a refused port, an unknown host: :func:`connect_failure`) from transient, and no message
shows the DSN's password (:func:`scrub`).
"""

from __future__ import annotations

import os
import re
import socket
from typing import Any
from urllib.parse import unquote, urlsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict

from .errors import DatabaseUnavailable

# belt and braces for read-only readers: autocommit never idles in a transaction, but a
# server-side limit also covers anything that might
IDLE_IN_TRANSACTION_TIMEOUT_MS = 60_000


def connection_kwargs(dsn: str, *, statement_timeout_ms: int | None, connect_timeout_s: float,
                      application_name: str, read_only: bool = False, **kwargs: Any) -> dict[str, Any]:
    """The keyword arguments of ``psycopg.connect`` (or a pool's ``kwargs``) for ``dsn`` under the
    policy of this module. ``statement_timeout_ms`` None sets no statement timeout (a LISTEN
    connection); ``read_only``: every transaction read-only, and idle transactions ended after
    a minute. Other ``kwargs`` pass through."""
    if statement_timeout_ms is not None and statement_timeout_ms < 1:
        raise ValueError(f"statement_timeout_ms must be at least 1, got {statement_timeout_ms}")
    try:
        given = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        given = {}  # psycopg.connect reports the malformed DSN itself (first_connection: without quoting it)
    settings = [str(given.get("options") or "").strip()]
    if statement_timeout_ms is not None:
        settings.append(f"-c statement_timeout={int(statement_timeout_ms)}")
    if read_only:
        settings += ["-c default_transaction_read_only=on",
                     f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_TIMEOUT_MS}"]
    options = " ".join(s for s in settings if s)
    if options:
        kwargs["options"] = options
    if "connect_timeout" not in given:
        kwargs["connect_timeout"] = max(1, int(connect_timeout_s))
    if "application_name" not in given:
        kwargs["application_name"] = application_name.encode()[:63].decode("utf-8", "ignore")
    return kwargs


def connect(dsn: str, *, statement_timeout_ms: int | None, connect_timeout_s: float, application_name: str,
            read_only: bool = False, **kwargs: Any) -> psycopg.Connection:
    """A connection to ``dsn`` with :func:`connection_kwargs`' settings; psycopg's errors as they are."""
    return psycopg.connect(dsn, **connection_kwargs(
        dsn, statement_timeout_ms=statement_timeout_ms, connect_timeout_s=connect_timeout_s,
        application_name=application_name, read_only=read_only, **kwargs))


# How a failed connection is told permanent (waiting does not cure it) from transient. psycopg
# 3.3 (libpq 18) gives no SQLSTATE for a connection that fails before its session exists:
# ``exc.sqlstate`` and ``exc.diag`` are empty, whatever the server answered. What it does give
# is read first (connect_failure): the error class (``ProgrammingError``: libpq could not parse
# the DSN), whether libpq was reached (``exc.pgconn`` is None when psycopg failed to resolve the
# host name: resolved again here, ``socket.gaierror``'s code tells a name that does not exist
# from a resolver that is down), ``pgconn.needs_password`` (the server asked for a password the
# DSN lacks), and, for the address libpq tried last (``pgconn.host``/``port``), whether anything
# listens there (a socket connect: ``ConnectionRefusedError``/``FileNotFoundError``). Why a
# server refused a session it answered (no such database or role, a wrong password, no
# pg_hba.conf entry) is only in libpq's text of the server's FATAL message: matched below, the
# server's English words (lc_messages C or en). A server answering in another language is
# waited for like a transient failure (connect_timeout_s), and its words are in the error.
_SERVER_REFUSALS = re.compile(
    r"FATAL:.*(?:password authentication failed|authentication failed for user|no password supplied"
    r"|database \".*\" does not exist|role \".*\" does not exist|no pg_hba\.conf entry"
    r"|is not permitted to log in|permission denied for database)",
    re.IGNORECASE,
)
# libpq's own words for an option value it cannot use (a port that is not a number)
_BAD_OPTION = re.compile(r"invalid (?:integer|connection option|sslmode|value)\b.*(?:option|value)", re.IGNORECASE)


def _probe_address(host: str, port: str, timeout_s: float = 2.0) -> str | None:
    """Why nothing can be reached at ``host``/``port`` (a TCP address, or a directory of
    Unix sockets), from the socket's own error class; None when something listens there."""
    try:
        if host.startswith("/"):
            path = os.path.join(host, f".s.PGSQL.{port or 5432}")
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(timeout_s)
                sock.connect(path)
        else:
            socket.create_connection((host, int(port or 5432)), timeout=timeout_s).close()
    except ConnectionRefusedError:
        return f"nothing listens on {host} port {port or 5432} (connection refused)"
    except FileNotFoundError:
        return f"no PostgreSQL socket in {host} (port {port or 5432})"
    except (OSError, ValueError):  # a timeout, an unreachable network: the pool waits it out
        return None
    return None


def _unresolved_host(dsn: str) -> str | None:
    """A host name of ``dsn`` that does not exist (``socket.gaierror``, not a resolver that
    is temporarily down); None when every name resolves now or the failure may pass."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return None
    for host in str(params.get("host") or "").split(","):
        if not host or host.startswith("/"):
            continue
        try:
            socket.getaddrinfo(host, None)
        except socket.gaierror as exc:
            if exc.errno != socket.EAI_AGAIN:
                return f"host name {host!r} does not resolve ({exc.strerror})"
        except OSError:
            continue
    return None


def connect_failure(exc: psycopg.Error, dsn: str) -> str | None:
    """Why the connection that raised ``exc`` cannot succeed by waiting (permanent), or None
    (transient: the server may be starting, overloaded, or the network slow)."""

    if isinstance(exc, psycopg.ProgrammingError):
        return "the DSN is malformed"
    if exc.sqlstate is not None and exc.sqlstate[:2] in ("28", "3D"):  # should psycopg give one
        return f"SQLSTATE {exc.sqlstate}"
    pgconn = exc.pgconn
    if pgconn is None:  # psycopg stopped before libpq: it resolves host names itself
        return _unresolved_host(dsn)
    if pgconn.needs_password:
        return "the server asks for a password and the DSN gives none"
    text = pgconn.error_message.decode("utf-8", "replace")
    if _SERVER_REFUSALS.search(" ".join(text.split())):
        return "the server refused the session"
    if _BAD_OPTION.search(text):
        return "an option of the DSN has an invalid value"
    host, port = (pgconn.host or b"").decode(), (pgconn.port or b"").decode()
    return _probe_address(host, port) if host else None


_PASSWORD = re.compile(r"""password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)""", re.IGNORECASE)


def dsn_secrets(dsn: str) -> list[str]:
    """The password of ``dsn`` (keyword or URI form) as it is written there: what no message
    may show."""

    found = [m.group(1).strip("'") for m in _PASSWORD.finditer(dsn)]
    if dsn.startswith(("postgresql://", "postgres://")):
        try:
            password = urlsplit(dsn).password
        except ValueError:
            password = None
        if password:
            found += [password, unquote(password)]
    return [s for s in found if s]


def scrub(message: str, dsn: str) -> str:
    """``message`` with the password of ``dsn`` replaced by ``****``."""
    for secret in sorted(dsn_secrets(dsn), key=len, reverse=True):
        message = message.replace(secret, "****")
    return message


def first_connection(dsn: str, kwargs: dict[str, Any]) -> str | None:
    """Try one connection. Raise :class:`DatabaseUnavailable` at once, naming the cause, when
    it cannot succeed by waiting (wrong password, user or database, a malformed DSN, a refused
    port, an unknown host); return a transient failure's cause (a timeout) for the pool to
    wait out. No message shows the DSN's password."""

    try:
        with psycopg.connect(dsn, **kwargs):
            return None
    except psycopg.ProgrammingError as exc:  # libpq could not parse it: its words may quote a password
        raise DatabaseUnavailable(
            "cannot connect to PostgreSQL: the DSN is malformed (not shown: it may hold a password); "
            "give postgresql://USER@HOST:PORT/DB or 'host=HOST port=PORT dbname=DB user=USER'"
        ) from None
    except psycopg.Error as exc:
        cause = scrub(" ".join(str(exc).split()), dsn)
        why = connect_failure(exc, dsn)
        if why is not None:
            raise DatabaseUnavailable(
                f"cannot connect to PostgreSQL: {cause} (not retried: {why}; check the DSN's host, port, "
                "user, password and database name)"
            ) from None
        return cause
