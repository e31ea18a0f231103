"""A team's own knowledge graph: its triples and labels read, checked and labelled once.

Both builds of a corporate graph follow these rules (the ``[graph]`` config section): the
in-process build (``graph/index.py``) runs this module's Python, the Spark stage ``graph``
(``graph/stage.py``) the same rules as DataFrame operations, and shares with it the parsers
of N-Triples lines and Turtle files (:func:`ntriples_record`, :func:`turtle_records`);
``tests/pipeline/test_graph.py`` checks that both give the same statements, labels and counts.

- **reading**: triples as CSV, TSV or Parquet (subject, predicate, object, optional
  datatype; an empty datatype makes the object an entity id), a labels table (id, label,
  optional description) and a predicate labels table (id, label); or N-Triples or Turtle
  whose ``rdfs:label`` and ``schema:description`` triples give the labels; or a graph whose
  names are its ids (format ``names``, :func:`names_record`). CSV as Spark's
  reader takes it with ``multiLine``: quoted fields, the quote escaped by ``graph.escape_char``
  (doubled by default, RFC 4180), delimiters and line breaks inside quotes; a byte order mark
  is skipped; blank lines are no rows. Input paths may be glob patterns, relative ones under
  ``graph.export_dir`` when it is set (:func:`input_paths`).
- **triples**, each kept or rejected with one reason, in this order: ``malformed_row``
  (wrong number of CSV fields, an N-Triples line that does not parse), ``malformed_id``
  (subject, predicate or entity object not matching ``graph.id_pattern``; a blank node),
  ``empty_value``, ``unknown_datatype``, ``denied_predicate``, ``not_in_allow_list``,
  ``unknown_predicate`` (no label in the predicate labels), ``duplicate`` (the same
  subject, predicate, object and kind again), then ``missing_label`` and
  ``ambiguous_label`` (the subject or entity object has no display label).
- **labels**, the rule of the Wikidata labels stage for graphs without Wikipedia titles:
  an entity's label when no other entity mentioned by a kept triple shares it, else
  ``label (description)``; when that still collides, or there is no description, the
  entity is dropped (``ambiguous_label``); an entity without a label row or with an
  empty label is dropped (``missing_label``). Labels are cleaned like facts (whitespace
  runs to one space, trimmed).

- **names** (``graph.format = "names"``, MetaQA's ``kb.txt``): one triple a line,
  ``subject|relation|object`` (``graph.delimiter``, default ``|``; a tab for a TSV of names),
  no header, no quoting; a line with another number of fields is ``malformed_row``, a blank
  line no row. A name is its entity's id and its label, and every object is an entity: one
  name is one entity (two films of one title, a name that is a film and a genre: their facts
  read as one entity's); names that differ only in case are different entities with
  different labels. Both are counted (``names``: ``entities``, ``differing_only_in_case``
  (entities whose lower-cased label another entity's lower-cased label equals),
  ``subject_and_object`` (entities that are the subject of a kept triple and the object of
  another)). Any non-blank name is a valid id (``graph.id_pattern`` is not applied); names
  whose labels collide once whitespace runs are made one space are ``ambiguous_label``, as
  any label. A relation is labelled by ``graph.relation_labels`` (``directed_by`` ->
  ``directed by``), else by its id with underscores as spaces.

Ids and datatypes are trimmed of ASCII whitespace, and ``graph.id_pattern`` is matched with
ASCII classes (``\\s``, ``\\d``, ``\\w``), whole: Python's ``re`` here and Java's regex in
Spark agree on it. Every row read is counted: ``triples_in == triples + rejected``.
Nothing here imports Spark.
"""

from __future__ import annotations

import codecs
import csv
import datetime as _dt
import decimal
import glob
import logging
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np

from refactx_index.errors import ConfigError

from refactx_pipeline.config import Config, GraphConfig
from refactx_pipeline.stages.render import ENTITY_PREFIX, clean_text

log = logging.getLogger(__name__)

RDF_FORMATS = ("ntriples", "turtle")  # labels from rdfs:label / schema:description triples
MAX_REJECT_LINE = 10_000

