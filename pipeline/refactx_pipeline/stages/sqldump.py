"""A reader for MySQL dumps (``mysqldump`` output, ``.sql`` / ``.sql.gz``).

The column list comes from the dump's own ``CREATE TABLE`` (read on the driver
from the head of the file: it differs between years). Data lines are the long
``INSERT INTO `t` VALUES (...),(...);`` lines; Spark reads them as text and an
Arrow batch function (``mapInArrow``) splits them into rows with one compiled
regular expression per table (one match per row, values captured as groups).

Handled: quoted values with backslash escapes, ``NULL``, numbers, ``_binary``
prefixes, many rows per line, comment and ``/*!…*/`` / ``/*M!…*/`` lines
(ignored: they are not ``INSERT`` lines), a row with the wrong number of values
and a truncated last row (each a reject with its reason).
"""

from __future__ import annotations

import bz2
import gzip
import re
from typing import Callable, Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from refactx_index.errors import ConfigError

REASON = "_reason"  # null for a row, else why the text could not be read as a row
RAW = "_raw"  # the rejected text (at most MAX_RAW characters)
MAX_RAW = 10_000
HEADER_MAX_LINES = 2_000

_QUOTED = r"(?:_binary )?'[^'\\]*(?:\\.[^'\\]*)*'"
_BARE = r"[^,()'\s][^,()']*"  # NULL, numbers, 0x… literals
_VALUE = "(" + _QUOTED + "|" + _BARE + ")"
_ANY_ROW = re.compile(r"\((?:" + _QUOTED + "|" + _BARE + r")?(?:,(?:" + _QUOTED + "|" + _BARE + r"))*\)")
_MYSQL_ESCAPE = re.compile(r"\\(.)", re.S)
_MYSQL_SIMPLE = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}
_CREATE = re.compile(r"^CREATE TABLE `([^`]+)` \(")
_COLUMN = re.compile(r"^\s*`([^`]+)`\s")


def _open(path: str):
    if path.endswith(".gz"):
        return gzip.open(path, "rb")
    if path.endswith(".bz2"):
        return bz2.open(path, "rb")
    return open(path, "rb")


def read_create_table(path: str) -> tuple[str, list[str]]:
    """(table name, column names) from the ``CREATE TABLE`` at the head of a dump."""
    table, columns = None, []
    with _open(path) as fh:
        for number, raw in enumerate(fh):
            if number > HEADER_MAX_LINES or raw.startswith(b"INSERT INTO"):
                break
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if table is None:
                m = _CREATE.match(line)
                if m:
                    table = m.group(1)
                continue
            if line.startswith(")"):
                break
            m = _COLUMN.match(line)
            if m:
                columns.append(m.group(1))
    if table is None or not columns:
        raise ConfigError(f"{path}: no CREATE TABLE with columns in its first {HEADER_MAX_LINES} lines")
    return table, columns


def unescape_mysql(text: str) -> str:
    """A quoted MySQL value's content: ``\\n \\t \\r \\0 \\b \\Z`` and ``\\x`` -> ``x``."""
    if "\\" not in text:
        return text
    return _MYSQL_ESCAPE.sub(lambda m: _MYSQL_SIMPLE.get(m.group(1), m.group(1)), text)


def _value(token: str) -> str | None:
    if token.startswith("'"):
        return unescape_mysql(token[1:-1])
    if token.startswith("_binary '"):
        return unescape_mysql(token[9:-1])
    if token == "NULL":
        return None
    if token.startswith(("0x", "0X")):
        try:
            return bytes.fromhex(token[2:]).decode("utf-8", "replace")
        except ValueError:
            return token
    return token


def split_insert_line(line: str, table: str, width: int, row_re: re.Pattern | None = None):
    """Yield ``(values, None, None)`` per row of one INSERT line, or
    ``(None, reason, raw)`` for text that is not a row of ``width`` values."""
    row_re = row_re or _row_pattern(width)
    prefix = f"INSERT INTO `{table}` VALUES "
    if not line.startswith(prefix):
        yield None, "not_an_insert_into_table", line[:MAX_RAW]
        return
    pos, end = len(prefix), len(line.rstrip())
    while pos < end:
        m = row_re.match(line, pos)
        if m:
            yield [_value(tok) for tok in m.groups()], None, None
        else:
            m = _ANY_ROW.match(line, pos)
            if not m:
                yield None, "truncated_row", line[pos : pos + MAX_RAW]
                return
            yield None, "column_count", m.group(0)[:MAX_RAW]
        pos = m.end()
        sep = line[pos : pos + 1]
        if sep == ",":
            pos += 1
        elif sep == ";":
            return
        elif pos < end:
            yield None, "garbage_between_rows", line[pos : pos + MAX_RAW]
            return


def _row_pattern(width: int) -> re.Pattern:
    return re.compile(r"\(" + ",".join([_VALUE] * width) + r"\)")


def insert_line_splitter(table: str, columns: list[str]) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function for one table: binary ``value`` lines in,
    one record per row (all columns as strings) or per reject out."""
    width = len(columns)
    row_re = _row_pattern(width)
    names = list(columns) + [REASON, RAW]

    def split_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            out: list[list] = [[] for _ in names]
            for raw in batch.column(0).to_pylist():
                line = raw.decode("utf-8", "replace")
                for values, reason, text in split_insert_line(line, table, width, row_re):
                    if values is None:
                        values = [None] * width
                    for i, v in enumerate(values):
                        out[i].append(v)
                    out[width].append(reason)
                    out[width + 1].append(text)
            yield pa.RecordBatch.from_arrays([pa.array(c, pa.string()) for c in out], names=names)

    return split_batches


def table_schema(columns: list[str]) -> StructType:
    return StructType([StructField(c, StringType(), True) for c in columns + [REASON, RAW]])


def read_mysql_table(spark: SparkSession, path: str) -> tuple[str, DataFrame]:
    """(table name, DataFrame of its rows and rejects) for one dump file.

    Columns: the dump's columns (strings, None for NULL) plus ``_reason``/``_raw``
    (set only on reject records). Run it with a small
    ``spark.sql.execution.arrow.maxRecordsPerBatch``: each line holds ~1 MB."""
    table, columns = read_create_table(path)
    lines = spark.read.text(path).where(F.col("value").startswith("INSERT INTO ")).select(
        F.col("value").cast("binary").alias("value")
    )
    return table, lines.mapInArrow(insert_line_splitter(table, columns), table_schema(columns))
