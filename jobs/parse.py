"""Stage 1, parse: Wikidata truthy N-Triples -> statements, terms, properties, rejects.

Two phases, one scan of the dump:

1. **lex** (JVM only): every line of every input file is matched once against
   one full-line pattern (``line_pattern``) and classified with cheap string
   functions of its groups into one staged Parquet dataset partitioned by
   ``kind`` (statement | term | property_type | reject | skip). Skipped lines
   keep only their reason; rejects keep their raw line, and only they are later
   run through the reason rules (``reject_reason``).
2. **resolve** (on the staged Parquet): property datatypes (the dump's own
   ``wikibase:propertyType`` lines, else a property table, else inferred from
   the objects' shapes), the configured filters, literal unescaping (an Arrow
   batch function called only for literals that contain a backslash), and the
   outputs of ``jobs/schemas.py`` plus ``counts.json``.

Literal values are validated by the full-line pattern (escapes, unescaped quotes,
lone UTF-16 surrogates), so the unescaper never sees a malformed literal.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any, Iterable

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.functions import pandas_udf
from pyspark.sql.types import StringType, StructType

from refactx_index.config import Config
from refactx_index.errors import ConfigError

from jobs.common import remove_tree, run_job_main, write_counts
from jobs.schemas import PROPERTIES, REJECTS, STATEMENTS, TERMS

log = logging.getLogger(__name__)

MAX_REJECT_LINE = 10_000

RDF_TYPE = "<http://www.w3.org/1999/02/22-rdf-syntax-ns#type>"
TERM_PREDICATES = {
    "<http://www.w3.org/2000/01/rdf-schema#label>": "label",
    "<http://schema.org/description>": "description",
    "<http://www.w3.org/2004/02/skos/core#altLabel>": "alias",
}
# both the current and the pre-2018 ontology namespace
WIKIBASE_NS = ("<http://wikiba.se/ontology#", "<http://wikiba.se/ontology-beta#")
PROPERTY_TYPE_IRIS = [ns + "propertyType>" for ns in WIKIBASE_NS]
WIKIBASE_NAME = r"^<http://wikiba\.se/ontology(?:-beta)?#([A-Za-z]+)>$"

XSD = "http://www.w3.org/2001/XMLSchema#"
LITERAL_KINDS = {
    XSD + "dateTime": ("time", "Time"),
    XSD + "decimal": ("quantity", "Quantity"),
    "http://www.opengis.net/ont/geosparql#wktLiteral": ("coordinate", "GlobeCoordinate"),
    "http://www.w3.org/1998/Math/MathML": ("other", "Math"),
}

# Wikidata JSON datatype names (property tables) -> RDF names (propertyType lines)
JSON_DATATYPES = {
    "wikibase-item": "WikibaseItem",
    "wikibase-property": "WikibaseProperty",
    "wikibase-lexeme": "WikibaseLexeme",
    "wikibase-form": "WikibaseForm",
    "wikibase-sense": "WikibaseSense",
    "string": "String",
    "external-id": "ExternalId",
    "quantity": "Quantity",
    "time": "Time",
    "globe-coordinate": "GlobeCoordinate",
    "monolingualtext": "Monolingualtext",
    "url": "Url",
    "commonsmedia": "CommonsMedia",
    "math": "Math",
    "geo-shape": "GeoShape",
    "tabular-data": "TabularData",
    "musical-notation": "MusicalNotation",
    "entity-schema": "EntitySchema",
}

STAGED_PARTITION = "kind"

# ---------------------------------------------------------------- lexical patterns
# Written for both Java regex and RE2: no backreferences, and lookaround only in
# LONE_SURROGATE, which names the reason of an already refused line (Java only).
IRI_CHAR = r'[^\x00-\x20<>"{}|^`\\]'
IRI = "<" + IRI_CHAR + "*>"
BNODE = r"_:[A-Za-z0-9_](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_\-])?"
LANG_TAG = r"[A-Za-z]+(?:-[A-Za-z0-9]+)*"
LANG_OR_DATATYPE = r"^(?:@" + LANG_TAG + r"|\^\^" + IRI + r")?$"
HEX = "[0-9A-Fa-f]"
# every escape N-Triples allows in a literal; \U only up to U+10FFFF
VALID_ESCAPE = r"""\\(?:[tbnrf"'\\]|u""" + HEX + "{4}|U(?:000" + HEX + "|0010)" + HEX + "{4})"
# the same escapes, except that a \u high surrogate must be followed by a \u low
# surrogate and a low surrogate may not stand alone
PAIRED_ESCAPE = (
    r"""\\(?:[tbnrf"'\\]"""
    r"|u(?:[0-9A-Ca-cEeFf]" + HEX + "{3}|[Dd][0-7]" + HEX + "{2}"
    r"|[Dd][89ABab]" + HEX + r"{2}\\u[Dd][C-Fc-f]" + HEX + "{2})"
    r"|U(?:000" + HEX + "|0010)" + HEX + "{4})"
)
# an odd backslash run before \uD800-\uDBFF not followed by a low surrogate, or a low one alone
LONE_SURROGATE = (
    r"(?i)(?<!\\)(?:\\\\)*(?:\\ud[89ab][0-9a-f]{2}(?!\\ud[c-f][0-9a-f]{2})"
    r"|(?<!\\ud[89ab][0-9a-f]{2})\\ud[c-f][0-9a-f]{2})"
)

# the groups of the full-line pattern, in order (an absent group is an empty string)
LINE_GROUPS = ("sid", "p", "pid", "o", "oitem", "oent", "body", "lang", "dt")
# joins the groups in one string: a line read as text never holds a line feed, and
# no group of a matched line can (IRIs exclude controls, literal bodies exclude LF/CR)
GROUP_SEPARATOR = "\n"


def line_pattern(entity_namespace: str, direct_claim_namespace: str, *, java: bool = True) -> str:
    """One pattern for a whole valid N-Triples line, capturing ``LINE_GROUPS``:
    subject id, predicate IRI, direct-claim property id, object IRI or blank node,
    object item id, other object entity id, literal body, language tag, datatype IRI.

    ``java=True``: numbered groups and possessive quantifiers, so that a 100 KB
    literal or thousands of escapes never recurse deeply in ``java.util.regex``.
    ``java=False``: named groups for RE2 (``pyarrow.compute.extract_regex``), which
    does not backtrack and has no possessive quantifiers."""
    many = "*+" if java else "*"

    def group(name: str, body: str) -> str:
        return ("(" if java else "(?P<" + name + ">") + body + ")"

    ent, dc = re.escape(entity_namespace), re.escape(direct_claim_namespace)
    any_iri = "<" + IRI_CHAR + many + ">"
    body_char = r'[^"\\\n\r]'
    body = body_char + many + "(?:" + PAIRED_ESCAPE + body_char + many + ")" + many
    subject = "(?:<" + ent + group("sid", "[QP][1-9][0-9]*") + ">|" + any_iri + "|" + BNODE + ")"
    predicate = group("p", "<" + dc + group("pid", "P[1-9][0-9]*") + ">|" + any_iri)
    entity = group("oitem", "Q[1-9][0-9]*") + "|" + group("oent", "[PL][1-9][0-9]*(?:-[FS][1-9][0-9]*)?")
    node = group("o", "<" + ent + "(?:" + entity + ")>|" + any_iri + "|" + BNODE)
    literal = '"' + group("body", body) + '"(?:@' + group("lang", LANG_TAG) + r"|\^\^" + group("dt", any_iri) + ")?"
    return r"^[ \t\r]*" + subject + r"[ \t]+" + predicate + r"[ \t]+(?:" + node + "|" + literal + r")[ \t]*\.[ \t\r]*\z"


# ---------------------------------------------------------------- phase 1: lex


def match_lines(lines: DataFrame, entity_namespace: str, direct_claim_namespace: str) -> DataFrame:
    """Match every line (columns ``value``, ``source``) once against the full-line
    pattern. Columns: ``raw``, ``source``, ``ok`` (matched, and valid UTF-8) and the
    ``LINE_GROUPS`` (meaningful only where ``ok``).

    One regex evaluation per line: ``regexp_replace`` rewrites a matching line into
    its groups joined by ``GROUP_SEPARATOR`` and leaves any other line as it is, so
    the number of split fields tells whether the line matched."""
    pattern = line_pattern(entity_namespace, direct_claim_namespace)
    groups = GROUP_SEPARATOR.join(f"${i}" for i in range(1, len(LINE_GROUPS) + 1))
    fields = F.split(F.regexp_replace(F.col("value"), pattern, groups), GROUP_SEPARATOR)
    df = lines.select(F.col("value").alias("raw"), F.col("source"), fields.alias("fields"))
    ok = (F.size("fields") == len(LINE_GROUPS)) & F.is_valid_utf8(F.col("raw"))
    return df.select("raw", "source", ok.alias("ok"),
                     *[F.get(F.col("fields"), i).alias(name) for i, name in enumerate(LINE_GROUPS)])


def reject_reason(raw: Column) -> Column:
    """Why a line the full-line pattern refused is malformed (never null).

    Evaluated only for refused lines, so its splits and regexes cost nothing on
    valid input; the first failing rule names the reason."""
    text = F.btrim(raw, F.lit(" \t\r"))
    parts = F.split(text, r"[ \t]+", 3)
    s, p, rest = F.get(parts, 0), F.get(parts, 1), F.get(parts, 2)
    o = F.btrim(F.substring(rest, F.lit(1), F.length(rest) - 1), F.lit(" \t"))
    is_lit = o.startswith('"')
    suffix = F.substring_index(o, '"', -1)
    body_len = F.length(o) - F.length(suffix) - 2
    body = F.when(body_len >= 0, F.substring(o, F.lit(2), body_len))
    stripped = F.regexp_replace(body, VALID_ESCAPE, "")
    term_re = "^(?:" + IRI + "|" + BNODE + ")$"
    return (
        F.when(~F.is_valid_utf8(raw), "invalid_utf8")
        .when(rest.isNull(), "too_few_terms")
        .when(~rest.endswith("."), "missing_final_dot")
        .when(~s.rlike(term_re), "bad_subject")
        .when(~p.rlike("^" + IRI + "$"), "bad_predicate")
        .when(is_lit & body.isNull(), "unterminated_literal")
        .when(is_lit & ~suffix.rlike(LANG_OR_DATATYPE), "bad_language_or_datatype")
        .when(is_lit & stripped.contains("\\"), "bad_escape")
        .when(is_lit & stripped.contains('"'), "unescaped_quote")
        .when(is_lit & body.rlike(LONE_SURROGATE), "lone_surrogate")
        .when(~is_lit & ~o.rlike(term_re), "bad_object")
        # only a raw line feed or carriage return inside a literal is left
        .otherwise("bad_literal_character")
    )


def _kr(kind: str, reason: str | Column | None) -> Column:
    reason_col = reason if isinstance(reason, Column) else F.lit(reason).cast("string")
    return F.struct(F.lit(kind).alias("kind"), reason_col.alias("reason"))


def classify_lines(matched: DataFrame, languages: Iterable[str]) -> DataFrame:
    """Staged rows from ``match_lines`` output: cheap comparisons and substrings of
    the groups only (the regex ran once, in ``match_lines``).

    A reject has a null ``reason`` and its raw ``line``: ``name_rejects`` names it
    later, on the rejects alone. Naming it here would put the reason rules' splits
    and regexes into the per-line generated code, which then grows past what the
    JVM compiles and slows every line, valid or not."""
    langs = sorted({lang.lower() for lang in languages})
    raw, ok = F.col("raw"), F.col("ok")
    sid, p, pid, o, oitem, oent, body = (F.col(c) for c in ("sid", "p", "pid", "o", "oitem", "oent", "body"))
    is_lit = o == ""
    lang = F.lower(F.nullif(F.col("lang"), F.lit("")))
    dt = F.nullif(F.col("dt"), F.lit(""))
    datatype = F.substring(dt, F.lit(2), F.length(dt) - 2)  # without its <>
    df = matched.select(raw, F.col("source"), ok, sid, p, pid, o, oitem, oent, body,
                        lang.alias("lang"), datatype.alias("literal_datatype"))
    lang_c, dt_c = F.col("lang"), F.col("literal_datatype")
    lang_kept = lang_c.isin(langs) if langs else F.lit(True)

    term_kind = F.lit(None).cast("string")
    for iri, name in TERM_PREDICATES.items():
        term_kind = F.when(p == iri, F.lit(name)).otherwise(term_kind)
    df = df.withColumn("term_kind", term_kind)
    tk = F.col("term_kind")
    is_iri = o.startswith("<")
    unknown_value = o.startswith("_:") | (is_iri & o.contains("/.well-known/genid/"))
    text = F.btrim(raw, F.lit(" \t\r"))

    kind_reason = (
        F.when(~ok & ((text == "") | text.startswith("#")), _kr("skip", "blank_or_comment"))
        .when(~ok, _kr("reject", None))
        .when((pid != "") & ~sid.startswith("Q"), _kr("skip", "non_item_subject"))
        .when((pid != "") & unknown_value, _kr("skip", "unknown_value"))
        .when((pid != "") & lang_c.isNotNull() & ~lang_kept, _kr("skip", "other_language"))
        .when(pid != "", _kr("statement", None))
        .when(tk.isNotNull() & (sid == ""), _kr("skip", "term_of_other_subject"))
        .when(tk.isNotNull() & (lang_c.isNull() | ~lang_kept), _kr("skip", "other_language"))
        .when(tk.isNotNull(), _kr("term", None))
        .when(p.isin(PROPERTY_TYPE_IRIS) & sid.startswith("P") & (o.startswith(WIKIBASE_NS[0]) | o.startswith(WIKIBASE_NS[1])),
              _kr("property_type", None))
        .when((p == RDF_TYPE) & o.contains("/prop/novalue/P"), _kr("skip", "no_value"))
        .otherwise(_kr("skip", "other_predicate"))
    )
    df = df.withColumn("kr", kind_reason).withColumns({"kind": F.col("kr.kind"), "reason": F.col("kr.reason")})
    kind = F.col("kind")

    # object kind and the datatype its shape implies (used when no datatype is declared)
    object_kind = F.when(oitem != "", "item")
    inferred = F.when(oitem != "", "WikibaseItem")
    for dt_iri, (okind, dtype) in LITERAL_KINDS.items():
        object_kind = object_kind.when(dt_c == dt_iri, okind)
        inferred = inferred.when(dt_c == dt_iri, dtype)
    plain = is_lit & lang_c.isNull() & (dt_c.isNull() | (dt_c == XSD + "string"))
    object_kind = object_kind.when(lang_c.isNotNull(), "monolingual").when(plain, "string").otherwise("other")
    inferred = (
        inferred.when(lang_c.isNotNull(), "Monolingualtext")
        .when(plain, "String")
        .when(oent.startswith("P"), "WikibaseProperty")
        .when(oent.contains("-F"), "WikibaseForm")
        .when(oent.contains("-S"), "WikibaseSense")
        .when(oent.startswith("L"), "WikibaseLexeme")
        .when(is_iri & o.contains("/wiki/Special:FilePath/"), "CommonsMedia")
        .when(is_iri & o.contains("/data/main/Data:") & o.endswith(".map>"), "GeoShape")
        .when(is_iri & o.contains("/data/main/Data:") & o.endswith(".tab>"), "TabularData")
        .when(is_iri, "Url")
    )
    object_value = F.when(is_lit, body).when(is_iri & (oitem == ""), F.substring(o, F.lit(2), F.length(o) - 2))

    is_stmt, is_term = kind == "statement", kind == "term"
    return df.select(
        kind.alias("kind"),
        F.col("reason"),
        F.when(kind == "reject", F.col("source")).alias("source"),
        F.when(kind == "reject", raw).alias("line"),  # whole and as read: name_rejects needs it
        F.when(is_stmt | is_term | (kind == "property_type"), sid).alias("subject"),
        F.when(is_stmt, pid).alias("property"),
        F.when(is_stmt, object_kind).alias("object_kind"),
        F.when(is_stmt & (oitem != ""), oitem).alias("object_item"),
        F.when(is_stmt | is_term, object_value).alias("object_value"),
        F.when(is_stmt, dt_c).alias("object_datatype"),
        F.when(is_stmt | is_term, lang_c).alias("object_lang"),
        F.when(is_stmt, inferred).alias("inferred_datatype"),
        F.when(is_term, tk).alias("term_kind"),
        F.when(is_stmt | is_term, is_lit & body.contains("\\")).alias("has_escape"),
        F.when(kind == "property_type", F.regexp_extract(o, WIKIBASE_NAME, 1)).alias("declared_datatype"),
    )


def lex_lines(
    lines: DataFrame,
    languages: Iterable[str],
    entity_namespace: str,
    direct_claim_namespace: str,
) -> DataFrame:
    """Classify raw lines (columns ``value``, ``source``) into staged rows.

    Pure Spark SQL functions: no Python runs per line, and a valid line costs one
    regex evaluation. Every input line yields exactly one output row whose ``kind``
    is statement, term, property_type, reject (``reason`` says why) or skip
    (``reason`` says which valid line this stage does not need).
    """
    staged = classify_lines(match_lines(lines, entity_namespace, direct_claim_namespace), languages)
    return name_rejects(staged)


def name_rejects(staged: DataFrame) -> DataFrame:
    """``staged`` with each reject's ``reason`` named and its ``line`` cut to
    ``MAX_REJECT_LINE`` characters of valid UTF-8. Run it on few rows (the staged
    rejects): the reason rules cost several regexes per row."""
    is_reject = F.col("kind") == "reject"
    line = F.col("line")
    return staged.withColumns({
        "reason": F.when(is_reject, reject_reason(line)).otherwise(F.col("reason")),
        "line": F.when(is_reject, F.substring(F.make_valid_utf8(line), 1, MAX_REJECT_LINE)),
    }).select(*staged.columns)


def read_dump_lines(spark: SparkSession, paths: list[str]) -> DataFrame:
    """Lines of every input file (globs and directories allowed; .gz/.bz2 by extension,
    bz2 split across tasks). A missing input is a configuration error, not an empty build."""
    if not paths:
        raise ConfigError("input.dumps is empty: nothing to parse")
    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()  # noqa: SLF001 (Hadoop glob API)
    for path in paths:
        hpath = jvm.org.apache.hadoop.fs.Path(path)
        matches = hpath.getFileSystem(conf).globStatus(hpath)
        if matches is None or len(matches) == 0:
            raise ConfigError(f"input dump {path!r} matches no file")
    # lineSep unset: \n, \r\n and \r all end a line (CRLF files parse like LF files)
    return spark.read.text(paths).select(F.col("value"), F.input_file_name().alias("source"))


# ---------------------------------------------------------------- phase 2: resolve


_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))", re.S)
_SIMPLE = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'", "\\": "\\"}


