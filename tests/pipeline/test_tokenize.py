"""Stage 5 with the five real vocabularies of ../shared/tokenizers: round trips,
no special ids, the same ids on the driver and in Spark, rejects, and incremental
reuse that yields exactly a full build."""

from __future__ import annotations

import hashlib
import json
import os
import re

import pytest
from pyspark.sql import functions as F

from refactx_pipeline.stages import tokenize as T
from refactx_pipeline.stages.contract import StageContext
from refactx_pipeline.stages.schemas import TOKENS
from refactx_pipeline.config import VocabularyConfig
from refactx_index.errors import ConfigError
from refactx_index.vocab import (
    ENCODED_FORBIDDEN_TOKEN,
    ENCODED_OK,
    decode_continuation,
    encode_facts,
    facts_encode_by_pieces,
    open_vocabulary,
    tokenizer_for_ascii,
)
from refactx_index import vocab as vocab_module
from tests.conftest import VOCABULARIES, shared_path, tokenizer_dir

FACT_TEXTS = [
    "<Danny Boyle> <date of birth> <1956-10-20> .",
    "<Northern Ireland> <coordinate location> <54.590933333333, -5.84> .",
    "<Northern Ireland> <population> <1852168> .",
    "<Plato> <date of birth> <-0427-01-01> .",
    "<Tokyo> <native label> <東京> .",
    "<Ærøskøbing> <description> <town in Denmark – «Ærø»> .",
    "<Slumdog Millionaire> <description> <2008 film 🎬 by Danny Boyle> .",
    "<HTML> <uses> <<s> and </s> and <|endoftext|>> .",
    "<Q> <motto text> <  two   spaces kept inside  > .",
]
# phi-3's "</s>" is a non-special added token that strips the space after it:
# text containing it cannot round-trip, so it is a counted reject there only
FORBIDDEN_IN = {"phi-3-mini": {"<HTML> <uses> <<s> and </s> and <|endoftext|>> ."}}
# SentencePiece decoders with a Strip step drop one leading space of a whole sequence
STRIPS_LEADING_SPACE = {"mistral-7b-v0.1", "phi-3-mini"}
BOS = {"llama3": 128000, "mistral-7b-v0.1": 1, "phi-3-mini": 1}
EOS = {"llama3": 128009, "mistral-7b-v0.1": 2, "phi-3-mini": 32000, "qwen2.5": 151645, "gpt2": 50256}


@pytest.fixture(scope="module")
def vocabs():
    return {name: open_vocabulary(name, str(tokenizer_dir(name))) for name in VOCABULARIES}


@pytest.mark.parametrize("name", VOCABULARIES)
def test_vocabulary_identity_and_forbidden_ids(vocabs, name):
    vocab = vocabs[name]
    data = (tokenizer_dir(name) / "tokenizer.json").read_bytes()
    assert vocab.sha256 == hashlib.sha256(data).hexdigest()
    assert vocab.vocab_size == vocab.tokenizer().get_vocab_size(with_added_tokens=True) > 30000
    assert EOS[name] in vocab.forbidden_ids
    if name in BOS:
        assert BOS[name] in vocab.forbidden_ids
    # the trap: encode() with its defaults adds BOS for Llama-3 and Mistral
    plain = vocab.tokenizer().encode(" <a> <b> <c> .").ids
    assert (plain[0] == BOS.get(name)) == (name in ("llama3", "mistral-7b-v0.1"))
    assert encode_facts(vocab.tokenizer(), ["<a> <b> <c> ."], vocab.forbidden_ids).ids(0)[0] != BOS.get(name)
    assert vocab.tokenizer() is vocab.tokenizer()  # parsed once per process


