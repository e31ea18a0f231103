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

Cost (docs/scale.md, "Tokenize"): the data is read, encoded and written once. The
Python workers decide each fact's outcome (stored, or the reject reason) and count
it (an accumulator, added once per task); the one write splits the rows by
(vocabulary, outcome), and a vocabulary's stored rows are then its ``tokens``
directory, moved into place, not rewritten; only the few rejects are read back. The
workers run with jemalloc preloaded where the machine has it (the Rust encoder
spends about half its time in glibc's malloc), vocabularies whose normalizer
leaves ASCII text unchanged (Qwen2.5's NFC) skip it for ASCII facts
(``refactx_index.vocab.tokenizer_for_ascii``), and byte-level BPE vocabularies whose
pre-tokenizer starts a pre-token at every " <" (Qwen2.5, Llama 3, GPT-2) encode each
distinct piece of a batch once (``refactx_index.vocab.facts_encode_by_pieces``: a
subject's facts are neighbours, properties recur); none of them changes an id.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from pyspark.accumulators import AccumulatorParam
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from refactx_pipeline.config import Config, TokenizeConfig
from refactx_index.errors import ConfigError
from refactx_index.vocab import (
    CONTEXT,
    ENCODED_REJECT_REASON,
    Vocabulary,
    open_vocabulary,
)

from refactx_pipeline.common import remove_tree, stage_input, write_counts
from refactx_pipeline.stages.contract import StageContext, StageCounts
from refactx_pipeline.stages.schemas import TOKENS

log = logging.getLogger(__name__)

STAGE = "tokenize"
# Bumped whenever the ids a vocabulary yields for a text could change (then nothing is reused).
ENCODING = f"context:{CONTEXT}|no-special|v1"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

# A fact's outcome for one vocabulary: stored, or the reject reason it is counted under
STORED = "ok"
OVER_MAX_TOKENS = "over_max_tokens"
UNKNOWN_STATUS = "unknown_status"
OUTCOMES = (STORED, OVER_MAX_TOKENS, *ENCODED_REJECT_REASON.values(), UNKNOWN_STATUS)

# what the single encoding pass yields, all vocabularies together (encode_all)
ENCODED = StructType(
    [
        StructField("vocabulary", StringType(), False),
        StructField("outcome", StringType(), False),  # one of OUTCOMES
        StructField("fact_id", LongType(), False),
        StructField("token_ids", TOKENS["token_ids"].dataType, False),
    ]
)
# how the staging directory is read back: files hold (fact_id, token_ids), the
# directories name vocabulary and outcome
_STAGED = StructType([*TOKENS.fields, ENCODED["vocabulary"], ENCODED["outcome"]])

# Per-vocabulary counters of the encoding pass, keyed "<vocabulary index>:<name>":
# written, tokens, max (the longest stored fact), encoded, encoded_ok (no refusal of
# the encoder's own), and one per reject reason (OUTCOMES[1:]).
_COUNTERS = ("written", "tokens", "max", "encoded", "encoded_ok", *OUTCOMES[1:])


class CountsParam(AccumulatorParam):
    """Merges counter dicts: ``max`` keys by maximum, the others by sum.

    The workers add their task's counters once, at the end of the task. Spark merges
    the updates of a result stage's task once, whatever retries or speculative
    copies ran, so the counts are those of the data written.
    """

    def zero(self, value: dict[str, int]) -> dict[str, int]:
        return {}

    def addInPlace(self, value1: dict[str, int], value2: dict[str, int]) -> dict[str, int]:
        for key, value in value2.items():
            value1[key] = max(value1.get(key, 0), value) if key.endswith(":max") else value1.get(key, 0) + value
        return value1

# Shared libraries preloaded into the tokenize stage's Python workers when the driver
# has one (the first found): the Rust encoder allocates per token, and with jemalloc it
# runs about 1.8 times as fast as with glibc's malloc. Choose yourself with
# spark.executorEnv.LD_PRELOAD (an empty value preloads nothing).
WORKER_PRELOAD = (
    "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
    "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
    "/usr/lib64/libjemalloc.so.2",
    "/usr/lib/libjemalloc.so.2",
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


def _encode_partition(
    specs: Sequence[EncoderSpec], fact_prefix: str, fact_suffix: str, max_tokens: int | None, counts: Any
):
    """The mapInArrow function: (fact_id, text, need_0..need_k) batches -> ENCODED batches.

    Per batch and vocabulary: one ``encode_facts`` call (one Rust batch encode), then
    numpy and Arrow array work only; the outcome of each fact is decided here, and
    counted into the accumulator ``counts`` (CountsParam) once per task.
    """

    def encode(batches: Iterator[Any]) -> Iterator[Any]:
        import numpy as np
        import pyarrow as pa

        from refactx_index.vocab import (
            ENCODED_OK,
            ENCODED_REJECT_REASON,
            cached_ascii_tokenizer_from_bytes,
            cached_tokenizer_from_bytes,
            encode_facts,
        )

        # Spark runs one task per core: the Rust encoder must not start its own threads too
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        tokenizers = [cached_tokenizer_from_bytes(s.tokenizer_bytes, s.sha256) for s in specs]
        ascii_tokenizers = [cached_ascii_tokenizer_from_bytes(s.tokenizer_bytes, s.sha256) for s in specs]
        outcome_labels = pa.array(OUTCOMES, type=pa.string())
        # ENCODED_* status -> index in OUTCOMES
        by_status = np.full(max([ENCODED_OK, *ENCODED_REJECT_REASON]) + 1, OUTCOMES.index(UNKNOWN_STATUS), np.int32)
        by_status[ENCODED_OK] = OUTCOMES.index(STORED)
        for status, reason in ENCODED_REJECT_REASON.items():
            by_status[status] = OUTCOMES.index(reason)
        over = OUTCOMES.index(OVER_MAX_TOKENS)
        schema = pa.schema(
            [
                pa.field("vocabulary", pa.string(), False),
                pa.field("outcome", pa.string(), False),
                pa.field("fact_id", pa.int64(), False),
                pa.field("token_ids", pa.list_(pa.field("element", pa.int32(), False)), False),
            ]
        )
        task: dict[str, int] = {}
        for batch in batches:
            fact_ids, texts = batch.column("fact_id"), batch.column("text")
            every_text: list[str] | None = None
            for i, spec in enumerate(specs):
                need = batch.column(f"need_{i}").to_numpy(zero_copy_only=False)
                if need.all():
                    if every_text is None:
                        every_text = texts.to_pylist()
                    mine, ids = every_text, fact_ids
                else:
                    rows = pa.array(np.flatnonzero(need))
                    if len(rows) == 0:
                        continue
                    mine, ids = texts.take(rows).to_pylist(), fact_ids.take(rows)
                encoded = encode_facts(
                    tokenizers[i], mine, spec.forbidden_ids, fact_prefix, fact_suffix,
                    ascii_tokenizer=ascii_tokenizers[i],
                )
                status = encoded.status.astype(np.int64)
                known = (status >= 0) & (status < len(by_status))
                outcome = np.where(known, by_status[np.where(known, status, 0)], OUTCOMES.index(UNKNOWN_STATUS))
                lengths = np.diff(encoded.offsets)
                if max_tokens is not None:
                    outcome[(encoded.status == ENCODED_OK) & (lengths > max_tokens)] = over
                n = len(mine)
                tally = np.bincount(outcome, minlength=len(OUTCOMES))
                stored = outcome == 0
                for name, value in (
                    ("written", tally[0]),
                    ("tokens", lengths[stored].sum()),
                    ("encoded", n),
                    ("encoded_ok", np.count_nonzero(encoded.status == ENCODED_OK)),
                    *zip(OUTCOMES[1:], tally[1:]),
                ):
                    task[f"{i}:{name}"] = task.get(f"{i}:{name}", 0) + int(value)
                if stored.any():
                    task[f"{i}:max"] = max(task.get(f"{i}:max", 0), int(lengths[stored].max()))
                yield pa.RecordBatch.from_arrays(
                    [
                        pa.repeat(pa.scalar(spec.name, pa.string()), n),
                        outcome_labels.take(pa.array(outcome)),
                        ids,
                        pa.ListArray.from_arrays(
                            pa.array(encoded.offsets.astype(np.int32)), pa.array(encoded.values, type=pa.int32())
                        ),
                    ],
                    schema=schema,
                )
        counts.add(task)

    return encode


def worker_preload(spark: SparkSession) -> str | None:
    """The library the tokenize workers get as LD_PRELOAD (None: leave the environment as it is)."""
    if "LD_PRELOAD" in spark.sparkContext.environment:  # spark.executorEnv.LD_PRELOAD decides
        return None
    return next((path for path in WORKER_PRELOAD if os.path.isfile(path)), None)


def encode_all(
    facts: DataFrame,
    vocabs: Sequence[Vocabulary],
    fact_prefix: str,
    fact_suffix: str,
    reusable: Sequence[DataFrame | None] = (),
    max_tokens: int | None = None,
    counts: Any = None,
) -> DataFrame:
    """The encoded rows of every vocabulary (schema ENCODED) from one pass over ``facts`` (fact_id, text).

    ``reusable[i]`` (fact_id, ...) lists the facts vocabulary ``i`` need not encode.
    Facts no vocabulary needs are not sent to Python at all. A fact over
    ``max_tokens`` (None: no limit) has the outcome ``over_max_tokens``. ``counts``
    (an accumulator of CountsParam; None: a new one) receives the per-vocabulary
    counters when the result is computed.
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
    if counts is None:
        counts = spark.sparkContext.accumulator({}, CountsParam())
    function = _encode_partition(specs, fact_prefix, fact_suffix, max_tokens, counts)
    # The function's environment is taken when mapInArrow is called: the preload
    # reaches this stage's workers (their own Python daemon) and no other stage's.
    environment = spark.sparkContext.environment
    preload = worker_preload(spark)
    if preload:
        environment["LD_PRELOAD"] = preload
    try:
        return frame.mapInArrow(function, ENCODED)
    finally:
        if preload:
            environment.pop("LD_PRELOAD", None)


def reused_rows(name: str, tokens: DataFrame, max_tokens: int | None) -> DataFrame:
    """Rows (schema ENCODED) of ids vocabulary ``name`` takes from an earlier build.

    A fact over ``max_tokens`` is rejected whether it was encoded now or reused, so a
    changed limit applies to both and the result equals a full build's.
    """
    outcome = F.lit(STORED)
    if max_tokens is not None:
        outcome = F.when(F.size("token_ids") > max_tokens, F.lit(OVER_MAX_TOKENS)).otherwise(outcome)
    return tokens.select(F.lit(name).alias("vocabulary"), outcome.alias("outcome"), "fact_id", "token_ids")


def _reused_metrics() -> list[Any]:
    """Named aggregates over one vocabulary's reused rows (an Observation; these rows skip Python)."""
    size, stored = F.size("token_ids"), F.col("outcome") == STORED
    return [
        F.count_if(stored).alias("written"),
        F.coalesce(F.sum(F.when(stored, size)), F.lit(0)).alias("tokens"),
        F.coalesce(F.max(F.when(stored, size)), F.lit(0)).alias("max"),
        F.count_if(F.col("outcome") == OVER_MAX_TOKENS).alias(OVER_MAX_TOKENS),
    ]


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


def _replace_directory(spark: SparkSession, source: Path, target: Path) -> None:
    """Move ``source`` to ``target`` (replacing it) through Hadoop's FileSystem: a rename, no copy."""
    jvm = spark.sparkContext._jvm
    src, dst = jvm.org.apache.hadoop.fs.Path(str(source)), jvm.org.apache.hadoop.fs.Path(str(target))
    fs = dst.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    fs.delete(dst, True)
    fs.mkdirs(dst.getParent())
    if not fs.rename(src, dst):
        raise OSError(f"could not move {source} to {target}")


def run(ctx: StageContext) -> StageCounts:
    """Tokenize verbalize/facts (a path build: paths/paths) for every configured vocabulary
    (see the module docstring)."""
    spark, cfg = ctx.spark, ctx.cfg
    tcfg = cfg.tokenize
    vocabs = vocabularies(tcfg)
    if cfg.path_index.enabled:
        facts_path = stage_input(cfg, STAGE, "paths", "paths")
    elif cfg.input.facts:
        facts_path = stage_input(cfg, STAGE, "facts", "facts")
    else:
        facts_path = stage_input(cfg, STAGE, "verbalize", "facts")
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

    # One job: encode (or reuse), decide every outcome, count, write split by
    # (vocabulary, outcome). The stored rows' files are already TOKENS files.
    staging = _stage_path(cfg, "_encoded")
    counters = spark.sparkContext.accumulator({}, CountsParam())
    rows = encode_all(facts, vocabs, tcfg.fact_prefix, tcfg.fact_suffix, reused, tcfg.max_tokens, counters)
    observations: dict[int, Observation] = {}
    for i, (vocab, previous) in enumerate(zip(vocabs, reused)):
        if previous is not None:
            observations[i] = Observation()
            rows = rows.unionByName(
                reused_rows(vocab.name, previous, tcfg.max_tokens).observe(observations[i], *_reused_metrics())
            )
    rows.write.mode("overwrite").partitionBy("vocabulary", "outcome").parquet(str(staging))
    counts_of: list[dict[str, int]] = []
    for i in range(len(vocabs)):
        mine = {name: int(counters.value.get(f"{i}:{name}", 0)) for name in _COUNTERS}
        if i in observations:
            from_reuse = {key: int(value) for key, value in observations[i].get.items()}
            mine["max"] = max(mine["max"], from_reuse.pop("max"))
            for key, value in from_reuse.items():
                mine[key] += value
        counts_of.append(mine)
    # with nothing reused every fact was encoded once per vocabulary
    facts_total = facts.count() if observations else counts_of[0]["encoded"]

    per_vocabulary: dict[str, Any] = {}
    reject_counts: dict[str, dict[str, int]] = {}
    for vocab, mine in zip(vocabs, counts_of):
        out = _stage_path(cfg, vocab.name, "tokens")
        if mine["written"]:
            _replace_directory(spark, staging / f"vocabulary={vocab.name}" / f"outcome={STORED}", out)
        else:
            spark.createDataFrame([], TOKENS).write.mode("overwrite").parquet(str(out))
        reject_counts[vocab.name] = {r: mine[r] for r in OUTCOMES[1:] if mine[r]}
        per_vocabulary[vocab.name] = {
            "facts_written": mine["written"],
            "tokens": mine["tokens"],
            "max_tokens_per_fact": mine["max"],
            "encoded": mine["encoded"],
            "encoded_ok": mine["encoded_ok"],
            "reuse": reuse_notes[vocab.name],
        }

    # what is left in staging are the rejects (a few rows)
    rejects_path = _stage_path(cfg, "rejects")
    if any(reject_counts.values()):
        rejects = spark.read.schema(_STAGED).parquet(str(staging)).where(F.col("outcome") != STORED).select(
            "vocabulary", "fact_id", F.col("outcome").alias("reason"), F.size("token_ids").cast("int").alias("n_tokens")
        )
    else:
        rejects = spark.createDataFrame([], TOKEN_REJECTS)
    rejects.write.mode("overwrite").parquet(str(rejects_path))

    for vocab, meta in zip(vocabs, metas):
        entry = per_vocabulary[vocab.name]
        entry["rejected"] = dict(sorted(reject_counts[vocab.name].items()))
        # every fact is written, encoded-and-refused, or over the limit; the rest were reused
        over = entry["rejected"].get(OVER_MAX_TOKENS, 0)
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