def _replace_escape(m: re.Match) -> str:
    hex4, hex8, simple = m.groups()
    if simple is not None:
        return _SIMPLE.get(simple, simple)
    return chr(int(hex4 or hex8, 16))


def unescape_literal(text: str) -> str:
    """N-Triples literal escapes -> text. Surrogate pairs written as two \\u escapes
    are joined; a lone surrogate (rejected in SQL before this runs) becomes U+FFFD."""
    out = _ESCAPE.sub(_replace_escape, text)
    if any("\ud800" <= ch <= "\udfff" for ch in out):
        out = out.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return out


@pandas_udf(StringType())
def unescape_batch(values: pd.Series) -> pd.Series:
    """Arrow batch unescaper; null in, null out (callers pass null for literals
    without a backslash, so those rows cost one null bit)."""
    mask = values.notna()
    out = values.copy()
    out[mask] = values[mask].map(unescape_literal)
    return out


def unescaped(value: Column, has_escape: Column) -> Column:
    """``value`` with its escapes decoded, running Python only where ``has_escape``."""
    return F.when(has_escape, unescape_batch(F.when(has_escape, value))).otherwise(value)


def conform(df: DataFrame, schema: StructType) -> DataFrame:
    """Columns of ``schema`` in its order and types."""
    return df.select([F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])


