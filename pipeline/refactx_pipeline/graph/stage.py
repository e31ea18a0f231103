"""Stage ``graph``: a team's own graph (``[graph]`` config) in place of parse, sitelinks and labels.

The inputs are read by Spark's executors, never on the driver, and the rules of
``refactx_pipeline.graph.rules`` (its docstring is the reference; the in-process build runs them
in Python) are DataFrame operations:

- CSV/TSV: Spark's CSV reader, one read per file (``multiLine``: quoted line breaks; the
  header gives the columns, a byte order mark stripped from the first; a row with another
  number of fields lands in a corrupt-record column and is ``malformed_row``);
- Parquet: ``spark.read.parquet``, non-text columns cast to text as the in-process build
  writes them (``graph.parquet_text``);
- N-Triples: ``spark.read.text`` (split across tasks like any text file), each line parsed
  by ``graph.ntriples_record`` in ``mapInArrow`` over Arrow batches;
- names (``subject|relation|object``): ``spark.read.text``, each line split on the delimiter;
  every name its own label, relations labelled by ``graph.relation_labels``;
- Turtle: each file one ``binaryFile`` row, parsed whole by ``graph.turtle_records`` (rdflib)
  in a ``mapInArrow`` task; a file that does not parse stops the stage naming it.

It writes the datasets those three stages would write, so verbalize, tokenize,
prefix_rows, load, validate and activate run unchanged:

- ``parse/statements`` (STATEMENTS): entity ids prefixed ``E:`` (``graph.ENTITY_PREFIX``),
  properties the predicate ids as given (what ``verbalize.inverse_labels`` is keyed by);
- ``parse/terms`` (TERMS): the descriptions of labelled entities, in the first language of
  ``filter.languages`` (verbalize's description facts);
- ``parse/properties`` (PROPERTIES): one row per predicate with its label;
- ``labels/labels`` (LABELS): one display label per entity a kept triple mentions;
- ``graph/rejects`` (REJECTS) and ``graph/counts.json``: every row not kept, with its reason.

Only counts (a few dozen numbers) and the column names of the inputs come back to the driver.
"""

from __future__ import annotations

import codecs
import logging
from typing import Any, Iterator, Sequence

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from refactx_index.errors import ConfigError

from refactx_pipeline.common import write_counts
from refactx_pipeline.config import Config, GraphConfig
from refactx_pipeline.graph.rules import (
    _ITEM_DATATYPES,
    _KINDS,
    ENTITY_PREFIX,
    MAX_REJECT_LINE,
    RDF,
    RDF_FORMATS,
    TRIPLE_REASONS,
    XSD,
    clean_header,
    csv_dialect,
    id_pattern,
    input_paths,
    names_delimiter,
    ntriples_record,
    turtle_records,
)
from refactx_pipeline.stages.contract import StageContext, StageCounts
from refactx_pipeline.stages.schemas import LABELS, PROPERTIES, REJECTS, STATEMENTS, TERMS
from refactx_pipeline.stages.verbalize import clean_text

log = logging.getLogger(__name__)

STAGE = "graph"
CORRUPT = "_refactx_corrupt_record"
# Java's \s without (?U): what graph.strip_ascii removes
_ASCII_SPACE = "[ \\t\\n\\r\\f\\u000B]"
# (python codecs name -> Java charset name) where they differ
_JAVA_CHARSETS = {"utf-8": "UTF-8", "utf-16": "UTF-16", "utf-16-le": "UTF-16LE", "utf-16-be": "UTF-16BE",
                  "utf-32": "UTF-32", "utf-32-le": "UTF-32LE", "utf-32-be": "UTF-32BE", "iso8859-1": "ISO-8859-1",
                  "ascii": "US-ASCII", "cp1252": "windows-1252", "latin-1": "ISO-8859-1"}
# what every reader gives: one row per triple read (or row that could not be read as one)
RAW = ("file", "pos", "source", "line", "read_reason", "subject", "predicate", "object", "datatype")
RECORDS = T.StructType([
    T.StructField("file", T.IntegerType(), False),
    T.StructField("pos", T.LongType(), False),
    T.StructField("source", T.StringType(), False),
    T.StructField("kind", T.StringType(), False),
    T.StructField("reason", T.StringType(), False),
    T.StructField("subject", T.StringType(), False),
    T.StructField("predicate", T.StringType(), False),
    T.StructField("object", T.StringType(), False),
    T.StructField("datatype", T.StringType(), False),
    T.StructField("lang", T.StringType(), False),
    T.StructField("line", T.StringType(), False),
])
_BATCH = 20_000