@pytest.mark.parametrize("name", VOCABULARIES)
def test_round_trip_without_special_ids(vocabs, name):
    vocab = vocabs[name]
    tok = vocab.tokenizer()
    encoded = encode_facts(tok, FACT_TEXTS, vocab.forbidden_ids, " ", "")
    for i, text in enumerate(FACT_TEXTS):
        if text in FORBIDDEN_IN.get(name, ()):
            assert encoded.status[i] == ENCODED_FORBIDDEN_TOKEN
            continue
        assert encoded.status[i] == ENCODED_OK, text
        ids = encoded.ids(i)
        assert not set(ids) & set(vocab.forbidden_ids)
        assert max(ids) < vocab.vocab_size
        # read as a continuation of "Fact:", the ids are exactly " " + fact
        assert decode_continuation(tok, ids) == " " + text
        # a whole-sequence decode loses the leading space in SentencePiece vocabularies;
        # that is a property of their decoder, not of the stored ids
        whole = tok.decode(ids)
        assert whole == (text if name in STRIPS_LEADING_SPACE else " " + text)
        # the ids are what the model itself produces after "Fact:"
        in_context = tok.encode("Fact: " + text, add_special_tokens=False).ids
        assert in_context[-len(ids):] == ids


def test_phi3_ids_carry_no_dummy_prefix_token(vocabs):
    """Phi-3 prepends '▁' to every text: alone, ' <a>' starts with a lone '▁' that
    would read as a second space after 'Fact:'. Encoding in context removes it."""
    vocab = vocabs["phi-3-mini"]
    tok = vocab.tokenizer()
    alone = tok.encode(" <a> <b> <c> .", add_special_tokens=False).ids
    ids = encode_facts(tok, ["<a> <b> <c> ."], vocab.forbidden_ids).ids(0)
    assert tok.id_to_token(alone[0]) == "▁" and alone[1:] == ids


# ASCII and not: NFC would change "e\u0301" (so such facts must keep the normalizer),
# added tokens, whitespace runs, a fact that fuses with the trigger
MIXED_TEXTS = FACT_TEXTS + [
    "<Cafe\u0301> <label> <Café> .", "<tool_call> <|im_start|>x", "", "  ", ":)", "a\u00a0b", "\ufb01 ligature",
    "<Q1> <description> <line\nbreak\t tab> .",
]


@pytest.mark.parametrize("name", VOCABULARIES)
def test_ascii_fast_path_gives_the_same_ids(vocabs, name):
    """tokenize skips an NFC normalizer for ASCII facts: the ids are those of the full tokenizer."""
    vocab = vocabs[name]
    tok = vocab.tokenizer()
    fast = tokenizer_for_ascii(tok)
    assert (fast is not None) == (name == "qwen2.5")  # only Qwen2.5 has a normal-form normalizer
    if fast is None:
        return
    assert fast.normalizer is None and tok.normalizer is not None and fast.encode_special_tokens
    for prefix, suffix in ((" ", ""), ("", "."), (" - ", "\n")):
        texts = MIXED_TEXTS * 3  # batches mixing ASCII and non-ASCII facts, in order
        plain = encode_facts(tok, texts, vocab.forbidden_ids, prefix, suffix)
        both = encode_facts(tok, texts, vocab.forbidden_ids, prefix, suffix, ascii_tokenizer=fast)
        for field in ("offsets", "values", "status"):
            assert getattr(plain, field).tolist() == getattr(both, field).tolist(), (prefix, field)
        ascii_only = [t for t in texts if t.isascii()]
        assert (encode_facts(tok, ascii_only, (), prefix, suffix, ascii_tokenizer=fast).values.tolist()
                == encode_facts(tok, ascii_only, (), prefix, suffix).values.tolist())


def test_worker_preload(spark):
    """jemalloc goes to the tokenize workers unless spark.executorEnv.LD_PRELOAD chose."""
    found = next((p for p in T.WORKER_PRELOAD if os.path.isfile(p)), None)
    environment = spark.sparkContext.environment
    assert "LD_PRELOAD" not in environment
    assert T.worker_preload(spark) == found
    environment["LD_PRELOAD"] = ""
    try:
        assert T.worker_preload(spark) is None
    finally:
        del environment["LD_PRELOAD"]


def test_counts_param():
    param = T.CountsParam()
    total = param.zero({})
    for task in ({"0:written": 2, "0:max": 7}, {"0:written": 3, "0:max": 5, "1:tokens": 4}):
        total = param.addInPlace(total, task)
    assert total == {"0:written": 5, "0:max": 7, "1:tokens": 4}