def read_property_table(spark: SparkSession, path: str) -> DataFrame:
    """A CSV with header ``id,label,datatype``; datatypes in RDF (``WikibaseItem``) or
    JSON (``wikibase-item``) spelling."""
    table = spark.read.option("header", True).option("mode", "PERMISSIVE").csv(path)
    missing = {"id", "datatype"} - set(table.columns)
    if missing:
        raise ConfigError(f"property table {path}: missing column(s) {', '.join(sorted(missing))}")
    mapping = F.create_map([F.lit(x) for kv in JSON_DATATYPES.items() for x in kv])
    dtype = F.btrim(F.col("datatype"))
    label = F.col("label") if "label" in table.columns else F.lit(None).cast("string")
    return table.select(
        F.upper(F.btrim(F.col("id"))).alias("property"),
        F.coalesce(F.element_at(mapping, F.lower(dtype)), dtype).alias("table_datatype"),
        label.alias("table_label"),
    ).where(F.col("property").rlike("^P[1-9][0-9]*$"))


def resolve_properties(
    statements: DataFrame,
    terms: DataFrame,
    declared: DataFrame,
    table: DataFrame | None,
    label_lang: str,
) -> DataFrame:
    """One row per property seen: datatype from the dump's propertyType lines, else
    the property table, else the most frequent shape of its objects; label in
    ``label_lang``. Columns: property, datatype, label, datatype_source."""
    declared = declared.groupBy("property").agg(F.min("declared_datatype").alias("declared_datatype"))
    shapes = statements.groupBy("property", "inferred_datatype").count()
    inferred = shapes.where(F.col("inferred_datatype").isNotNull()).groupBy("property").agg(
        F.max_by("inferred_datatype", F.struct("count", "inferred_datatype")).alias("inferred_datatype")
    )
    labels = (
        terms.where((F.col("kind") == "label") & (F.col("lang") == label_lang) & F.col("entity").startswith("P"))
        .groupBy(F.col("entity").alias("property"))
        .agg(F.min("value").alias("term_label"))
    )
    ids = (
        statements.select("property")
        .union(declared.select("property"))
        .union(labels.select("property"))
    )
    if table is not None:
        ids = ids.union(table.select("property"))
    props = ids.distinct().join(declared, "property", "left").join(inferred, "property", "left")
    props = props.join(labels, "property", "left")
    if table is not None:
        props = props.join(table, "property", "left")
    else:
        props = props.withColumn("table_datatype", F.lit(None).cast("string")).withColumn(
            "table_label", F.lit(None).cast("string")
        )
    dtype_source = (
        F.when(F.col("declared_datatype").isNotNull(), "declared")
        .when(F.col("table_datatype").isNotNull(), "table")
        .when(F.col("inferred_datatype").isNotNull(), "inferred")
        .otherwise("unknown")
    )
    return props.select(
        "property",
        F.coalesce("declared_datatype", "table_datatype", "inferred_datatype").alias("datatype"),
        F.coalesce("term_label", "table_label").alias("label"),
        dtype_source.alias("datatype_source"),
    )