# ---------------------------------------------------------------- small column helpers


def strip_ascii(col: Column) -> Column:
    return F.regexp_replace(col, f"^{_ASCII_SPACE}+|{_ASCII_SPACE}+$", "")


def id_ok(col: Column, pattern: str) -> Column:
    """``graph.id_matcher``: the whole value matches ``graph.id_pattern`` (Java's regex)."""
    return F.coalesce(col.rlike(f"^(?:{pattern})\\z"), F.lit(False))


def object_kind(datatype: Column) -> Column:
    """``graph.object_kind`` as a column: item | string | time | quantity | coordinate, null
    for a datatype no rule renders."""
    name = strip_ascii(F.coalesce(datatype, F.lit("")))
    quote = lambda text: "\\Q" + text + "\\E"  # noqa: E731
    name = F.regexp_replace(name, f"^(?:{quote(XSD)}|{quote(RDF)}|"
                                  f"{quote('http://www.opengis.net/ont/geosparql#')}(?:.*#)?)", "")
    name = F.regexp_replace(F.lower(name), "^(?:xsd:)?(?:rdf:)?(?:geo:)?", "")
    kinds = {**_KINDS, **dict.fromkeys(_ITEM_DATATYPES, "item")}
    mapping = F.create_map(*[F.lit(x) for pair in sorted(kinds.items()) for x in pair])
    return F.try_element_at(mapping, name)


def _java_charset(encoding: str) -> str:
    name = codecs.lookup(encoding).name
    return _JAVA_CHARSETS.get(name, name)


def _text(col: Column, dtype: T.DataType) -> Column:
    """A Parquet column as text, the way ``graph.parquet_text`` writes a value."""
    if isinstance(dtype, T.StringType):
        return col
    if isinstance(dtype, T.DateType):
        return F.date_format(col, "yyyy-MM-dd")
    if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
        return F.date_format(col, "yyyy-MM-dd'T'HH:mm:ss")
    if isinstance(dtype, T.BinaryType):
        return F.decode(col, "UTF-8")
    return col.cast("string")


def _first_in_order(*partition: Column | str) -> Window:
    return Window.partitionBy(*partition).orderBy("file", "pos")


# ---------------------------------------------------------------- reading


def _csv_reader(spark: SparkSession, gcfg: GraphConfig):
    dialect = csv_dialect(gcfg)
    return spark.read.options(header=True, multiLine=True, sep=dialect["delimiter"], quote=gcfg.quote_char,
                              escape=gcfg.escape_char, encoding=_java_charset(gcfg.encoding), mode="PERMISSIVE",
                              columnNameOfCorruptRecord=CORRUPT, inferSchema=False)


def read_table(spark: SparkSession, gcfg: GraphConfig, path: str, file: int, required: dict[str, str],
               optional: dict[str, str] | None = None) -> DataFrame:
    """One CSV/TSV/Parquet table: ``file``, ``pos`` (its order), ``source``, ``line`` (the row
    as read), ``malformed``, and per role of ``required`` and ``optional`` (role -> column
    name) that column as text, named by its role (an absent optional one empty). The header
    is read by a Spark job; a required column it lacks is a ConfigError naming the file."""
    optional = optional or {}
    source = path.rstrip("/").rsplit("/", 1)[-1]
    if gcfg.format == "parquet":
        frame = spark.read.parquet(path)
        names = frame.columns
        types = {f.name: f.dataType for f in frame.schema.fields}
        columns = {c: F.coalesce(_text(F.col(f"`{c}`"), types[c]), F.lit("")) for c in names}
        malformed = F.lit(False)
        line = F.concat_ws("\t", *[columns[c] for c in (*required.values(), *optional.values()) if c in names])
    else:
        reader = _csv_reader(spark, gcfg)
        names = clean_header(reader.csv(path).columns)  # a job reading the header only (inferSchema off)
        schema = T.StructType([T.StructField(f"c{i}", T.StringType()) for i in range(len(names))]
                              + [T.StructField(CORRUPT, T.StringType())])
        frame = reader.schema(schema).csv(path)
        fields = [F.coalesce(F.col(f"c{i}"), F.lit("")) for i in range(len(names))]
        columns = dict(zip(names, fields))
        corrupt = F.col(CORRUPT).isNotNull()
        # a line of blanks is a one-field row: no row, as the in-process reader has it
        blank = corrupt & (strip_ascii(F.concat(*fields)) == "")
        frame = frame.where(~blank)
        malformed = corrupt
        # every column in the line: the reader then parses every field, so a short or long
        # row is always seen (column pruning would hide it)
        line = F.coalesce(F.col(CORRUPT), F.concat_ws(csv_dialect(gcfg)["delimiter"], *fields))
    missing = [c for c in required.values() if c not in names]
    if missing:
        raise ConfigError(f"{path}: no column {', '.join(map(repr, missing))} in the header {list(names)} "
                          "(see graph.*_column and graph.delimiter)")
    wanted = [(columns[c] if c in columns else F.lit("")).alias(role) for role, c in {**required, **optional}.items()]
    return frame.select(F.lit(file).alias("file"), F.monotonically_increasing_id().alias("pos"),
                        F.lit(source).alias("source"), F.substring(line, 1, MAX_REJECT_LINE).alias("line"),
                        malformed.alias("malformed"), *wanted)


