"""Stage 5, tokenize: facts -> token ids, one dataset per vocabulary, incremental.

One pass over ``verbalize/facts`` encodes every configured vocabulary: Arrow
batches (``mapInArrow``) go to the ``tokenizers`` Rust batch encoder through
``refactx_index.vocab.encode_facts``; each Python worker parses a tokenizer once.
The ids are those of ``fact_prefix + text + fact_suffix`` as a model writes them
after ``Fact:``, never with special tokens: an id of BOS/EOS/UNK/PAD or any
special token in a fact makes it a counted reject, so no stored fact holds one.

Incremental: with ``tokenize.reuse_from`` (the tokenize directory of an earlier
build), a vocabulary whose ``meta.json`` there records the same tokenizer file
hash, prefix, suffix, forbidden ids and encoding reuses the stored ids of facts
with a known ``fact_id``; only new facts are encoded. The result equals a full
build's.

Outputs, per vocabulary ``<name>``: ``tokenize/<name>/tokens`` (schema TOKENS) and
``tokenize/<name>/meta.json``; for all: ``tokenize/rejects`` (schema
TOKEN_REJECTS below) and ``tokenize/counts.json``.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from refactx_pipeline.config import Config, TokenizeConfig
from refactx_index.errors import ConfigError
from refactx_index.vocab import (
    CONTEXT,
    ENCODED_OK,
    ENCODED_REJECT_REASON,
    Vocabulary,
    open_vocabulary,
)

from refactx_pipeline.common import remove_tree, write_counts
from refactx_pipeline.schemas import TOKENS

log = logging.getLogger(__name__)

STAGE = "tokenize"
# Bumped whenever the ids a vocabulary yields for a text could change (then nothing is reused).
ENCODING = f"context:{CONTEXT}|no-special|v1"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

# what the single encoding pass yields, all vocabularies together
ENCODED = StructType(
    [
        StructField("vocabulary", StringType(), False),
        StructField("fact_id", LongType(), False),
        StructField("token_ids", TOKENS["token_ids"].dataType, False),
        StructField("status", IntegerType(), False),  # refactx_index.vocab.ENCODED_*
    ]
)

# tokenize/rejects
TOKEN_REJECTS = StructType(
    [
        StructField("vocabulary", StringType(), False),
        StructField("fact_id", LongType(), False),
        StructField("reason", StringType(), False),  # over_max_tokens | forbidden_token | merges_with_context
        StructField("n_tokens", IntegerType(), False),
    ]
)

@dataclass(frozen=True)
class EncoderSpec:
    """What a Python worker needs to encode for one vocabulary (shipped in the task closure)."""

    name: str
    sha256: str
    tokenizer_bytes: bytes
    forbidden_ids: tuple[int, ...]


def vocabularies(tcfg: TokenizeConfig) -> list[Vocabulary]:
    """The configured vocabularies, resolved and hashed; names must be distinct directory names."""
    if not tcfg.vocabularies:
        raise ConfigError("tokenize.vocabularies is empty: name at least one (name=path)")
    names = [v.name for v in tcfg.vocabularies]
    bad = [n for n in names if not _NAME.match(n) or n == "rejects"]
    if bad:
        raise ConfigError(f"vocabulary names must match {_NAME.pattern} and not be 'rejects': {bad}")
    if len(set(names)) != len(names):
        raise ConfigError(f"vocabulary names repeat: {names}")
    if tcfg.max_tokens < 1:
        raise ConfigError("tokenize.max_tokens must be at least 1")
    return [open_vocabulary(v.name, v.path) for v in tcfg.vocabularies]


def meta_for(vocab: Vocabulary, tcfg: TokenizeConfig) -> dict[str, Any]:
    """The identity of a token dataset: what must match for its ids to be reused."""
    return {
        "name": vocab.name,
        "path": vocab.path,
        "sha256": vocab.sha256,
        "vocab_size": vocab.vocab_size,
        "fact_prefix": tcfg.fact_prefix,
        "fact_suffix": tcfg.fact_suffix,
        "context": CONTEXT,
        "encoding": ENCODING,
        "forbidden_ids": list(vocab.forbidden_ids),
    }


_REUSE_KEYS = ("sha256", "fact_prefix", "fact_suffix", "encoding", "forbidden_ids")


def reuse_mismatch(old_meta: dict[str, Any], new_meta: dict[str, Any]) -> str | None:
    """Why an earlier token dataset cannot be reused (None: it can)."""
    for key in _REUSE_KEYS:
        if old_meta.get(key) != new_meta.get(key):
            return f"{key} differs"
    return None


def _encode_partition(specs: Sequence[EncoderSpec], fact_prefix: str, fact_suffix: str):
    """The mapInArrow function: (fact_id, text, need_0..need_k) batches -> ENCODED batches."""

    def encode(batches: Iterator[Any]) -> Iterator[Any]:
        import numpy as np
        import pyarrow as pa

        from refactx_index.vocab import cached_tokenizer_from_bytes, encode_facts

        # Spark runs one task per core: the Rust encoder must not start its own threads too
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        tokenizers = [cached_tokenizer_from_bytes(s.tokenizer_bytes, s.sha256) for s in specs]
        for batch in batches:
            fact_ids = batch.column("fact_id")
            texts = batch.column("text").to_pylist()
            for i, spec in enumerate(specs):
                need = batch.column(f"need_{i}").to_numpy(zero_copy_only=False)
                rows = np.flatnonzero(need)
                if len(rows) == 0:
                    continue
                encoded = encode_facts(
                    tokenizers[i], [texts[r] for r in rows], spec.forbidden_ids, fact_prefix, fact_suffix
                )
                token_ids = pa.ListArray.from_arrays(
                    pa.array(encoded.offsets.astype(np.int32)), pa.array(encoded.values, type=pa.int32())
                )
                yield pa.RecordBatch.from_arrays(
                    [
                        pa.array([spec.name] * len(rows), type=pa.string()),
                        fact_ids.take(pa.array(rows)),
                        token_ids,
                        pa.array(encoded.status.astype(np.int32)),
                    ],
                    schema=pa.schema(
                        [
                            pa.field("vocabulary", pa.string(), False),
                            pa.field("fact_id", pa.int64(), False),
                            pa.field("token_ids", pa.list_(pa.field("element", pa.int32(), False)), False),
                            pa.field("status", pa.int32(), False),
                        ]
                    ),
                )

    return encode


def encode_all(
    facts: DataFrame,
    vocabs: Sequence[Vocabulary],
    fact_prefix: str,
    fact_suffix: str,
    reusable: Sequence[DataFrame | None] = (),
) -> DataFrame:
    """One pass over ``facts`` (fact_id, text) for every vocabulary (schema ENCODED).

    ``reusable[i]`` (fact_id, ...) lists the facts vocabulary ``i`` need not encode.
    Facts no vocabulary needs are not sent to Python at all.
    """
    frame = facts.select("fact_id", "text")
    for i, vocab in enumerate(vocabs):
        known = reusable[i] if i < len(reusable) else None
        if known is None:
            frame = frame.withColumn(f"need_{i}", F.lit(True))
        else:
            flags = known.select("fact_id", F.lit(False).alias(f"need_{i}")).dropDuplicates(["fact_id"])
            frame = frame.join(flags, "fact_id", "left").withColumn(f"need_{i}", F.coalesce(f"need_{i}", F.lit(True)))
    any_need = F.lit(False)
    for i in range(len(vocabs)):
        any_need = any_need | F.col(f"need_{i}")
    frame = frame.where(any_need)
    spark = facts.sparkSession
    parallelism = spark.sparkContext.defaultParallelism
    if frame.rdd.getNumPartitions() < parallelism:  # a small facts file is one split: use every core
        frame = frame.repartition(parallelism)
    specs = [
        EncoderSpec(v.name, v.sha256, Path(v.file).read_bytes(), tuple(v.forbidden_ids)) for v in vocabs
    ]
    return frame.mapInArrow(_encode_partition(specs, fact_prefix, fact_suffix), ENCODED)


def split_encoded(
    name: str, encoded: DataFrame, reused: DataFrame | None, max_tokens: int
) -> tuple[DataFrame, DataFrame]:
    """(tokens, rejects) of vocabulary ``name`` from its encoded rows and reused tokens.

    ``encoded`` has the ENCODED schema (rows of this vocabulary); ``reused`` the
    TOKENS schema, already limited to current facts. A fact over ``max_tokens`` is
    rejected whether it was encoded now or reused, so a changed limit applies to
    both and the result equals a full build's.
    """
    n_tokens = F.size("token_ids").cast("int")
    candidates = encoded.where(F.col("status") == ENCODED_OK).select("fact_id", "token_ids")
    if reused is not None:
        candidates = candidates.unionByName(reused.select("fact_id", "token_ids"))
    tokens = candidates.where(n_tokens <= max_tokens).select(*TOKENS.fieldNames())
    reason = F.lit("unknown_status")
    for status, label in ENCODED_REJECT_REASON.items():
        reason = F.when(F.col("status") == status, F.lit(label)).otherwise(reason)
    refused = encoded.where(F.col("status") != ENCODED_OK).select(
        F.lit(name).alias("vocabulary"), "fact_id", reason.alias("reason"), n_tokens.alias("n_tokens")
    )
    too_long = candidates.where(n_tokens > max_tokens).select(
        F.lit(name).alias("vocabulary"), "fact_id", F.lit("over_max_tokens").alias("reason"), n_tokens.alias("n_tokens")
    )
    return tokens, refused.unionByName(too_long)


# ---------------------------------------------------------------- job
def _stage_path(cfg: Config, *parts: str) -> Path:
    return cfg.stage_dir(STAGE).joinpath(*parts)


def _previous_tokens(
    spark: SparkSession, cfg: Config, vocab: Vocabulary, meta: dict[str, Any]
) -> tuple[DataFrame | None, str]:
    """The earlier build's tokens of ``vocab`` if reusable, and why (not)."""
    if not cfg.tokenize.reuse_from:
        return None, "no reuse_from"
    root = Path(cfg.tokenize.reuse_from)
    if root.resolve() == cfg.stage_dir(STAGE).resolve():
        raise ConfigError(
            f"tokenize.reuse_from {root} is this build's own tokenize directory: point it at an earlier build"
        )
    meta_path, tokens_path = root / vocab.name / "meta.json", root / vocab.name / "tokens"
    if not meta_path.is_file() or not tokens_path.exists():
        return None, f"{meta_path.parent} has no meta.json and tokens"
    try:
        old_meta = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        return None, f"{meta_path} unreadable: {exc}"
    mismatch = reuse_mismatch(old_meta, meta)
    if mismatch:
        return None, mismatch
    return spark.read.parquet(str(tokens_path)).select(*TOKENS.fieldNames()), "reused"