def filter_reason(statements: DataFrame, properties: DataFrame, cfg: Config) -> DataFrame:
    """``statements`` with ``datatype`` and ``filter_reason`` (null: kept).

    The configured lists are literal sets in the plan (broadcast by construction);
    the property table is small and broadcast; only the excluded-subject set,
    derived from the data, is an anti-join."""
    f = cfg.filter
    df = statements.join(F.broadcast(properties.select("property", "datatype")), "property", "left")
    keep = [d for d in f.keep_datatypes]
    reason = (
        F.when(F.col("property").isin(list(f.deny_properties)) if f.deny_properties else F.lit(False),
               "denied_property")
        .when(~F.col("property").isin(list(f.allow_properties)) if f.allow_properties else F.lit(False),
              "not_in_allow_list")
        .when(F.col("datatype").isNull(), "datatype_unknown")
        .when(~F.col("datatype").isin(keep), F.concat(F.lit("datatype_"), F.col("datatype")))
        .when((F.col("object_kind") == "other") & F.col("datatype").isin("WikibaseItem"), "object_not_item")
    )
    df = df.withColumn("filter_reason", reason)
    if f.exclude_classes:
        excluded = (
            statements.where((F.col("property") == "P31") & F.col("object_item").isin(list(f.exclude_classes)))
            .select(F.col("subject").alias("excluded_subject"))
            .distinct()
        )
        df = df.join(excluded, df.subject == excluded.excluded_subject, "left").withColumn(
            "filter_reason",
            F.coalesce(F.col("filter_reason"),
                       F.when(F.col("excluded_subject").isNotNull(), F.lit("excluded_class"))),
        ).drop("excluded_subject")
    return df


