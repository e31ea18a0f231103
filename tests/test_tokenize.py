"""Stage 5 with the five real vocabularies of ../shared/tokenizers: round trips,
no special ids, the same ids on the driver and in Spark, rejects, and incremental
reuse that yields exactly a full build."""

from __future__ import annotations

import hashlib
import json

import pytest
from pyspark.sql import functions as F

from refactx_pipeline import tokenize_facts as T
from refactx_pipeline.schemas import TOKENS
from refactx_pipeline.config import VocabularyConfig
from refactx_index.errors import ConfigError
from refactx_index.vocab import (
    ENCODED_FORBIDDEN_TOKEN,
    ENCODED_OK,
    decode_continuation,
    encode_facts,
    open_vocabulary,
)
from tests.conftest import VOCABULARIES, tokenizer_dir

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
    counts = T.run(spark, cfg)
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
    T.run(spark, cfg)
    previous = str(cfg.stage_dir("tokenize"))

    cfg = cfg.updated({"paths.dump_date": "2024-02-full"})
    write_facts(spark, cfg, new_texts)
    full = T.run(spark, cfg)
    full_tokens = {n: read_tokens(spark, cfg, n) for n in names}

    cfg = cfg.updated({"paths.dump_date": "2024-02", "tokenize.reuse_from": previous})
    write_facts(spark, cfg, new_texts)
    incremental = T.run(spark, cfg)
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
        T.run(spark, cfg)