def test_reuse_mismatch():
    meta = {"sha256": "a", "fact_prefix": " ", "fact_suffix": "", "encoding": T.ENCODING, "forbidden_ids": [1]}
    assert T.reuse_mismatch(meta, dict(meta)) is None
    assert T.reuse_mismatch(meta, dict(meta, sha256="b")) == "sha256 differs"
    assert T.reuse_mismatch(meta, dict(meta, fact_prefix="")) == "fact_prefix differs"
    assert T.reuse_mismatch(dict(meta, encoding="old"), meta) == "encoding differs"


def test_config_errors(cfg):
    with pytest.raises(ConfigError, match="empty"):
        T.vocabularies(cfg.tokenize)
    # a repeated vocabulary name is refused when the config is built, before any stage runs
    with pytest.raises(ConfigError, match="repeat"):
        cfg.updated({"tokenize.vocabularies": [VocabularyConfig(name="a", path="/nonexistent/tok"),
                                               VocabularyConfig(name="a", path="/x")]})
    cfg = cfg.updated({"tokenize.vocabularies": [VocabularyConfig(name="a", path="/nonexistent/tok")]})
    with pytest.raises(ConfigError, match="does not exist"):
        T.vocabularies(cfg.tokenize)


# ------------------------------------------------------------------ Spark
def write_facts(spark, cfg, texts):
    df = spark.createDataFrame([(t,) for t in texts], "text string").select(
        F.xxhash64("text").alias("fact_id"), "text", F.lit("statement").alias("kind"), F.lit("P1").alias("property")
    )
    df.write.mode("overwrite").parquet(str(cfg.stage_dir("verbalize") / "facts"))
    return {r["fact_id"]: r["text"] for r in df.collect()}


def read_tokens(spark, cfg, name):
    df = spark.read.parquet(str(cfg.stage_dir("tokenize") / name / "tokens"))
    assert df.schema == TOKENS or [f.name for f in df.schema] == TOKENS.fieldNames()
    return {r["fact_id"]: list(r["token_ids"]) for r in df.collect()}


LONG_FACT = "<Long> <text> <" + " ".join(f"word{i}" for i in range(40)) + "> ."


def test_spark_ids_equal_driver_ids_for_all_vocabularies(spark, cfg, vocabs):
    cfg = cfg.updated({
        "tokenize.vocabularies": [VocabularyConfig(name=n, path=str(tokenizer_dir(n))) for n in VOCABULARIES],
        "tokenize.max_tokens": 48,
    })
    by_id = write_facts(spark, cfg, FACT_TEXTS + [LONG_FACT])
    counts = T.run(StageContext(cfg, spark=spark))
    assert counts["facts"] == len(FACT_TEXTS) + 1
    rejects = {
        (r["vocabulary"], by_id[r["fact_id"]], r["reason"])
        for r in spark.read.parquet(str(cfg.stage_dir("tokenize") / "rejects")).collect()
    }
    for name in VOCABULARIES:
        vocab = vocabs[name]
        tokens = read_tokens(spark, cfg, name)
        expected = encode_facts(vocab.tokenizer(), list(by_id.values()), vocab.forbidden_ids)
        expected_ids = {fid: expected.ids(i) for i, fid in enumerate(by_id) if expected.status[i] == ENCODED_OK}
        forbidden = FORBIDDEN_IN.get(name, set())
        assert {fid for fid in expected_ids if len(expected_ids[fid]) <= 48} == set(tokens)
        for fid, ids in tokens.items():
            assert ids == expected_ids[fid]  # same ids on the driver and in Spark
            assert not set(ids) & set(vocab.forbidden_ids)
            assert decode_continuation(vocab.tokenizer(), ids) == " " + by_id[fid]
        assert LONG_FACT not in {by_id[f] for f in tokens}
        assert (name, LONG_FACT, "over_max_tokens") in rejects
        assert {t for (n, t, r) in rejects if n == name and r == "forbidden_token"} == forbidden
        meta = json.loads((cfg.stage_dir("tokenize") / name / "meta.json").read_text())
        assert meta["sha256"] == vocab.sha256 and meta["vocab_size"] == vocab.vocab_size
        assert meta["name"] == name and meta["fact_prefix"] == " " and meta["fact_suffix"] == ""
        entry = counts["vocabularies"][name]
        assert meta["counts"] == entry
        assert entry["encoded"] == len(by_id) and entry["reused"] == 0
        assert entry["facts_written"] == len(tokens) == len(by_id) - 1 - len(forbidden)
        assert entry["rejected"] == dict(
            {"over_max_tokens": 1}, **({"forbidden_token": len(forbidden)} if forbidden else {})
        )
    on_disk = json.loads((cfg.stage_dir("tokenize") / "counts.json").read_text())
    assert on_disk == counts
    assert not (cfg.stage_dir("tokenize") / "_encoded").exists()