XSD = "http://www.w3.org/2001/XMLSchema#"
RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"
SCHEMA_DESCRIPTION = ("http://schema.org/description", "https://schema.org/description")

# a literal's datatype (lower case; xsd: and full IRIs reduced to the local name) -> object kind
_KINDS = {
    **dict.fromkeys(("string", "text", "langstring", "normalizedstring", "token"), "string"),
    **dict.fromkeys(("date", "datetime", "datetimestamp", "time"), "time"),
    **dict.fromkeys(("decimal", "integer", "int", "long", "short", "double", "float", "number", "quantity",
                     "nonnegativeinteger", "positiveinteger", "percent", "percentage"), "quantity"),
    **dict.fromkeys(("coordinate", "point", "wktliteral"), "coordinate"),
}
_ITEM_DATATYPES = ("", "id", "item", "entity", "iri")

# the reasons, in the order the rules apply (and the counts list them)
TRIPLE_REASONS = ("malformed_row", "malformed_id", "empty_value", "unknown_datatype", "denied_predicate",
                  "not_in_allow_list", "unknown_predicate", "duplicate", "missing_label", "ambiguous_label")


def object_kind(datatype: str) -> str | None:
    """The STATEMENTS object kind of a datatype as written in a triples table or an N-Triples
    literal (``""``: an entity id, ``item``); None for a datatype no rule renders."""
    name = strip_ascii(datatype)
    if name.startswith(XSD):
        name = name[len(XSD):]
    elif name.startswith(RDF):
        name = name[len(RDF):]
    elif name.startswith("http://www.opengis.net/ont/geosparql#"):
        name = name.rsplit("#", 1)[1]
    name = name.lower().removeprefix("xsd:").removeprefix("rdf:").removeprefix("geo:")
    if name in _ITEM_DATATYPES:
        return "item"
    return _KINDS.get(name)


# ---------------------------------------------------------------- what reading gives


@dataclass(frozen=True)
class RawTriple:
    source: str  # file name
    line: str  # the row as read (for rejects)
    subject: str
    predicate: str
    object: str
    datatype: str  # "" for an entity object


@dataclass
class RawGraph:
    """Rows as read, before the rules; ``rejects`` holds rows that could not be read as rows."""

    triples: list[RawTriple] = field(default_factory=list)
    labels: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (label, description)
    predicate_labels: dict[str, str] = field(default_factory=dict)
    rejects: list[tuple[str, str, str]] = field(default_factory=list)  # (source, line, reason)
    label_rows: Counter = field(default_factory=Counter)  # label rows by outcome
    skipped: Counter = field(default_factory=Counter)  # rows that are no data (blank lines, comments)


@dataclass(frozen=True)
class Statement:
    subject: str  # entity id as in the input
    predicate: str
    kind: str  # item | string | time | quantity | coordinate
    object: str  # entity id (item) or the literal's text


@dataclass
class Graph:
    """A graph after the rules: kept statements, one display label per entity they mention."""

    statements: list[Statement]
    labels: dict[str, tuple[str, str]]  # entity -> (display label, label_source)
    descriptions: dict[str, str]  # entity -> description as read (labelled entities only)
    predicate_labels: dict[str, str]  # predicate -> cleaned label
    rejects: list[tuple[str, str, str]]
    counts: dict[str, Any]


# ---------------------------------------------------------------- reading

ASCII_SPACE = " \t\n\r\f\v"  # what Java's \s and Python's ASCII \s match; ids are trimmed of it


def strip_ascii(text: str) -> str:
    return text.strip(ASCII_SPACE)


# format names: a name is an id when it is not blank (ids are trimmed before the check)
NAMES_ID_PATTERN = r"[\s\S]+"


def id_pattern(gcfg: GraphConfig) -> str:
    """The pattern a valid id matches whole: ``graph.id_pattern``, any non-blank text for ``names``."""
    return NAMES_ID_PATTERN if gcfg.format == "names" else gcfg.id_pattern


def id_matcher(gcfg: GraphConfig):
    """``fullmatch`` of :func:`id_pattern` with ASCII classes (as Java's regex in Spark)."""
    return re.compile(id_pattern(gcfg), re.ASCII).fullmatch