def _union(frames: Sequence[DataFrame]) -> DataFrame:
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def _table_triples(spark: SparkSession, gcfg: GraphConfig, paths: Sequence[str]) -> DataFrame:
    g = gcfg
    frames = []
    for file, path in enumerate(paths):
        frame = read_table(spark, gcfg, path, file,
                           {"subject": g.subject_column, "predicate": g.predicate_column, "object": g.object_column},
                           {"datatype": g.datatype_column})
        frames.append(frame.select(
            "file", "pos", "source", "line",
            F.when(F.col("malformed"), F.lit("malformed_row")).alias("read_reason"),
            strip_ascii(F.col("subject")).alias("subject"),
            strip_ascii(F.col("predicate")).alias("predicate"),
            F.col("object"),
            strip_ascii(F.col("datatype")).alias("datatype"),
        ))
    return _union(frames)


def _names_triples(spark: SparkSession, gcfg: GraphConfig, paths: Sequence[str]) -> DataFrame:
    """``graph._read_names`` as columns: a line of three fields is a triple, trimmed; another
    count of fields is ``malformed_row``; a blank line is no row."""
    delimiter = "\\Q" + names_delimiter(gcfg) + "\\E"
    frames = []
    for file, path in enumerate(paths):
        source = path.rstrip("/").rsplit("/", 1)[-1]
        line = F.regexp_replace(F.col("value"), "^\ufeff", "")
        frame = spark.read.text(path).select(
            F.lit(file).cast("int").alias("file"), F.monotonically_increasing_id().alias("pos"),
            F.lit(source).alias("source"), line.alias("line")).where(strip_ascii(F.col("line")) != "")
        fields = F.split(F.col("line"), delimiter, -1)
        ok = F.size(fields) == 3
        frames.append(frame.select(
            "file", "pos", "source", F.substring("line", 1, MAX_REJECT_LINE).alias("line"),
            F.when(~ok, F.lit("malformed_row")).alias("read_reason"),
            *[F.when(ok, strip_ascii(fields[i])).otherwise(F.lit("")).alias(role)
              for i, role in enumerate(("subject", "predicate", "object"))],
            F.lit("").alias("datatype")))
    return _union(frames)


def _label_rows(frame: DataFrame, pattern: str) -> DataFrame:
    """A labels table's rows (roles id, label, description) with their outcome
    (``graph._add_label``): the first valid row of an id is kept, a later row of a kept id is
    a duplicate."""
    ident = strip_ascii(F.col("id"))
    label = F.col("label")
    valid = ~F.col("malformed") & id_ok(ident, pattern) & (clean_text(label) != "")
    first_kept = F.min(F.when(valid, F.struct("file", "pos"))).over(Window.partitionBy(ident))
    outcome = (F.when(F.col("malformed"), "malformed_row")
               .when(first_kept.isNotNull() & (F.struct("file", "pos") > first_kept), "duplicate")
               .when(~id_ok(ident, pattern), "malformed_id")
               .when(clean_text(label) == "", "empty_label")
               .otherwise("kept"))
    description = F.col("description") if "description" in frame.columns else F.lit("")
    return frame.select(ident.alias("id"), label, description.alias("description"), outcome.alias("outcome"))