def test_incremental_build_encodes_only_new_facts(spark, cfg, tmp_path):
    names = ["qwen2.5", "mistral-7b-v0.1"]
    cfg = cfg.updated({
        "tokenize.vocabularies": [VocabularyConfig(name=n, path=str(tokenizer_dir(n))) for n in names],
        "tokenize.max_tokens": 48,
    })
    old_texts = FACT_TEXTS[:6] + [LONG_FACT]
    new_texts = FACT_TEXTS[2:]  # two facts gone, three new, the long one gone
    cfg = cfg.updated({"paths.dump_date": "2024-01"})
    write_facts(spark, cfg, old_texts)
    T.run(StageContext(cfg, spark=spark))
    previous = str(cfg.stage_dir("tokenize"))

    cfg = cfg.updated({"paths.dump_date": "2024-02-full"})
    write_facts(spark, cfg, new_texts)
    full = T.run(StageContext(cfg, spark=spark))
    full_tokens = {n: read_tokens(spark, cfg, n) for n in names}

    cfg = cfg.updated({"paths.dump_date": "2024-02", "tokenize.reuse_from": previous})
    write_facts(spark, cfg, new_texts)
    incremental = T.run(StageContext(cfg, spark=spark))
    common = len(set(old_texts) & set(new_texts))
    for n in names:
        assert read_tokens(spark, cfg, n) == full_tokens[n]  # exactly the full build's dataset
        entry = incremental["vocabularies"][n]
        assert entry["reuse"] == "reused"
        assert entry["reused"] == common == 4
        assert entry["encoded"] == len(new_texts) - common == 3
        assert full["vocabularies"][n]["encoded"] == len(new_texts)
        assert entry["facts_written"] == full["vocabularies"][n]["facts_written"]
    assert incremental["reused"] == {n: 4 for n in names}

    # pointing reuse_from at this very build would read what it overwrites
    cfg = cfg.updated({"tokenize.reuse_from": str(cfg.stage_dir("tokenize"))})
    with pytest.raises(ConfigError, match="own tokenize directory"):
        T.run(StageContext(cfg, spark=spark))


def test_reuse_applies_a_changed_limit_and_a_vocabulary_may_store_nothing(spark, cfg):
    """Reused ids over a lowered max_tokens become rejects, as in a full build; a
    vocabulary whose every fact is rejected gets an empty tokens dataset."""
    cfg = cfg.updated({
        "tokenize.vocabularies": [VocabularyConfig(name="qwen2.5", path=str(tokenizer_dir("qwen2.5")))],
        "tokenize.max_tokens": 48,
        "paths.dump_date": "2024-01",
    })
    write_facts(spark, cfg, FACT_TEXTS)
    T.run(StageContext(cfg, spark=spark))
    previous = str(cfg.stage_dir("tokenize"))

    lowered = cfg.updated({"tokenize.max_tokens": 20, "paths.dump_date": "2024-02-full"})  # 3 of 9 fit
    by_id = write_facts(spark, lowered, FACT_TEXTS)
    full = T.run(StageContext(lowered, spark=spark))
    incremental_cfg = lowered.updated({"paths.dump_date": "2024-02", "tokenize.reuse_from": previous})
    write_facts(spark, incremental_cfg, FACT_TEXTS)
    incremental = T.run(StageContext(incremental_cfg, spark=spark))
    full_entry, entry = full["vocabularies"]["qwen2.5"], incremental["vocabularies"]["qwen2.5"]
    assert read_tokens(spark, incremental_cfg, "qwen2.5") == read_tokens(spark, lowered, "qwen2.5")
    assert entry["encoded"] == 0 and entry["reused"] == len(by_id) and full_entry["reused"] == 0
    assert 0 < entry["rejected"]["over_max_tokens"] == full_entry["rejected"]["over_max_tokens"] < len(by_id)
    for key in ("facts_written", "tokens", "max_tokens_per_fact", "rejected"):
        assert entry[key] == full_entry[key], key
    assert entry["max_tokens_per_fact"] <= 20
    rejects = spark.read.parquet(str(incremental_cfg.stage_dir("tokenize") / "rejects")).collect()
    assert {r["reason"] for r in rejects} == {"over_max_tokens"} and all(r["n_tokens"] > 20 for r in rejects)

    nothing = cfg.updated({"tokenize.max_tokens": 4, "paths.dump_date": "2024-03"})
    write_facts(spark, nothing, FACT_TEXTS)
    counts = T.run(StageContext(nothing, spark=spark))["vocabularies"]["qwen2.5"]
    assert counts["facts_written"] == counts["tokens"] == counts["max_tokens_per_fact"] == 0
    assert counts["rejected"] == {"over_max_tokens": len(FACT_TEXTS)}
    tokens = spark.read.parquet(str(nothing.stage_dir("tokenize") / "qwen2.5" / "tokens"))
    assert tokens.count() == 0 and tokens.columns == TOKENS.fieldNames()