def names_delimiter(gcfg: GraphConfig) -> str:
    return gcfg.delimiter or "|"


def relation_label(gcfg: GraphConfig, relation: str) -> str:
    """A ``names`` relation's label: ``graph.relation_labels``, else the id with ``_`` as spaces."""
    return gcfg.relation_labels.get(relation) or relation.replace("_", " ")


def names_record(line: str, delimiter: str) -> tuple[str, str, str] | None:
    """(subject, relation, object) of one line of a ``names`` file, trimmed; None for a line
    with another number of fields than three."""
    fields = line.split(delimiter)
    if len(fields) != 3:
        return None
    return strip_ascii(fields[0]), strip_ascii(fields[1]), strip_ascii(fields[2])


def has_scheme(path: str) -> bool:
    """A URI (``hdfs://…``, ``s3a://…``, ``file:/…``) rather than a local path."""
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:/", path) is not None


def _under_export(gcfg: GraphConfig, path: str) -> str:
    if not gcfg.export_dir or has_scheme(path) or Path(path).is_absolute():
        return path
    if has_scheme(gcfg.export_dir):
        return gcfg.export_dir.rstrip("/") + "/" + path
    return str(Path(gcfg.export_dir) / path)


def _expand(pattern: str, key: str, local_only: bool) -> list[str]:
    """A local path, or the sorted files a glob pattern matches (ConfigError: none); a URI is
    left to Spark (``local_only``: refused, the in-process build reads local files)."""
    if has_scheme(pattern):
        if local_only:
            raise ConfigError(f"{key} {pattern!r}: the in-process build reads local files only")
        return [pattern]
    if glob.has_magic(pattern):
        found = sorted(p for p in glob.glob(pattern) if Path(p).is_file())
        if not found:
            raise ConfigError(f"{key} {pattern!r} matches no file")
        return found
    if not Path(pattern).is_file():
        raise ConfigError(f"graph input {pattern} is not a file ({key})")
    return [pattern]


@dataclass(frozen=True)
class GraphInputs:
    triples: tuple[str, ...]
    labels: tuple[str, ...]  # empty for N-Triples/Turtle without a separate labels file
    predicate_labels: tuple[str, ...]

    def rdf_files(self) -> tuple[str, ...]:
        """N-Triples/Turtle: every file, labels after triples (the order of 'first' terms)."""
        return (*self.triples, *self.labels, *self.predicate_labels)


def input_paths(gcfg: GraphConfig, local_only: bool = True) -> GraphInputs:
    """The input files of ``gcfg``: relative paths under ``graph.export_dir`` when set, glob
    patterns expanded (sorted), each checked to exist (a URI is Spark's to resolve)."""
    def files(values: Sequence[str], key: str) -> tuple[str, ...]:
        return tuple(f for v in values if v for f in _expand(_under_export(gcfg, v), key, local_only))

    return GraphInputs(files(gcfg.triples, "graph.triples"), files([gcfg.labels], "graph.labels"),
                       files([gcfg.predicate_labels], "graph.predicate_labels"))


def _open_text(path: str, encoding: str):
    """A text stream of ``path`` in ``encoding``, its byte order mark skipped."""
    if codecs.lookup(encoding).name == "utf-8":
        encoding = "utf-8-sig"
    return open(path, encoding=encoding, newline="")


def java_double(value: float, single: bool = False) -> str:
    """``value`` as Spark casts a double (a float: ``single``) to a string, Java's
    ``Double.toString``: plain from 1e-3 up to 1e7, else ``d.dddE±n``; the shortest digits."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    number = decimal.Decimal(np.format_float_scientific(np.float32(value), unique=True) if single else repr(value))
    sign, number = ("-" if number < 0 else ""), abs(number)
    if decimal.Decimal("0.001") <= number < decimal.Decimal(10_000_000):
        text = format(number.normalize(), "f")
        return sign + (text if "." in text else text + ".0")
    digits = number.as_tuple().digits
    tail = "".join(map(str, digits[1:])).rstrip("0") or "0"
    return f"{sign}{digits[0]}.{tail}E{number.adjusted()}"


def parquet_text(value: Any, arrow_type: Any = None) -> str:
    """A Parquet value as text the way the Spark stage casts it: integers and decimals as
    written, doubles as Java writes them, dates ISO, timestamps ``YYYY-MM-DDTHH:MM:SS`` (UTC),
    booleans ``true``/``false``, null empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        import pyarrow as pa

        return java_double(value, single=arrow_type is not None and pa.types.is_float32(arrow_type))
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.timezone.utc)
        return value.strftime("%Y-%m-%dT%H:%M:%S")
    if isinstance(value, _dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def csv_dialect(gcfg: GraphConfig) -> dict[str, Any]:
    """Python ``csv`` arguments reading like Spark's CSV reader with this config."""
    delimiter = gcfg.delimiter or ("\t" if gcfg.format == "tsv" else ",")
    doubled = gcfg.escape_char == gcfg.quote_char
    return {"delimiter": delimiter, "quotechar": gcfg.quote_char, "doublequote": doubled,
            "escapechar": None if doubled else gcfg.escape_char, "strict": False}


def clean_header(names: Sequence[str]) -> list[str]:
    """Column names as written, a byte order mark and surrounding ASCII blanks removed."""
    return [strip_ascii(name.lstrip("\ufeff")) for name in names]


def read_table(path: str, gcfg: GraphConfig, required: Sequence[str], optional: Sequence[str] = (),
               ) -> Iterator[tuple[str, dict[str, str] | None]]:
    """``(raw row text, {column: value})`` per row of a CSV, TSV or Parquet table; the mapping
    is None for a row with the wrong number of fields. Columns named in ``required`` must be
    in the header (else a ConfigError naming the file); ``optional`` ones may be absent."""
    if gcfg.format == "parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        missing = [c for c in required if c not in table.column_names]
        if missing:
            raise ConfigError(f"{path}: no column {', '.join(map(repr, missing))} (columns: {table.column_names})")
        names = [c for c in (*required, *optional) if c in table.column_names]
        columns = {c: (table.column(c).to_pylist(), table.schema.field(c).type) for c in names}
        for i in range(table.num_rows):
            row = {c: parquet_text(values[i], kind) for c, (values, kind) in columns.items()}
            yield "\t".join(row.values()), row
        return
    dialect = csv_dialect(gcfg)
    try:
        with _open_text(path, gcfg.encoding) as fh:
            reader = csv.reader(fh, **dialect)
            header = next(reader, None)
            if header is None:
                raise ConfigError(f"{path}: empty file (a header row is needed)")
            header = clean_header(header)
            missing = [c for c in required if c not in header]
            if missing:
                raise ConfigError(f"{path}: no column {', '.join(map(repr, missing))} in the header {header} "
                                  f"(delimiter {dialect['delimiter']!r}; see graph.*_column)")
            wanted = [(c, header.index(c)) for c in (*required, *optional) if c in header]
            for fields in reader:
                if not fields or (len(fields) == 1 and not strip_ascii(fields[0])):
                    continue  # a blank line is no row (Spark's reader skips it too)
                text = dialect["delimiter"].join(fields)
                if len(fields) != len(header):
                    yield text, None
                else:
                    yield text, {c: fields[i] for c, i in wanted}
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid {gcfg.encoding} text ({exc.reason} at byte {exc.start}); "
                          "set graph.encoding") from None
    except csv.Error as exc:
        raise ConfigError(f"{path}: unreadable as {gcfg.format.upper()}: {exc}") from None


def _read_tables(gcfg: GraphConfig, inputs: GraphInputs, raw: RawGraph) -> None:
    cols = gcfg
    for path in inputs.triples:
        source = Path(path).name
        for text, row in read_table(path, gcfg, (cols.subject_column, cols.predicate_column, cols.object_column),
                                    (cols.datatype_column,)):
            if row is None:
                raw.rejects.append((source, text, "malformed_row"))
            else:
                raw.triples.append(RawTriple(source, text, strip_ascii(row[cols.subject_column]),
                                             strip_ascii(row[cols.predicate_column]), row[cols.object_column],
                                             strip_ascii(row.get(cols.datatype_column, ""))))
    id_ok = id_matcher(gcfg)
    for path in inputs.labels:
        for text, row in read_table(path, gcfg, (cols.id_column, cols.label_column), (cols.description_column,)):
            _add_label(raw, raw.labels, row, (row or {}).get(cols.label_column, ""),
                       (row or {}).get(cols.description_column, ""), gcfg, id_ok)
    for path in inputs.predicate_labels:
        for text, row in read_table(path, gcfg, (cols.id_column, cols.label_column)):
            _add_label(raw, raw.predicate_labels, row, (row or {}).get(cols.label_column, ""), None, gcfg, id_ok)


def _read_names(gcfg: GraphConfig, inputs: GraphInputs, raw: RawGraph) -> None:
    """A ``names`` graph: every name its own label, every relation labelled by ``relation_label``."""
    delimiter = names_delimiter(gcfg)
    for path in inputs.triples:
        source = Path(path).name
        try:
            # universal newlines: lines end at \n, \r\n or \r, as Hadoop's line reader splits them
            with open(path, encoding="utf-8-sig", newline=None) as fh:
                for line in fh:
                    line = line.rstrip("\n")
                    if not strip_ascii(line):
                        continue  # a blank line is no row
                    record = names_record(line, delimiter)
                    if record is None:
                        raw.rejects.append((source, line[:MAX_REJECT_LINE], "malformed_row"))
                        continue
                    subject, relation, obj = record
                    raw.triples.append(RawTriple(source, line, subject, relation, obj, ""))
                    for name in (subject, obj):
                        if name and name not in raw.labels:
                            raw.labels[name] = (name, "")
                    if relation:
                        raw.predicate_labels.setdefault(relation, relation_label(gcfg, relation))
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not valid UTF-8 ({exc.reason}); a names file is UTF-8 text") from None


def names_counts(statements: Sequence[Statement], labels: dict[str, tuple[str, str]]) -> dict[str, int]:
    """The ``names`` counts of the module docstring over the kept statements and their labels."""
    lowered = Counter(label.lower() for label, _ in labels.values())
    subjects = {s.subject for s in statements}
    objects = {s.object for s in statements}
    return {"entities": len(labels),
            "differing_only_in_case": sum(1 for label, _ in labels.values() if lowered[label.lower()] > 1),
            "subject_and_object": len(subjects & objects)}


def _add_label(raw: RawGraph, into: dict, row: dict | None, label: str, description: str | None,
               gcfg: GraphConfig, id_ok) -> None:
    """One labels-table row: counted as kept, or by why it is not (``LABEL_OUTCOMES``)."""
    if row is None:
        raw.label_rows["malformed_row"] += 1
        return
    ident = strip_ascii(row[gcfg.id_column])
    if ident in into:
        raw.label_rows["duplicate"] += 1
    elif not id_ok(ident):
        raw.label_rows["malformed_id"] += 1
    elif not clean_text(label):
        raw.label_rows["empty_label"] += 1
    else:
        into[ident] = label if description is None else (label, description)
        raw.label_rows["kept"] += 1


# ---------------------------------------------------------------- N-Triples and Turtle


class RdfRecord(NamedTuple):
    """What one N-Triples line or one Turtle triple gives, in both builds.

    ``kind``: ``triple`` (subject, predicate, object, datatype: "" for an entity object),
    ``label`` / ``description`` (subject, object = the text, lang), ``reject`` or ``skip``
    (``reason``), or ``error`` (a file that cannot be read: ``reason`` says why)."""

    kind: str
    reason: str = ""
    subject: str = ""
    predicate: str = ""
    object: str = ""
    datatype: str = ""
    lang: str = ""
    line: str = ""


_IRI = r"<([^<>\"{}|^`\\\x00-\x20]*)>"
_LITERAL = r'"((?:[^"\\\n\r]|\\.)*)"(?:@([A-Za-z]+(?:-[A-Za-z0-9]+)*)|\^\^' + _IRI + r")?"
_NT_LINE = re.compile(r"^[ \t]*(?:" + _IRI + r"|(_:\S+))[ \t]+" + _IRI + r"[ \t]+(?:" + _IRI + r"|(_:\S+)|"
                      + _LITERAL + r")[ \t]*\.[ \t]*(?:#.*)?$")
_ESCAPE = re.compile(r"\\(?:([tbnrf\"'\\])|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8}))")
_ESCAPES = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'", "\\": "\\"}


def _unescape(text: str) -> str:
    def one(m: re.Match) -> str:
        if m.group(1):
            return _ESCAPES[m.group(1)]
        code = int(m.group(2) or m.group(3), 16)
        return chr(code) if code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else "\ufffd"

    return _ESCAPE.sub(one, text)


def _local(namespace: str, iri: str) -> str:
    return iri[len(namespace):] if namespace and iri.startswith(namespace) else iri


def _rdf_record(namespace: str, subject: str | None, predicate: str, obj: str | None, literal: str | None,
                lang: str | None, datatype: str | None, line: str) -> RdfRecord:
    """The record of one parsed triple (``subject``/``obj`` None: a blank node)."""
    if subject is None or (obj is None and literal is None):  # a blank node has no id a label can name
        return RdfRecord("reject", "malformed_id", line=line)
    subject = _local(namespace, subject)
    if predicate == RDFS_LABEL or predicate in SCHEMA_DESCRIPTION:
        kind = "label" if predicate == RDFS_LABEL else "description"
        if literal is None:
            return RdfRecord("skip", f"{kind}_not_a_literal", line=line)
        return RdfRecord(kind, subject=subject, object=literal, lang=(lang or "").lower(), line=line)
    if literal is not None:
        return RdfRecord("triple", subject=subject, predicate=_local(namespace, predicate), object=literal,
                         datatype=datatype or "string", line=line)
    return RdfRecord("triple", subject=subject, predicate=_local(namespace, predicate),
                     object=_local(namespace, obj), line=line)


def ntriples_record(line: str, namespace: str) -> RdfRecord:
    """One N-Triples line (a leading byte order mark skipped) as a record."""
    line = line.lstrip("\ufeff")
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return RdfRecord("skip", "blank_or_comment", line=line)
    m = _NT_LINE.match(line)
    if m is None:
        return RdfRecord("reject", "malformed_row", line=line)
    s_iri, _s_bnode, pred, o_iri, _o_bnode, lit, lang, dtype = m.groups()
    return _rdf_record(namespace, s_iri, pred, o_iri, None if lit is None else _unescape(lit), lang, dtype, line)


def _nt_term(term: Any) -> str:
    return term.n3() if hasattr(term, "n3") else str(term)


def turtle_records(data: bytes, source: str, namespace: str) -> Iterator[RdfRecord]:
    """The records of one Turtle file, every triple in the order written, duplicates too;
    literals keep their lexical form. A file that does not parse gives one ``error`` record
    (Turtle cannot be resumed after a syntax error): the build stops, naming the file."""
    import rdflib
    from rdflib.term import BNode, Literal

    class _Collect(rdflib.Graph):  # the parser's sink: keeps every triple, in order
        def __init__(self) -> None:
            super().__init__()
            self.read: list[tuple[Any, Any, Any]] = []

        def add(self, triple):  # noqa: D401 - rdflib's sink interface
            self.read.append(triple)
            return self

    sink = _Collect()
    normalize = rdflib.NORMALIZE_LITERALS
    rdflib.NORMALIZE_LITERALS = False  # "01.50"^^xsd:decimal stays 01.50, as in a CSV export
    try:
        sink.parse(data=data.decode("utf-8-sig"), format="turtle", publicID=namespace or None)
    except UnicodeDecodeError as exc:
        yield RdfRecord("error", f"{source}: not valid UTF-8 ({exc.reason} at byte {exc.start})")
        return
    except Exception as exc:  # rdflib's BadSyntax and the errors its term constructors raise
        message = re.sub(r" of <[^>]*>", "", " ".join(str(exc).split(" at ^ in:")[0].split()))
        yield RdfRecord("error", f"{source}: not valid Turtle: {message[:500]}")
        return
    finally:
        rdflib.NORMALIZE_LITERALS = normalize
    for s, p, o in sink.read:
        line = f"{_nt_term(s)} {_nt_term(p)} {_nt_term(o)} ."
        if isinstance(o, Literal):
            datatype = str(o.datatype) if o.datatype is not None else None
            yield _rdf_record(namespace, None if isinstance(s, BNode) else str(s), str(p), None, str(o),
                              o.language, datatype, line)
        else:
            yield _rdf_record(namespace, None if isinstance(s, BNode) else str(s), str(p),
                              None if isinstance(o, BNode) else str(o), None, None, None, line)


def _file_records(path: str, fmt: str, namespace: str) -> Iterator[RdfRecord]:
    if fmt == "turtle":
        yield from turtle_records(Path(path).read_bytes(), Path(path).name, namespace)
        return
    try:
        # universal newlines: lines end at \\n, \\r\\n or \\r, as Hadoop's line reader splits them
        with open(path, encoding="utf-8-sig", newline=None) as fh:
            for line in fh:
                yield ntriples_record(line.rstrip("\n"), namespace)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid UTF-8 ({exc.reason}); N-Triples is UTF-8 text") from None


def term_rank(lang: str, languages: Sequence[str]) -> int:
    """0 for an untagged term, 1 + the index of its language in ``filter.languages``, -1 for
    another language (skipped)."""
    if not lang:
        return 0
    return languages.index(lang) + 1 if lang in languages else -1


def _read_rdf(gcfg: GraphConfig, inputs: GraphInputs, languages: Sequence[str], raw: RawGraph) -> None:
    """Triples, labels and descriptions of every N-Triples/Turtle file; of a subject's labels
    (descriptions), the untagged one or the earliest language of ``filter.languages`` wins,
    the first written among equals."""
    languages = [lang.lower() for lang in languages]
    terms: dict[tuple[str, str], tuple[int, str]] = {}  # (id, label|description) -> (rank, value)
    for path in inputs.rdf_files():
        source = Path(path).name
        for rec in _file_records(path, gcfg.format, gcfg.namespace):
            if rec.kind == "error":
                raise ConfigError(rec.reason)
            if rec.kind == "skip":
                raw.skipped[rec.reason] += 1
            elif rec.kind == "reject":
                raw.rejects.append((source, rec.line, rec.reason))
            elif rec.kind == "triple":
                raw.triples.append(RawTriple(source, rec.line, rec.subject, rec.predicate, rec.object, rec.datatype))
            else:
                rank = term_rank(rec.lang, languages)
                if rank < 0:
                    raw.skipped["other_language"] += 1
                    continue
                key = (rec.subject, rec.kind)
                if key not in terms or rank < terms[key][0]:
                    terms[key] = (rank, rec.object)
    predicates = {t.predicate for t in raw.triples}
    for (ident, kind), (_, value) in sorted(terms.items()):
        if kind != "label":
            continue
        if not clean_text(value):
            raw.label_rows["empty_label"] += 1
            continue
        raw.label_rows["kept"] += 1
        if ident in predicates:
            raw.predicate_labels[ident] = value
        raw.labels[ident] = (value, terms.get((ident, "description"), (0, ""))[1])


def read_graph(cfg: Config) -> RawGraph:
    """Every row of the configured graph inputs (``cfg.graph``), not yet checked."""
    gcfg = cfg.graph
    if not gcfg.format:
        raise ConfigError("graph.format is empty: no graph to read (set graph.format and graph.triples)")
    inputs = input_paths(gcfg)
    raw = RawGraph()
    if gcfg.format in RDF_FORMATS:
        _read_rdf(gcfg, inputs, cfg.filter.languages, raw)
    elif gcfg.format == "names":
        _read_names(gcfg, inputs, raw)
    else:
        _read_tables(gcfg, inputs, raw)
    return raw


# ---------------------------------------------------------------- the rules