def _records(frame: DataFrame, parse) -> DataFrame:
    """``parse(batch) -> records`` over Arrow batches (``mapInArrow``), as RECORDS rows."""
    return frame.mapInArrow(parse, RECORDS)


def _record_batch(rows: list[tuple]) -> pa.RecordBatch:
    columns = list(zip(*rows)) if rows else [[] for _ in RECORDS.fieldNames()]
    types = [pa.int32(), pa.int64(), *[pa.string()] * (len(RECORDS.fieldNames()) - 2)]
    return pa.RecordBatch.from_arrays([pa.array(c, type=t) for c, t in zip(columns, types)],
                                      names=RECORDS.fieldNames())


def _ntriples_parser(namespace: str):
    def parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            files, positions, sources, lines = (batch.column(i).to_pylist() for i in range(4))
            yield _record_batch([(f, p, s, *ntriples_record(line, namespace))
                                 for f, p, s, line in zip(files, positions, sources, lines)])
    return parse


def _turtle_parser(namespace: str):
    def parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for file, source, content in zip(*(batch.column(i).to_pylist() for i in range(3))):
                rows: list[tuple] = []
                for pos, rec in enumerate(turtle_records(content, source, namespace)):
                    rows.append((file, pos, source, *rec))
                    if len(rows) >= _BATCH:
                        yield _record_batch(rows)
                        rows = []
                if rows:
                    yield _record_batch(rows)
    return parse


def _rdf_records(spark: SparkSession, gcfg: GraphConfig, paths: Sequence[str]) -> DataFrame:
    frames = []
    for file, path in enumerate(paths):
        source = path.rstrip("/").rsplit("/", 1)[-1]
        if gcfg.format == "turtle":
            frame = spark.read.format("binaryFile").load(path).select(
                F.lit(file).cast("int").alias("file"), F.lit(source).alias("source"), "content")
        else:
            frame = spark.read.text(path).select(
                F.lit(file).cast("int").alias("file"), F.monotonically_increasing_id().alias("pos"),
                F.lit(source).alias("source"), F.col("value"))
        frames.append(frame)
    parser = _turtle_parser if gcfg.format == "turtle" else _ntriples_parser
    return _records(_union(frames), parser(gcfg.namespace))


# ---------------------------------------------------------------- the rules


class _Graph:
    """The DataFrames of one graph after the rules (see ``graph.resolve_graph``)."""

    def __init__(self, spark: SparkSession, cfg: Config):
        gcfg = self.gcfg = cfg.graph
        inputs = input_paths(gcfg, local_only=False)
        self.persisted: list[DataFrame] = []
        self.skipped: DataFrame | None = None
        if gcfg.format in RDF_FORMATS:
            records = self._keep(_rdf_records(spark, gcfg, inputs.rdf_files()))
            errors = records.where(F.col("kind") == "error").select("reason").limit(5).collect()
            if errors:
                raise ConfigError("; ".join(r.reason for r in errors))
            raw = records.where(F.col("kind").isin("triple", "reject")).select(
                "file", "pos", "source", "line",
                F.when(F.col("kind") == "reject", F.col("reason")).alias("read_reason"),
                "subject", "predicate", "object", "datatype")
            label_rows, predicate_labels = self._rdf_labels(records, raw, cfg.filter.languages)
        elif gcfg.format == "names":
            raw = self._keep(_names_triples(spark, gcfg, inputs.triples))
            read = raw.where(F.col("read_reason").isNull())
            names = read.select(F.col("subject").alias("id")).unionByName(
                read.select(F.col("object").alias("id"))).where(F.col("id") != "").distinct()
            label_rows = names.select("id", F.col("id").alias("label"), F.lit("").alias("description"))
            self.label_outcomes = label_rows.select(F.lit("kept").alias("outcome")).limit(0)
            relations = read.select(F.col("predicate")).where(F.col("predicate") != "").distinct()
            listed = F.create_map(*[F.lit(x) for pair in sorted(gcfg.relation_labels.items()) for x in pair]) \
                if gcfg.relation_labels else None
            default = F.regexp_replace(F.col("predicate"), "_", " ")
            label = F.coalesce(F.try_element_at(listed, F.col("predicate")), default) if listed is not None else default
            predicate_labels = relations.select("predicate", label.alias("label"))
        else:
            raw = _table_triples(spark, gcfg, inputs.triples)
            roles = {"id": gcfg.id_column, "label": gcfg.label_column}
            label_rows = self._keep(_union([
                _label_rows(read_table(spark, gcfg, p, i, roles, {"description": gcfg.description_column}),
                            gcfg.id_pattern) for i, p in enumerate(inputs.labels)]))
            predicate_rows = self._keep(_union([
                _label_rows(read_table(spark, gcfg, p, i, roles), gcfg.id_pattern)
                for i, p in enumerate(inputs.predicate_labels)]))
            self.label_outcomes = label_rows.select("outcome").unionByName(predicate_rows.select("outcome"))
            predicate_labels = predicate_rows.where(F.col("outcome") == "kept").select(
                F.col("id").alias("predicate"), "label")
            label_rows = label_rows.where(F.col("outcome") == "kept")
        self.labels = label_rows.select("id", "label", "description")  # kept rows, one per id
        self._apply(raw, predicate_labels)

    def _keep(self, frame: DataFrame) -> DataFrame:
        frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
        self.persisted.append(frame)
        return frame

    def _rdf_labels(self, records: DataFrame, raw: DataFrame, languages: Sequence[str]
                    ) -> tuple[DataFrame, DataFrame]:
        """``graph._read_rdf``'s labels: per subject and kind the best-ranked term, the first
        written among equals; a label empty once cleaned is ``empty_label``."""
        langs = F.array(*[F.lit(lang.lower()) for lang in languages]) if languages else F.array().cast("array<string>")
        position = F.array_position(langs, F.col("lang"))
        rank = F.when(F.col("lang") == "", 0).when(position > 0, position).otherwise(-1)
        terms = records.where(F.col("kind").isin("label", "description")).withColumn("rank", rank)
        skips = records.where(F.col("kind") == "skip").select("reason").unionByName(
            terms.where(F.col("rank") < 0).select(F.lit("other_language").alias("reason")))
        self.skipped = skips
        best = (terms.where(F.col("rank") >= 0)
                .withColumn("n", F.row_number().over(Window.partitionBy("subject", "kind")
                                                     .orderBy("rank", "file", "pos")))
                .where(F.col("n") == 1))
        labels = best.where(F.col("kind") == "label").select(F.col("subject").alias("id"),
                                                             F.col("object").alias("label"))
        descriptions = best.where(F.col("kind") == "description").select(
            F.col("subject").alias("id"), F.col("object").alias("description"))
        labels = labels.join(descriptions, "id", "left").select(
            "id", "label", F.coalesce("description", F.lit("")).alias("description"),
            F.when(clean_text(F.col("label")) == "", "empty_label").otherwise("kept").alias("outcome"))
        labels = self._keep(labels)
        self.label_outcomes = labels.select("outcome")
        predicates = raw.where(F.col("read_reason").isNull()).select("predicate").distinct()
        predicate_labels = labels.where(F.col("outcome") == "kept").join(
            predicates, F.col("id") == F.col("predicate")).select("predicate", "label")
        return labels.where(F.col("outcome") == "kept"), predicate_labels

    def _apply(self, raw: DataFrame, predicate_labels: DataFrame) -> None:
        g = self.gcfg
        pattern = id_pattern(g)
        kind = object_kind(F.col("datatype"))
        item_object = strip_ascii(F.col("object"))
        plabels = F.broadcast(predicate_labels.select("predicate", clean_text(F.col("label")).alias("plabel")))
        t = raw.withColumn("kind", kind).join(plabels, "predicate", "left")
        reason = F.when(F.col("read_reason").isNotNull(), F.col("read_reason"))
        reason = reason.when(~id_ok(F.col("subject"), pattern) | ~id_ok(F.col("predicate"), pattern), "malformed_id")
        reason = reason.when(clean_text(F.col("object")) == "", "empty_value")
        reason = reason.when(F.col("kind").isNull(), "unknown_datatype")
        reason = reason.when((F.col("kind") == "item") & ~id_ok(item_object, pattern), "malformed_id")
        if g.deny_predicates:
            reason = reason.when(F.col("predicate").isin(list(g.deny_predicates)), "denied_predicate")
        if g.allow_predicates:
            reason = reason.when(~F.col("predicate").isin(list(g.allow_predicates)), "not_in_allow_list")
        reason = reason.when(F.coalesce(F.col("plabel"), F.lit("")) == "", "unknown_predicate")
        obj = F.when(F.col("kind") == "item", item_object).otherwise(F.col("object"))
        t = t.withColumn("reason", reason).withColumn("obj", obj)
        # the first of a key among the rows no earlier rule rejected is kept
        first = F.row_number().over(_first_in_order(F.col("reason").isNull(), "subject", "predicate", "kind", "obj"))
        t = t.withColumn("reason", F.when(F.col("reason").isNull() & (first > 1), "duplicate")
                         .otherwise(F.col("reason")))
        t = self.checked = self._keep(t)
        candidates = t.where(F.col("reason").isNull())

        # the label rule over the entities the candidates mention (graph.display_labels)
        mentioned = candidates.select(F.col("subject").alias("entity")).unionByName(
            candidates.where(F.col("kind") == "item").select(F.col("obj").alias("entity"))).distinct()
        labelled = mentioned.join(self.labels.withColumnRenamed("id", "entity"), "entity", "left")
        base = clean_text(F.col("label"))
        shared = F.count(F.lit(1)).over(Window.partitionBy("base"))
        description = clean_text(F.coalesce(F.col("description"), F.lit("")))
        labelled = labelled.withColumn("base", base).withColumn("shared", shared)
        chosen = (F.when(F.col("shared") == 1, F.col("base"))
                  .when(description != "", F.concat(F.col("base"), F.lit(" ("), description, F.lit(")"))))
        source = F.when(F.col("shared") == 1, "label").otherwise("label_description")
        labelled = labelled.withColumn("chosen", F.when(F.col("base").isNotNull(), chosen)).withColumn(
            "label_source", source)
        final = F.count(F.lit(1)).over(Window.partitionBy("chosen"))
        entities = labelled.withColumn("dropped", F.when(F.col("base").isNull(), "missing_label")
                                       .when(F.col("chosen").isNull() | (final > 1), "ambiguous_label"))
        entities = self._keep(entities.select("entity", "chosen", "label_source", "dropped", "description"))
        self.entities = entities

        status = entities.select("entity", "dropped")
        subject_status = status.select(F.col("entity").alias("subject"), F.col("dropped").alias("drop_s"))
        object_status = status.select(F.col("entity").alias("obj"), F.col("dropped").alias("drop_o"))
        resolved = (candidates.join(subject_status, "subject", "left").join(object_status, "obj", "left")
                    .withColumn("reason", F.coalesce(F.col("drop_s"), F.when(F.col("kind") == "item",
                                                                                 F.col("drop_o")))))
        resolved = self.resolved = self._keep(resolved)
        self.statements = resolved.where(F.col("reason").isNull()).select(
            "subject", "predicate", "kind", "obj", "plabel")
        self.rejects = (t.where(F.col("reason").isNotNull()).select("source", "line", "reason")
                        .unionByName(resolved.where(F.col("reason").isNotNull()).select("source", "line", "reason")))

    def counts(self) -> dict[str, Any]:
        """``graph.resolve_graph``'s counts, in its order (a few small jobs over persisted frames)."""
        before = {r.reason: r["n"] for r in self.checked.groupBy("reason").agg(F.count(F.lit(1)).alias("n")).collect()}
        after = {r.reason: (r["n"], r["p"]) for r in self.resolved.groupBy("reason").agg(
            F.count(F.lit(1)).alias("n"), F.countDistinct("predicate").alias("p")).collect()}
        by_reason = {**{k: v for k, v in before.items() if k}, **{k: n for k, (n, _) in after.items() if k}}
        triples_in = sum(before.values())
        triples, predicates = after.get(None, (0, 0))
        rejected = sum(by_reason.values())
        if triples_in != triples + rejected:  # a rule lost a row: a bug, not bad input
            raise RuntimeError(f"read {triples_in} triples but kept {triples} and rejected {rejected}")
        skipped = ({r.reason: r["n"] for r in self.skipped.groupBy("reason").agg(F.count(F.lit(1)).alias("n")).collect()}
                   if self.skipped is not None else {})
        outcomes = {r.outcome: r["n"] for r in
                    self.label_outcomes.groupBy("outcome").agg(F.count(F.lit(1)).alias("n")).collect()}
        entities = self.entities.groupBy("dropped", "label_source").agg(F.count(F.lit(1)).alias("n")).collect()
        sources = {r.label_source: r["n"] for r in entities if r.dropped is None}
        dropped: dict[str, int] = {}
        for r in entities:
            if r.dropped is not None:
                dropped[r.dropped] = dropped.get(r.dropped, 0) + r["n"]
        counts = {
            "triples_in": triples_in,
            "triples": triples,
            "rejected": rejected,
            "rejected_by_reason": {r: by_reason[r] for r in TRIPLE_REASONS if by_reason.get(r)},
            "skipped_by_reason": dict(sorted(skipped.items())),
            "label_rows_by_outcome": dict(sorted(outcomes.items())),
            "predicates": predicates,
            "entities": sum(sources.values()),
            "labels_by_source": dict(sorted(sources.items())),
            "entities_dropped_by_reason": dict(sorted(dropped.items())),
        }
        if self.gcfg.format == "names":
            counts["names"] = self._names_counts()
        return counts

    def _names_counts(self) -> dict[str, int]:
        """``graph.names_counts`` over the kept statements and labels."""
        kept = self.entities.where(F.col("dropped").isNull())
        lowered = kept.withColumn("n", F.count(F.lit(1)).over(Window.partitionBy(F.lower("chosen"))))
        row = lowered.agg(F.count(F.lit(1)).alias("entities"),
                          F.coalesce(F.sum(F.when(F.col("n") > 1, 1).otherwise(0)), F.lit(0)).alias("case")).first()
        subjects = self.statements.select(F.col("subject").alias("e")).distinct()
        objects = self.statements.where(F.col("kind") == "item").select(F.col("obj").alias("e")).distinct()
        both = subjects.join(objects, "e").count()
        return {"entities": int(row["entities"]), "differing_only_in_case": int(row["case"]),
                "subject_and_object": both}

    def unpersist(self) -> None:
        for frame in self.persisted:
            frame.unpersist()


def _write(frame: DataFrame, schema: T.StructType, path) -> None:
    frame.select(*[F.col(f.name).cast(f.dataType) for f in schema.fields]).write.mode("overwrite").parquet(str(path))


def run(ctx: StageContext) -> StageCounts:
    """Write the parse and labels datasets of ``cfg.graph`` and ``graph/counts.json``."""
    spark, cfg = ctx.spark, ctx.cfg
    graph = _Graph(spark, cfg)
    try:
        parse_dir, labels_dir = cfg.stage_dir("parse"), cfg.stage_dir("labels")
        e = F.lit(ENTITY_PREFIX)
        st = graph.statements
        item = F.col("kind") == "item"
        _write(st.select(
            F.concat(e, F.col("subject")).alias("subject"),
            F.col("predicate").alias("property"),
            F.col("kind").alias("object_kind"),
            F.when(item, F.concat(e, F.col("obj"))).alias("object_item"),
            F.when(~item, F.col("obj")).alias("object_value"),
            F.lit(None).cast("string").alias("object_datatype"),
            F.lit(None).cast("string").alias("object_lang"),
        ), STATEMENTS, parse_dir / "statements")
        kept = graph.entities.where(F.col("dropped").isNull())
        _write(kept.where(F.coalesce(F.col("description"), F.lit("")) != "").select(
            F.concat(e, F.col("entity")).alias("entity"), F.lit("description").alias("kind"),
            F.lit(cfg.filter.languages[0]).alias("lang"), F.col("description").alias("value"),
        ), TERMS, parse_dir / "terms")
        _write(st.select(F.col("predicate").alias("property"), F.col("plabel").alias("label")).distinct().select(
            "property", F.lit(None).cast("string").alias("datatype"), "label"), PROPERTIES, parse_dir / "properties")
        _write(kept.select(F.concat(e, F.col("entity")).alias("entity"), F.col("chosen").alias("label"),
                           "label_source"), LABELS, labels_dir / "labels")
        _write(graph.rejects.select("source", F.substring("line", 1, MAX_REJECT_LINE).alias("line"), "reason"),
               REJECTS, cfg.stage_dir(STAGE) / "rejects")
        counts = dict(graph.counts(), format=cfg.graph.format)
    finally:
        graph.unpersist()
    write_counts(cfg, STAGE, counts)
    log.info("graph: %s", counts)
    return counts