# ---------------------------------------------------------------- the job


def run(spark: SparkSession, cfg: Config) -> dict[str, Any]:
    """Parse ``cfg.input.dumps`` into ``parse/{statements,terms,properties,rejects}``."""
    out = cfg.stage_dir("parse")
    staged_path = str(out / "_staged")
    languages = cfg.filter.languages or ["en"]

    lines = read_dump_lines(spark, cfg.input.dumps)
    matched = match_lines(lines, cfg.input.entity_namespace, cfg.input.direct_claim_namespace)
    staged = classify_lines(matched, languages)
    staged.write.mode("overwrite").partitionBy(STAGED_PARTITION).parquet(staged_path)

    staged = spark.read.parquet(staged_path)
    rejects = conform(name_rejects(staged.where(F.col("kind") == "reject")), REJECTS)
    rejects.write.mode("overwrite").parquet(str(out / "rejects"))
    rejects = spark.read.parquet(str(out / "rejects"))
    by_kind: dict[str, dict[str, int]] = {}
    for row in staged.where(F.col("kind") != "reject").groupBy("kind", "reason").count().collect():
        by_kind.setdefault(row["kind"], {})[row["reason"] or ""] = row["count"]
    by_kind["reject"] = {r["reason"]: r["count"] for r in rejects.groupBy("reason").count().collect()}

    stmts = staged.where(F.col("kind") == "statement")
    terms = staged.where(F.col("kind") == "term").select(
        F.col("subject").alias("entity"),
        F.col("term_kind").alias("kind"),
        F.col("object_lang").alias("lang"),
        unescaped(F.col("object_value"), F.col("has_escape")).alias("value"),
    )
    declared = staged.where(F.col("kind") == "property_type").select(
        F.col("subject").alias("property"), "declared_datatype"
    )
    table = read_property_table(spark, cfg.input.property_table) if cfg.input.property_table else None

    terms.write.mode("overwrite").parquet(str(out / "terms"))
    terms = spark.read.parquet(str(out / "terms"))
    props = resolve_properties(stmts, terms, declared, table, languages[0].lower())
    props.write.mode("overwrite").parquet(str(out / "_properties_resolved"))
    props = spark.read.parquet(str(out / "_properties_resolved"))
    conform(props, PROPERTIES).write.mode("overwrite").parquet(str(out / "properties"))

    flagged = filter_reason(stmts, props, cfg)
    kept = flagged.where(F.col("filter_reason").isNull()).withColumn(
        "object_value", unescaped(F.col("object_value"), F.col("has_escape"))
    )
    conform(kept, STATEMENTS).write.mode("overwrite").parquet(str(out / "statements"))
    filtered = {
        r["filter_reason"]: r["count"]
        for r in flagged.where(F.col("filter_reason").isNotNull()).groupBy("filter_reason").count().collect()
    }

    datatype_sources = {r["datatype_source"]: r["count"] for r in props.groupBy("datatype_source").count().collect()}
    rejected = by_kind.get("reject", {})
    counts: dict[str, Any] = {
        "lines_in": sum(sum(v.values()) for v in by_kind.values()),
        "statements": spark.read.parquet(str(out / "statements")).count(),
        "terms": terms.count(),
        "properties": sum(datatype_sources.values()),
        "rejected": sum(rejected.values()),
        "rejected_by_reason": dict(sorted(rejected.items())),
        "skipped_by_reason": dict(sorted(by_kind.get("skip", {}).items())),
        "statements_seen": sum(by_kind.get("statement", {}).values()),
        "statements_filtered_by_reason": dict(sorted(filtered.items())),
        "property_types_declared": sum(by_kind.get("property_type", {}).values()),
        "datatype_source": dict(sorted(datatype_sources.items())),
        "datatype_inferred": datatype_sources.get("inferred", 0),
    }
    for scratch in ("_properties_resolved", "_staged"):
        remove_tree(spark, out / scratch)
    write_counts(cfg, "parse", counts)
    log.info("parse: %s", counts)
    return counts


def main(argv=None) -> int:
    return run_job_main("parse", "Parse Wikidata truthy N-Triples into statements, terms and properties.", run, argv)


if __name__ == "__main__":
    sys.exit(main())
