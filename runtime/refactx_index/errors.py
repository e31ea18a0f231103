"""Exception hierarchy of refactx_index.

Modelled on psycopg's: one base class, a small tree below it, so callers can
catch exactly the outcome they care about (a missing index is not a lost
connection, and neither is a corrupt row).
"""

from __future__ import annotations


class RefactxError(Exception):
    """Base class of every error raised by refactx_index."""


class ConfigError(RefactxError):
    """The configuration is invalid or incomplete."""


class FormatError(RefactxError):
    """A stored row or subtree cannot be decoded (corrupt, truncated, unknown version)."""


class IndexNotFound(RefactxError):
    """No active build serves the requested index name."""


class UnknownIndex(IndexNotFound, KeyError):
    """A request named an index the engine or server does not serve; the message names the
    served ones. A ``KeyError`` too: a name looked up among the served indexes."""

    def __str__(self) -> str:  # KeyError's would quote the whole message
        return str(self.args[0]) if self.args else ""


class BuildRetired(IndexNotFound):
    """The build a lookup or a generation was reading was dropped (retention) under it.

    A plain lookup switches to the active build by itself; a generation in progress, which
    stays on one build, gets this error and should be retried (its new ``root()`` reads the
    active build). ``build_id``: the build that was dropped."""

    def __init__(self, message: str, *, build_id: int | None = None) -> None:
        super().__init__(message)
        self.build_id = build_id


class InputRefused(RefactxError, ValueError):
    """An input or argument is refused before any work: empty, malformed, outside the row
    format's bounds, or past a configured limit (the message names what is wrong, and a
    limit how to change it). A ``ValueError`` too, as the standard library would raise."""


class VocabularyMismatch(RefactxError):
    """The index was built for another tokenizer than the one supplied."""


class DatabaseUnavailable(RefactxError):
    """The database could not be reached, or the connection was lost and a retry failed."""


class QueryTimeout(RefactxError):
    """A lookup exceeded the configured statement timeout."""


class PermissionDenied(RefactxError):
    """The database role may not read the index (a grant is missing)."""


class DatabaseError(RefactxError):
    """Any other error the database reported; the message names its SQLSTATE."""

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate

