"""A team's own knowledge graph: its triples and labels read, checked and labelled once.

Both builds of a corporate graph start here (the ``[graph]`` config section): the Spark
stage ``graph`` (``graph_stage.py``) writes what this module returns as the parse and
labels stages' datasets, and the in-process build (``graph_index.py``) verbalizes it
directly. The rules therefore exist once:

- **reading**: triples as CSV, TSV or Parquet (subject, predicate, object, optional
  datatype; an empty datatype makes the object an entity id), a labels table (id, label,
  optional description) and a predicate labels table (id, label); or N-Triples whose
  ``rdfs:label`` and ``schema:description`` lines give the labels. CSV follows RFC 4180 as
  Python's ``csv`` reads it: quoted fields, doubled quotes, delimiters and line breaks
  inside quotes; a byte order mark is skipped.
- **triples**, each kept or rejected with one reason, in this order: ``malformed_row``
  (wrong number of CSV fields, an N-Triples line that does not parse), ``malformed_id``
  (subject, predicate or entity object not matching ``graph.id_pattern``),
  ``empty_value``, ``unknown_datatype``, ``denied_predicate``, ``not_in_allow_list``,
  ``unknown_predicate`` (no label in the predicate labels), ``duplicate`` (the same
  subject, predicate, object and datatype again), then ``missing_label`` and
  ``ambiguous_label`` (the subject or entity object has no display label).
- **labels**, the rule of the Wikidata labels stage for graphs without Wikipedia titles:
  an entity's label when no other entity mentioned by a kept triple shares it, else
  ``label (description)``; when that still collides, or there is no description, the
  entity is dropped (``ambiguous_label``); an entity without a label row or with an
  empty label is dropped (``missing_label``). Labels are cleaned like facts (whitespace
  runs to one space, trimmed).

Every row read is counted: ``triples_in == triples + rejected``. Nothing here imports Spark.
"""

from __future__ import annotations

import codecs
import csv
import datetime as _dt
import decimal
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from refactx_index.errors import ConfigError

from refactx_pipeline.config import Config, GraphConfig
from refactx_pipeline.render import clean_text

log = logging.getLogger(__name__)

# the prefix of entity ids in the parse/labels datasets of a graph build: verbalize reads a
# label of an id starting with "P" as a property label, and a graph's ids are free-form
ENTITY_PREFIX = "E:"
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
    name = datatype.strip()
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


def _open_text(path: Path, encoding: str):
    """A text stream of ``path`` in ``encoding``, its byte order mark skipped."""
    if codecs.lookup(encoding).name == "utf-8":
        encoding = "utf-8-sig"
    return open(path, encoding=encoding, newline="")


def _cell(value: Any) -> str:
    """A Parquet value as text: numbers as written, dates in ISO 8601, null as empty."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    return str(value)


def read_table(path: str, gcfg: GraphConfig, required: Sequence[str], optional: Sequence[str] = (),
               ) -> Iterator[tuple[str, dict[str, str] | None]]:
    """``(raw row text, {column: value})`` per row of a CSV, TSV or Parquet table; the mapping
    is None for a row with the wrong number of fields. Columns named in ``required`` must be
    in the header (else a ConfigError naming the file); ``optional`` ones may be absent."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"graph input {path} is not a file")
    if gcfg.format == "parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(file)
        missing = [c for c in required if c not in table.column_names]
        if missing:
            raise ConfigError(f"{path}: no column {', '.join(map(repr, missing))} (columns: {table.column_names})")
        names = [c for c in (*required, *optional) if c in table.column_names]
        columns = {c: table.column(c).to_pylist() for c in names}
        for i in range(table.num_rows):
            row = {c: _cell(columns[c][i]) for c in names}
            yield "\t".join(row.values()), row
        return
    delimiter = gcfg.delimiter or ("\t" if gcfg.format == "tsv" else ",")
    try:
        with _open_text(file, gcfg.encoding) as fh:
            reader = csv.reader(fh, delimiter=delimiter, quotechar=gcfg.quote_char, strict=False)
            header = next(reader, None)
            if header is None:
                raise ConfigError(f"{path}: empty file (a header row is needed)")
            header = [h.strip().lstrip("\ufeff") for h in header]
            missing = [c for c in required if c not in header]
            if missing:
                raise ConfigError(f"{path}: no column {', '.join(map(repr, missing))} in the header {header} "
                                  f"(delimiter {delimiter!r}; see graph.*_column)")
            wanted = [(c, header.index(c)) for c in (*required, *optional) if c in header]
            for fields in reader:
                text = delimiter.join(fields)
                if not fields or (len(fields) == 1 and not fields[0].strip()):
                    yield text, {}
                elif len(fields) != len(header):
                    yield text, None
                else:
                    yield text, {c: fields[i] for c, i in wanted}
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid {gcfg.encoding} text ({exc.reason} at byte {exc.start}); "
                          "set graph.encoding") from None
    except csv.Error as exc:
        raise ConfigError(f"{path}: unreadable as {gcfg.format.upper()}: {exc}") from None


def _read_tables(gcfg: GraphConfig, raw: RawGraph) -> None:
    cols = gcfg
    for path in gcfg.triples:
        source = Path(path).name
        for text, row in read_table(path, gcfg, (cols.subject_column, cols.predicate_column, cols.object_column),
                                    (cols.datatype_column,)):
            if row == {}:
                raw.skipped["blank_line"] += 1
            elif row is None:
                raw.rejects.append((source, text, "malformed_row"))
            else:
                raw.triples.append(RawTriple(source, text, row[cols.subject_column].strip(),
                                             row[cols.predicate_column].strip(), row[cols.object_column],
                                             row.get(cols.datatype_column, "").strip()))
    for text, row in read_table(gcfg.labels, gcfg, (cols.id_column, cols.label_column), (cols.description_column,)):
        _add_label(raw, raw.labels, row, (row or {}).get(cols.label_column, ""),
                   (row or {}).get(cols.description_column, ""), gcfg)
    for text, row in read_table(gcfg.predicate_labels, gcfg, (cols.id_column, cols.label_column)):
        _add_label(raw, raw.predicate_labels, row, (row or {}).get(cols.label_column, ""), None, gcfg)


def _add_label(raw: RawGraph, into: dict, row: dict | None, label: str, description: str | None,
               gcfg: GraphConfig) -> None:
    """One labels-table row: counted as kept, or by why it is not."""
    if row == {}:
        raw.label_rows["blank_line"] += 1
        return
    if row is None:
        raw.label_rows["malformed_row"] += 1
        return
    ident = row[gcfg.id_column].strip()
    if ident in into:
        raw.label_rows["duplicate"] += 1
    elif not re.fullmatch(gcfg.id_pattern, ident):
        raw.label_rows["malformed_id"] += 1
    elif not clean_text(label):
        raw.label_rows["empty_label"] += 1
    else:
        into[ident] = label if description is None else (label, description)
        raw.label_rows["kept"] += 1


_IRI = r"<([^<>\"{}|^`\\\x00-\x20]*)>"
_LITERAL = r'"((?:[^"\\\n\r]|\\.)*)"(?:@([A-Za-z]+(?:-[A-Za-z0-9]+)*)|\^\^' + _IRI + r")?"
_NT_LINE = re.compile(r"^[ \t]*(?:" + _IRI + r"|(_:\S+))[ \t]+" + _IRI + r"[ \t]+(?:" + _IRI + r"|(_:\S+)|"
                      + _LITERAL + r")[ \t]*\.[ \t]*$")
_ESCAPE = re.compile(r"\\(?:([tbnrf\"'\\])|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8}))")
_ESCAPES = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'", "\\": "\\"}


def _unescape(text: str) -> str:
    def one(m: re.Match) -> str:
        if m.group(1):
            return _ESCAPES[m.group(1)]
        code = int(m.group(2) or m.group(3), 16)
        return chr(code) if code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else "\ufffd"

    return _ESCAPE.sub(one, text)


def _read_ntriples(gcfg: GraphConfig, languages: Sequence[str], raw: RawGraph) -> None:
    """Triples, ``rdfs:label`` and ``schema:description`` lines of every N-Triples file; a term
    in a language of ``filter.languages`` (or untagged) is kept, the earliest language first."""
    ns = gcfg.namespace
    local = lambda iri: iri[len(ns):] if ns and iri.startswith(ns) else iri  # noqa: E731
    terms: dict[tuple[str, str], tuple[int, str]] = {}  # (id, label|description) -> (rank, value)
    paths = [*gcfg.triples, *(p for p in (gcfg.labels, gcfg.predicate_labels) if p)]
    for path in paths:
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"graph input {path} is not a file")
        source = file.name
        try:
            with _open_text(file, gcfg.encoding) as fh:
                lines = fh.read().splitlines()
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not valid {gcfg.encoding} text ({exc.reason}); set graph.encoding") from None
        for line in lines:
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                raw.skipped["blank_or_comment"] += 1
                continue
            m = _NT_LINE.match(line)
            if m is None:
                raw.rejects.append((source, line, "malformed_row"))
                continue
            s_iri, s_bnode, pred, o_iri, o_bnode, lit, lang, dtype = m.groups()
            if s_bnode is not None or o_bnode is not None:  # a blank node has no id a label can name
                raw.rejects.append((source, line, "malformed_id"))
                continue
            subject = local(s_iri)
            if pred == RDFS_LABEL or pred in SCHEMA_DESCRIPTION:
                kind = "label" if pred == RDFS_LABEL else "description"
                if lit is None:
                    raw.skipped[f"{kind}_not_a_literal"] += 1
                    continue
                rank = 0 if not lang else (
                    languages.index(lang.lower()) + 1 if lang.lower() in languages else -1)
                if rank < 0:
                    raw.skipped["other_language"] += 1
                    continue
                key = (subject, kind)
                if key not in terms or rank < terms[key][0]:
                    terms[key] = (rank, _unescape(lit))
                continue
            if lit is not None:
                obj, datatype = _unescape(lit), dtype or "string"
            else:
                obj, datatype = local(o_iri), ""
            raw.triples.append(RawTriple(source, line, subject, local(pred), obj, datatype))
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
    raw = RawGraph()
    if gcfg.format == "ntriples":
        _read_ntriples(gcfg, cfg.filter.languages, raw)
    else:
        _read_tables(gcfg, raw)
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
    id_ok = re.compile(gcfg.id_pattern).fullmatch
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
        elif kind == "item" and not id_ok(t.object.strip()):
            reason = "malformed_id"
        elif t.predicate in deny:
            reason = "denied_predicate"
        elif allow and t.predicate not in allow:
            reason = "not_in_allow_list"
        elif not predicate_labels.get(t.predicate):
            reason = "unknown_predicate"
        else:
            obj = t.object.strip() if kind == "item" else t.object
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
    descriptions = {e: raw.labels[e][1] for e in labels if raw.labels[e][1]}
    return Graph(statements, labels, descriptions, predicate_labels, rejects, counts)


def load_graph(cfg: Config) -> Graph:
    """Read and resolve the configured graph (what both builds start from)."""
    graph = resolve_graph(read_graph(cfg), cfg.graph)
    log.info("graph: %s", graph.counts)
    return graph
