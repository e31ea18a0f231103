"""A failure of a command as one line a user can act on (the traceback only with ``-v``)."""

from __future__ import annotations

import re

from refactx_index.errors import RefactxError

# Java exceptions that say what went wrong with an input file (Spark wraps them deeply)
_JAVA_CAUSE = re.compile(r"(?:Caused by: )?((?:java|org\.apache\.hadoop)\.[\w.$]+(?:Exception|Error)(?:: [^\n]*)?)")
_READ_FILE = re.compile(r"reading file (\S+?)\.?(?:\s|$)")


def describe_failure(exc: BaseException) -> str | None:
    """A one-line account of a failure a user can act on, or None for a bug (traceback).

    Refactx errors are already that; a Spark job that died reading an input (a truncated or
    corrupt compressed dump, an unreadable file) names the file and the Java cause; a file
    that cannot be opened (a missing enwiki SQL dump or index file) is named with the reason;
    a database that refuses names the server (password masked)."""
    if isinstance(exc, RefactxError):
        return str(exc)
    import psycopg

    if isinstance(exc, psycopg.OperationalError):
        return f"PostgreSQL refused: {redact_text(str(exc).strip())}"
    if isinstance(exc, OSError) and exc.filename is not None:  # an input path given by the user
        return f"cannot read {exc.filename}: {exc.strerror or exc}"
    if type(exc).__module__.startswith(("pyspark", "py4j")):
        text = str(exc)
        causes = _JAVA_CAUSE.findall(text)
        files = _READ_FILE.findall(text)
        where = f"reading {files[0]} failed" if files else "a Spark job failed"
        cause = causes[-1].strip() if causes else text.strip().splitlines()[0][:500]
        return f"{where}: {cause} (run with -v for the whole trace)"
    return None


def redact_text(text: str) -> str:
    """``text`` with any password in a DSN (URL or key=value form) masked."""
    text = re.sub(r"(postgres(?:ql)?://[^:/@\s]*:)[^@\s]*@", r"\1****@", text)
    return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1****", text)
