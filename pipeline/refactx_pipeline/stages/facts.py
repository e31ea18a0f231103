"""Stage facts: fact texts someone already has -> the facts tokenize reads.

For a team that has its facts as text already (from another verbalizer, a curated list, an
export of another index): ``input.facts`` names text files (one fact a line; ``.gz`` and
``.bz2`` are read as such) or Parquet files (the string column ``input.facts_column``), and
this stage replaces parse, sitelinks, labels and verbalize; tokenize and every later stage run
unchanged (``refactx-pipeline build --set input.facts=my-facts.txt``, docs/ingestion.md).

Each text is made one line the way verbalize makes its own (whitespace runs, newlines
included, become one space; trimmed). A text that is then empty, or longer than
``MAX_FACT_CHARS``, is not a fact: it goes to ``facts/rejects`` with its reason and is
counted. A text given more than once is one fact (counted as ``duplicates``). The id is
verbalize's (``xxhash64`` of the text, ``refactx_index.tree.provenance.fact_id``), and a text whose
id another text already has is dropped and counted, as verbalize does. There is no
provenance: the texts name no entities.

Outputs: ``facts/facts`` (schema FACTS, kind ``text``), ``facts/rejects`` (schema REJECTS),
``facts/counts.json``.
"""

from __future__ import annotations

import glob
import logging
from pathlib import Path
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from refactx_pipeline.common import remove_tree, write_counts
from refactx_pipeline.errors import ConfigError
from refactx_pipeline.stages.contract import StageContext, StageCounts
from refactx_pipeline.stages.schemas import FACTS, REJECTS
from refactx_pipeline.stages.verbalize import clean_text, drop_id_collisions

log = logging.getLogger(__name__)

STAGE = "facts"
KIND = "text"
# A fact is a line a model writes: a text this long is a file read the wrong way (a whole
# document on one line), not a fact; tokenize's max_tokens would refuse it later anyway,
# after paying for its encoding
MAX_FACT_CHARS = 10_000
EMPTY, TOO_LONG = "empty", "too_long"


def is_parquet(path: str) -> bool:
    """Parquet input: a ``.parquet`` file, or a directory holding any (Spark's own output)."""
    p = Path(path)
    if p.suffix == ".parquet":
        return True
    return p.is_dir() and any(p.glob("*.parquet"))


def read_texts(spark: SparkSession, paths: list[str], column: str = "text") -> DataFrame:
    """``(source, line)``: every input text with the file it came from; text and Parquet
    inputs may be mixed."""
    texts = [p for p in paths if not is_parquet(p)]
    parquet = [p for p in paths if is_parquet(p)]
    parts = []
    if texts:
        parts.append(spark.read.text(texts).select(F.input_file_name().alias("source"), F.col("value").alias("line")))
    if parquet:
        table = spark.read.parquet(*parquet)
        field = next((f for f in table.schema.fields if f.name == column), None)
        if field is None or not isinstance(field.dataType, StringType):
            found = ", ".join(f"{f.name} ({f.dataType.simpleString()})" for f in table.schema.fields)
            raise ConfigError(f"input.facts: the Parquet input has no string column {column!r} "
                              f"(input.facts_column); its columns: {found}")
        parts.append(table.select(F.input_file_name().alias("source"), F.col(column).alias("line")))
    frame = parts[0]
    for part in parts[1:]:
        frame = frame.unionByName(part)
    return frame


def facts_from_texts(lines: DataFrame) -> tuple[DataFrame, DataFrame]:
    """``(candidates, rejects)`` of ``(source, line)`` rows: the cleaned texts that are facts
    (one row per input text, duplicates included; column ``text``), and the REJECTS rows of
    the others (a null text counts as empty)."""
    cleaned = lines.select("source", "line", F.coalesce(clean_text(F.col("line")), F.lit("")).alias("text"))
    reason = (F.when(F.col("text") == "", F.lit(EMPTY))
              .when(F.length("text") > MAX_FACT_CHARS, F.lit(TOO_LONG)))
    flagged = cleaned.withColumn("reason", reason)
    rejects = flagged.where(F.col("reason").isNotNull()).select(
        "source", F.substring(F.coalesce("line", F.lit("")), 1, 10_000).alias("line"), "reason")
    return flagged.where(F.col("reason").isNull()).select("text"), rejects


def distinct_facts(texts: DataFrame) -> DataFrame:
    """One FACTS row per distinct ``text`` of ``(text, count)`` rows: verbalize's id, kind
    ``text``, no property."""
    return texts.select(
        F.xxhash64("text").alias("fact_id"), "text", F.lit(KIND).alias("kind"),
        F.lit(None).cast("string").alias("property"),
    )


def run(ctx: StageContext) -> StageCounts:
    """Read ``input.facts``, write facts/facts, facts/rejects and counts.json."""
    spark, cfg = ctx.spark, ctx.cfg
    paths = list(cfg.input.facts)
    if not paths:
        raise ConfigError("stage facts reads input.facts, which names no file: "
                          "--set input.facts=FILE[,FILE] (text, one fact a line, or Parquet)")
    missing = [p for p in paths if not glob.glob(p)]
    if missing:
        raise ConfigError(f"input.facts: no such file: {', '.join(missing)}")
    candidates, rejects = facts_from_texts(read_texts(spark, paths, cfg.input.facts_column))
    out = cfg.stage_dir(STAGE)
    rejects.select(*REJECTS.fieldNames()).write.mode("overwrite").parquet(str(out / "rejects"))
    written_rejects = spark.read.parquet(str(out / "rejects"))
    rejected = {r["reason"]: int(r["count"]) for r in written_rejects.groupBy("reason").count().collect()}
    # each distinct text with how often it was given: the counts come from this small dataset,
    # so the inputs are read twice (rejects, texts), not once more to be counted
    staged = out / "_distinct"
    candidates.groupBy("text").count().write.mode("overwrite").parquet(str(staged))
    texts = spark.read.parquet(str(staged))
    kept, _ = drop_id_collisions(distinct_facts(texts))
    kept.select(*FACTS.fieldNames()).write.mode("overwrite").parquet(str(out / "facts"))
    given = texts.agg(F.count("*").alias("distinct"), F.sum("count").alias("given")).first()
    distinct_texts = int(given["distinct"])
    texts_in = int(given["given"] or 0) + sum(rejected.values())
    facts = spark.read.parquet(str(out / "facts")).count()
    remove_tree(spark, staged)
    counts = {
        "texts_in": texts_in,
        "rejected": dict(sorted(rejected.items())),
        # every text read is rejected, a repeat of an earlier text, or a distinct text
        "duplicates": texts_in - sum(rejected.values()) - distinct_texts,
        "distinct_texts": distinct_texts,
        "fact_id_collision": distinct_texts - facts,
        "facts": facts,
        "inputs": paths,
    }
    write_counts(cfg, STAGE, counts)
    log.info("facts: %d texts read, %d facts, %d duplicates, rejected %s", texts_in, facts,
             counts["duplicates"], counts["rejected"])
    return counts