def run(spark: SparkSession, cfg: Config) -> dict[str, Any]:
    """Tokenize verbalize/facts for every configured vocabulary (see the module docstring)."""
    tcfg = cfg.tokenize
    vocabs = vocabularies(tcfg)
    facts_path = cfg.stage_dir("verbalize") / "facts"
    if not facts_path.exists():
        raise FileNotFoundError(f"{facts_path} is missing: run the verbalize stage first")
    facts = spark.read.parquet(str(facts_path)).select("fact_id", "text")
    fact_ids = facts.select("fact_id")

    metas = [meta_for(v, tcfg) for v in vocabs]
    reused: list[DataFrame | None] = []
    reuse_notes: dict[str, str] = {}
    for vocab, meta in zip(vocabs, metas):
        previous, note = _previous_tokens(spark, cfg, vocab, meta)
        reuse_notes[vocab.name] = note
        # only ids of facts that still exist are reused
        reused.append(None if previous is None else previous.join(fact_ids, "fact_id", "left_semi"))
        log.info("vocabulary %s (%s, %d ids): %s", vocab.name, vocab.sha256[:12], vocab.vocab_size, note)

    staging = _stage_path(cfg, "_encoded")
    encoded_all = encode_all(facts, vocabs, tcfg.fact_prefix, tcfg.fact_suffix, reused)
    encoded_all.write.mode("overwrite").partitionBy("vocabulary").parquet(str(staging))
    encoded = spark.read.schema(ENCODED).parquet(str(staging)) if any(staging.glob("vocabulary=*")) else None
    by_status: dict[tuple[str, int], int] = {}
    if encoded is not None:
        for row in encoded.groupBy("vocabulary", "status").count().collect():
            by_status[(row["vocabulary"], int(row["status"]))] = int(row["count"])

    empty_encoded = spark.createDataFrame([], ENCODED)
    rejects: DataFrame | None = None
    per_vocabulary: dict[str, Any] = {}
    facts_total = facts.count()
    for vocab, previous in zip(vocabs, reused):
        mine = encoded.where(F.col("vocabulary") == vocab.name) if encoded is not None else empty_encoded
        tokens, vocab_rejects = split_encoded(vocab.name, mine, previous, tcfg.max_tokens)
        out = _stage_path(cfg, vocab.name, "tokens")
        tokens.write.mode("overwrite").parquet(str(out))
        rejects = vocab_rejects if rejects is None else rejects.unionByName(vocab_rejects)

        stats = spark.read.parquet(str(out)).agg(
            F.count("*").alias("facts"),
            F.coalesce(F.sum(F.size("token_ids")), F.lit(0)).alias("tokens"),
            F.coalesce(F.max(F.size("token_ids")), F.lit(0)).alias("max_len"),
        ).first()
        encoded_n = sum(n for (name, _), n in by_status.items() if name == vocab.name)
        per_vocabulary[vocab.name] = {
            "facts_written": int(stats["facts"]),
            "tokens": int(stats["tokens"]),
            "max_tokens_per_fact": int(stats["max_len"]),
            "encoded": encoded_n,
            "encoded_ok": by_status.get((vocab.name, ENCODED_OK), 0),
            "reuse": reuse_notes[vocab.name],
        }

    rejects_path = _stage_path(cfg, "rejects")
    rejects.write.mode("overwrite").parquet(str(rejects_path))
    reject_counts: dict[str, dict[str, int]] = {v.name: {} for v in vocabs}
    for row in spark.read.parquet(str(rejects_path)).groupBy("vocabulary", "reason").count().collect():
        reject_counts[row["vocabulary"]][row["reason"]] = int(row["count"])

    for vocab, meta in zip(vocabs, metas):
        entry = per_vocabulary[vocab.name]
        entry["rejected"] = dict(sorted(reject_counts[vocab.name].items()))
        # every fact is written, encoded-and-refused, or over the limit; the rest were reused
        over = entry["rejected"].get("over_max_tokens", 0)
        entry["reused"] = entry["facts_written"] + over - entry["encoded_ok"]
        meta_out = dict(meta, max_tokens=tcfg.max_tokens, facts=facts_total, counts=entry)
        write_counts(cfg, STAGE, meta_out, name=f"{vocab.name}/meta.json")

    remove_tree(spark, staging)
    counts = {
        "facts": facts_total,
        "max_tokens": tcfg.max_tokens,
        "reuse_from": tcfg.reuse_from,
        "vocabularies": per_vocabulary,
        "encoded": {name: v["encoded"] for name, v in per_vocabulary.items()},
        "reused": {name: v["reused"] for name, v in per_vocabulary.items()},
    }
    write_counts(cfg, STAGE, counts)
    return counts