def display_labels(entities: Sequence[str], labels: dict[str, tuple[str, str]]
                   ) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """(entity -> (display label, source), dropped entity -> reason) by the label rule of the
    module docstring, for ``entities`` (each once, in a deterministic order)."""
    dropped: dict[str, str] = {}
    base: dict[str, str] = {}
    for entity in entities:
        label = clean_text(labels[entity][0]) if entity in labels else ""
        if label:
            base[entity] = label
        else:
            dropped[entity] = "missing_label"
    shared = Counter(base.values())
    chosen: dict[str, tuple[str, str]] = {}
    for entity, label in base.items():
        if shared[label] == 1:
            chosen[entity] = (label, "label")
            continue
        description = clean_text(labels[entity][1])
        if description:
            chosen[entity] = (f"{label} ({description})", "label_description")
        else:
            dropped[entity] = "ambiguous_label"
    final = Counter(label for label, _ in chosen.values())
    for entity in [e for e, (label, _) in chosen.items() if final[label] > 1]:
        del chosen[entity]
        dropped[entity] = "ambiguous_label"
    return chosen, dropped


def resolve_graph(raw: RawGraph, gcfg: GraphConfig) -> Graph:
    """Apply the rules of the module docstring to ``raw``: statements kept, every other row
    counted by its reason."""
    id_ok = id_matcher(gcfg)
    deny, allow = set(gcfg.deny_predicates), set(gcfg.allow_predicates)
    predicate_labels = {p: clean_text(label) for p, label in raw.predicate_labels.items()}
    rejects = list(raw.rejects)
    seen: set[tuple[str, str, str, str]] = set()
    candidates: list[tuple[RawTriple, Statement]] = []
    for t in raw.triples:
        kind = object_kind(t.datatype)
        reason = None
        if not id_ok(t.subject) or not id_ok(t.predicate):
            reason = "malformed_id"
        elif not clean_text(t.object):
            reason = "empty_value"
        elif kind is None:
            reason = "unknown_datatype"
        elif kind == "item" and not id_ok(strip_ascii(t.object)):
            reason = "malformed_id"
        elif t.predicate in deny:
            reason = "denied_predicate"
        elif allow and t.predicate not in allow:
            reason = "not_in_allow_list"
        elif not predicate_labels.get(t.predicate):
            reason = "unknown_predicate"
        else:
            obj = strip_ascii(t.object) if kind == "item" else t.object
            key = (t.subject, t.predicate, kind, obj)
            if key in seen:
                reason = "duplicate"
            else:
                seen.add(key)
                candidates.append((t, Statement(t.subject, t.predicate, kind, obj)))
        if reason:
            rejects.append((t.source, t.line, reason))
    mentioned = list(dict.fromkeys(e for _, s in candidates
                                   for e in ((s.subject, s.object) if s.kind == "item" else (s.subject,))))
    labels, dropped = display_labels(mentioned, raw.labels)
    statements: list[Statement] = []
    for t, s in candidates:
        missing = dropped.get(s.subject) or (dropped.get(s.object) if s.kind == "item" else None)
        if missing:
            rejects.append((t.source, t.line, missing))
        else:
            statements.append(s)
    by_reason = Counter(reason for _, _, reason in rejects)
    triples_in = len(raw.triples) + sum(1 for r in raw.rejects)
    if triples_in != len(statements) + len(rejects):  # a rule lost a row: a bug, not bad input
        raise RuntimeError(f"read {triples_in} triples but kept {len(statements)} and rejected {len(rejects)}")
    counts: dict[str, Any] = {
        "triples_in": triples_in,
        "triples": len(statements),
        "rejected": len(rejects),
        "rejected_by_reason": {r: by_reason[r] for r in TRIPLE_REASONS if by_reason[r]},
        "skipped_by_reason": dict(sorted(raw.skipped.items())),
        "label_rows_by_outcome": dict(sorted(raw.label_rows.items())),
        "predicates": len({s.predicate for s in statements}),
        "entities": len(labels),
        "labels_by_source": dict(sorted(Counter(src for _, src in labels.values()).items())),
        "entities_dropped_by_reason": dict(sorted(Counter(dropped.values()).items())),
    }
    if gcfg.format == "names":
        counts["names"] = names_counts(statements, labels)
    descriptions = {e: raw.labels[e][1] for e in labels if raw.labels[e][1]}
    return Graph(statements, labels, descriptions, predicate_labels, rejects, counts)


def load_graph(cfg: Config) -> Graph:
    """Read and resolve the configured graph (what both builds start from)."""
    graph = resolve_graph(read_graph(cfg), cfg.graph)
    log.info("graph: %s", graph.counts)
    return graph