# facts cut into pieces before each " <" at an edge the pre-tokenizer might move: labels that hold
# " <", spaces or a newline before it, "<" and a combining mark NFC composes with it, added
# tokens, empty parts
PIECE_EDGE_TEXTS = [
    "<a <b> <c  <d> <e\n <f> .", "<\u2260> <<\u0338> < \u0338> .", "<<tool_call>> <x<|endoftext|>> <> .",
    "< <> <  > < < < .", "<O'Neil's> <it's <s> <1952 <5>> .", " <lead> <space> .", "<tab\t <x> .",
]


def _literal_facts(limit: int = 6000) -> list[str]:
    """Fact texts made of the real labels and descriptions (every language) of a Wikidata
    dump's head, three in a row each, a subject repeated over neighbouring facts as
    verbalize writes them."""
    text = shared_path("data", "wikidata", "truthy-2018-head10k.nt").read_text(encoding="utf-8")
    literals = re.findall(r'"((?:[^"\\]|\\.)*)"@', text)
    assert len(literals) > 3000
    return [f"<{literals[i // 4]}> <{literals[i + 1]}> <{literals[i + 2]}> ." for i in range(min(limit, len(literals) - 2))]


@pytest.mark.parametrize("name", VOCABULARIES)
def test_facts_encoded_by_pieces_get_the_whole_texts_ids(vocabs, name, monkeypatch):
    """Byte-level BPE vocabularies encode each distinct piece of a batch once: the ids, the
    statuses and the rejects are those of whole texts, on real labels in every script and on
    cuts at odd places; SentencePiece vocabularies (merges across spaces) encode whole texts."""
    vocab = vocabs[name]
    tok = vocab.tokenizer()
    by_pieces = facts_encode_by_pieces(tok)
    assert by_pieces == (name in ("qwen2.5", "llama3", "gpt2"))
    if not by_pieces:
        return
    texts = _literal_facts() + MIXED_TEXTS * 2 + PIECE_EDGE_TEXTS
    fast = tokenizer_for_ascii(tok)
    rejected = 0
    for prefix, suffix in ((" ", ""), ("", "."), (" - ", "\n"), (" <", "> .")):
        pieces = encode_facts(tok, texts, vocab.forbidden_ids, prefix, suffix, ascii_tokenizer=fast)
        with monkeypatch.context() as patch:
            patch.setattr(vocab_module, "facts_encode_by_pieces", lambda _tok: False)
            whole = encode_facts(tok, texts, vocab.forbidden_ids, prefix, suffix, ascii_tokenizer=fast)
        for field in ("offsets", "values", "status"):
            assert getattr(pieces, field).tolist() == getattr(whole, field).tolist(), (prefix, field)
        rejected += int((whole.status != ENCODED_OK).sum())
    assert rejected  # rejects (facts fused with the trigger) are compared too
