"""The dump generator (``refactx_testing.dumpgen``): same seed, same bytes; the measured
shape at a small size; hostile lines; and the ingestion stages (parse -> sitelinks ->
labels -> verbalize) on a generated dump, against what its manifest says they should find."""

from __future__ import annotations

import bz2
import gzip
import json
import shutil

import pytest

from refactx_testing import dumpgen

SMALL = dict(lines=40_000, seed=7, skew_facts=3_000, chunk_lines=10_000)
FILES = (dumpgen.TRUTHY_FILE, dumpgen.PAGE_FILE, dumpgen.PAGE_PROPS_FILE, dumpgen.MANIFEST_FILE)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    out = tmp_path_factory.mktemp("dumpgen") / "small"
    manifest = dumpgen.generate(out, workers=2, **SMALL)
    return out, manifest


@pytest.fixture(scope="module")
def medium(tmp_path_factory):
    """Big enough for the shape to show (a few seconds)."""
    out = tmp_path_factory.mktemp("dumpgen") / "medium"
    dumpgen.generate(out, lines=150_000, seed=3)
    return out


def _text(out) -> str:
    with bz2.open(out / dumpgen.TRUTHY_FILE, "rb") as fh:
        return fh.read().decode("utf-8", "replace")


# ---------------------------------------------------------------- determinism


def test_same_seed_gives_the_same_bytes_whatever_the_workers(small, tmp_path):
    out, _ = small
    again = tmp_path / "again"
    dumpgen.generate(again, workers=1, **SMALL)
    for name in FILES:
        assert (again / name).read_bytes() == (out / name).read_bytes(), name


def test_another_seed_gives_other_bytes(small, tmp_path):
    out, _ = small
    other = tmp_path / "other"
    dumpgen.generate(other, workers=2, **{**SMALL, "seed": 8})
    for name in (dumpgen.TRUTHY_FILE, dumpgen.PAGE_FILE, dumpgen.PAGE_PROPS_FILE):
        assert (other / name).read_bytes() != (out / name).read_bytes(), name


@pytest.mark.skipif(not shutil.which("bzip2"), reason="no bzip2 on PATH")
def test_an_external_compressor_writes_the_same_text(tmp_path):
    args = dict(lines=12_000, seed=1, chunk_lines=10_000)
    ours = dumpgen.generate(tmp_path / "python", compressor="python", **args)
    theirs = dumpgen.generate(tmp_path / "bzip2", compressor="bzip2", **args)
    assert (ours["compressor"], theirs["compressor"]) == ("python", "bzip2")
    assert {k: v for k, v in ours.items() if k != "compressor"} == {k: v for k, v in theirs.items() if k != "compressor"}
    texts = [bz2.decompress((tmp_path / name / dumpgen.TRUTHY_FILE).read_bytes()) for name in ("python", "bzip2")]
    assert texts[0] == texts[1]


def test_files_are_what_the_pipeline_reads(small):
    out, manifest = small
    assert {p.name for p in out.iterdir()} == set(FILES)
    assert json.loads((out / dumpgen.MANIFEST_FILE).read_text()) == manifest
    raw = (out / dumpgen.TRUTHY_FILE).read_bytes()
    # one independent bz2 stream per chunk (plus the head): a multi-stream file, like pbzip2's
    assert manifest["bz2_streams"] >= 4
    assert raw.count(b"BZh9") >= manifest["bz2_streams"]
    text = bz2.decompress(raw)
    assert text.count(b"\n") == manifest["lines"]
    assert abs(manifest["lines"] - SMALL["lines"]) < 0.05 * SMALL["lines"]
    for name, table in ((dumpgen.PAGE_FILE, "page"), (dumpgen.PAGE_PROPS_FILE, "page_props")):
        with gzip.open(out / name, "rt", encoding="utf-8") as fh:
            sql = fh.read()
        assert f"CREATE TABLE `{table}` (" in sql and f"INSERT INTO `{table}` VALUES (" in sql
    assert manifest["hot_label"] == dumpgen.HOT_LABEL


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="too few"):
        dumpgen.generate(tmp_path / "x", lines=20_000, skew_facts=1_000_000)
    with pytest.raises(ValueError, match="line_mix"):
        dumpgen.generate(tmp_path / "y", lines=20_000, line_mix="sparse")


def test_an_unknown_preset_is_refused(tmp_path):
    with pytest.raises(ValueError, match="preset"):
        dumpgen.generate(tmp_path / "z", lines=20_000, preset="sparse")


# ---------------------------------------------------------------- the realistic preset


def _english_labels(out) -> list[str]:
    import re

    return re.findall(r'rdf-schema#label> "([^"]*)"@en \.', _text(out))


def test_the_realistic_preset_is_seeded_and_larger_in_vocabulary(tmp_path):
    """Same plan as dense (items, lines), other texts, the same bytes again from the same seed;
    its English labels use many more distinct words and compress worse (zstd, sorted)."""
    from refactx_testing.dumpgen.floor import compression_floor

    args = dict(lines=20_000, seed=5, chunk_lines=10_000)
    dense = dumpgen.generate(tmp_path / "dense", workers=1, **args)
    real = dumpgen.generate(tmp_path / "realistic", workers=2, preset="realistic", **args)
    again = dumpgen.generate(tmp_path / "again", workers=1, preset="realistic", **args)
    assert (dense["preset"], real["preset"]) == ("dense", "realistic")
    assert real["items"] == dense["items"] and real["statements"] == dense["statements"]
    assert (tmp_path / "again" / dumpgen.TRUTHY_FILE).read_bytes() == (tmp_path / "realistic" / dumpgen.TRUTHY_FILE).read_bytes()
    assert again == real
    assert (tmp_path / "dense" / dumpgen.TRUTHY_FILE).read_bytes() != (tmp_path / "realistic" / dumpgen.TRUTHY_FILE).read_bytes()
    floors = {}
    for name in ("dense", "realistic"):
        labels = _english_labels(tmp_path / name)
        assert len(labels) > 500, name
        floors[name] = compression_floor([f"<{t}> <label> <x> ." for t in labels])
    # dense: ~200 title words, ~100 x ~200 names; realistic: tens of thousands of each (its
    # titles are shorter, so compare per word and per character, not per label)
    ratio = {name: f["distinct_words_per_fact"] / f["words_per_fact"] for name, f in floors.items()}
    per_char = {name: f["zstd_text_bytes_per_fact"] / f["chars_per_fact"] for name, f in floors.items()}
    assert ratio["realistic"] > 1.35 * ratio["dense"], ratio  # 0.28 vs 0.20 (seed 5)
    assert per_char["realistic"] > 1.04 * per_char["dense"], per_char  # 0.240 vs 0.224 B/char


@pytest.mark.slow
def test_the_wikidata_preset_has_real_wikidata_subjects(tmp_path):
    """Most items with a few statements (the shared random sample of real items: median 3),
    labels that share their first word (a given name before many family names) and homonyms
    (one label, several items: the labels stage tells them apart by description), short labels
    and descriptions of real lengths."""
    import collections
    from pathlib import Path

    manifest = dumpgen.generate(tmp_path / "wikidata", lines=20_000, seed=2, chunk_lines=10_000, workers=2,
                                preset="wikidata")
    assert manifest["preset"] == "wikidata"
    wd = dumpgen.measure_nt([tmp_path / "wikidata" / dumpgen.TRUTHY_FILE])
    spi = wd["statements_per_item"]
    assert spi["median"] <= 4  # the other presets: 8-14 (test_statements_per_item_have_a_long_tail)
    assert spi["p99"] > 6 * spi["median"]  # the long tail stays
    sample = Path(__file__).resolve().parents[3] / "shared" / "data" / "wikidata" / "truthy-2018-sample500-en.nt"
    if sample.exists():  # the real random sample: median 3 statements, label median 8 characters
        shared = dumpgen.measure_nt([sample])
        assert abs(spi["median"] - shared["statements_per_item"]["median"]) <= 1
        assert wd["label_chars"]["median"] <= 3 * shared["label_chars"]["median"]
        assert 0.5 < wd["description_chars"]["median"] / shared["description_chars"]["median"] < 1.5
    labels = collections.Counter(_english_labels(tmp_path / "wikidata"))
    assert sum(n for n in labels.values() if n > 1) > 0.15 * sum(labels.values())  # homonyms
    first = collections.Counter(t.split(" ", 1)[0] for t in labels.elements() if " " in t)
    assert first.most_common(1)[0][1] > 0.02 * sum(labels.values())  # a first word many labels share


def test_the_wikidata_stressed_preset_is_seeded_and_its_labels_fan_out_below_shared_first_words(tmp_path):
    """The wikidata preset's items (and its statements, within a few), other labels, the same bytes again from the
    same seed whatever the workers; most labels share their first word with many others, and
    below a shared first word the second words are nearly all different (the plain cut's many
    small rows: bench/bench_size.py measures them)."""
    import collections

    assert "wikidata-stressed" in dumpgen.PRESETS
    args = dict(lines=20_000, seed=2, chunk_lines=10_000)
    stressed = dumpgen.generate(tmp_path / "stressed", workers=2, preset="wikidata-stressed", **args)
    again = dumpgen.generate(tmp_path / "again", workers=1, preset="wikidata-stressed", **args)
    wikidata = dumpgen.generate(tmp_path / "wikidata", workers=2, preset="wikidata", **args)
    assert stressed["preset"] == "wikidata-stressed" and again == stressed
    assert (tmp_path / "again" / dumpgen.TRUTHY_FILE).read_bytes() == (tmp_path / "stressed" / dumpgen.TRUTHY_FILE).read_bytes()
    # the same plan; a few statements follow the labels (1531 items, 8746 statements against 8739)
    assert stressed["items"] == wikidata["items"]
    assert abs(stressed["statements"] - wikidata["statements"]) < 0.01 * wikidata["statements"]
    assert (tmp_path / "wikidata" / dumpgen.TRUTHY_FILE).read_bytes() != (tmp_path / "stressed" / dumpgen.TRUTHY_FILE).read_bytes()

    def fan_out(out):
        """(share of two-word labels whose first word 20 or more labels share, distinct second
        words per label below those first words)"""
        labels = [t.split(" ") for t in _english_labels(out) if " " in t]
        by_first = collections.defaultdict(list)
        for words in labels:
            by_first[words[0]].append(words[1])
        shared = [seconds for seconds in by_first.values() if len(seconds) >= 20]
        return (sum(map(len, shared)) / len(labels),
                sum(len(set(s)) for s in shared) / max(1, sum(map(len, shared))))

    shared_share, distinct_seconds = fan_out(tmp_path / "stressed")
    assert shared_share > 0.6, shared_share
    assert distinct_seconds > 0.7, distinct_seconds
    wikidata_share, _ = fan_out(tmp_path / "wikidata")
    assert shared_share > 2 * wikidata_share, (shared_share, wikidata_share)


def test_compression_floor_and_whole_subjects():
    from refactx_testing.dumpgen.floor import compression_floor, split_fact, whole_subjects

    assert split_fact("<Danny Boyle> <date of birth> <1956-10-20> .") == ("Danny Boyle", "date of birth", "1956-10-20")
    assert split_fact(" <a> <b> <c> .") == ("a", "b", "c")
    assert split_fact("not a fact") is None
    facts = [f"<s{i}> <p{j}> <o{i * j}> ." for i in range(50) for j in range(4)]
    picked = whole_subjects(facts, 10, seed=1)
    assert len(picked) == 12  # three whole subjects of four facts: never a subject cut in two
    assert len({split_fact(t)[0] for t in picked}) == 3
    assert whole_subjects(facts, 10, seed=1) == picked
    repeated = compression_floor([f"<same subject> <same property> <value {i % 3}> ." for i in range(300)] * 2)
    assert repeated["facts"] == 3  # de-duplicated
    varied = compression_floor(facts)
    assert varied["facts"] == 200 and varied["distinct_subjects_per_fact"] == 0.25
    assert 0 < varied["zstd_text_bytes_per_fact"] < varied["text_bytes_per_fact"]


# ---------------------------------------------------------------- shape


def test_datatype_mix_external_ids_lead(medium):
    shape = dumpgen.measure_nt([medium / dumpgen.TRUTHY_FILE])
    share = shape["datatype_share"]
    # docs/scale.md, "The dump generator": ExternalId ~38%, WikibaseItem ~37%, String ~13%
    assert 0.33 < share["ExternalId"] < 0.44
    assert 0.30 < share["WikibaseItem"] < 0.44
    assert 0.09 < share["String"] < 0.16
    assert 0.02 < share["Time"] < 0.07
    assert share["Monolingualtext"] > 0.015 and share["Quantity"] > 0.01
    for small_type in ("GlobeCoordinate", "Url", "CommonsMedia"):
        assert 0 < share[small_type] < 0.02
    # direct-normalized lines beside about a third of the external ids (2024 file: 0.30)
    assert 0.2 < shape["normalized_lines_per_external_id"] < 0.5


def test_statements_per_item_have_a_long_tail(medium):
    spi = dumpgen.measure_nt([medium / dumpgen.TRUTHY_FILE])["statements_per_item"]
    assert 12 <= spi["mean"] <= 18  # Wikidata: ~1.57 billion statements / ~110 million items
    assert 8 <= spi["median"] <= 14
    assert spi["p99"] > 4 * spi["median"]
    assert spi["max"] >= 1000 and spi["over_1000"] >= 1  # "items of thousands of statements"


def test_terms_hot_objects_and_hot_prefixes(medium):
    shape = dumpgen.measure_nt([medium / dumpgen.TRUTHY_FILE])
    assert 10 <= shape["label_chars"]["median"] <= 60
    assert 15 <= shape["description_chars"]["median"] <= 45
    top = [q for q, _, _ in shape["top_objects"]]
    # the classes and the handful of values millions of statements point to
    for hot in ("Q13442814", "Q1860", "Q5"):
        assert hot in top, hot
    assert shape["top10_objects_share"] > 0.25
    prefix, n = shape["top_label_prefixes"][0]
    assert prefix == "Crystal structure" and n > 100


def test_sql_dumps_have_the_measured_page_mix(medium):
    sql = dumpgen.measure_sql(medium / dumpgen.PAGE_FILE, medium / dumpgen.PAGE_PROPS_FILE)
    assert 0.25 < sql["redirects_per_article"] < 0.40  # page head: 0.31
    assert 0.10 < sql["talk_pages_per_article"] < 0.25  # page head: 0.17
    assert sql["articles_with_wikibase_item"] > 0.95  # page head: 1.0 (a few unconnected here)
    # sitelink coverage: ~6% of items have an English article (6.8M of ~110M)
    items = json.loads((medium / dumpgen.MANIFEST_FILE).read_text())["items"]
    assert 0.04 < sql["propnames"]["wikibase_item"] / items < 0.10
    assert "wikibase-shortdesc" in sql["propnames"]


def test_hostile_lines_are_in_the_dump(small):
    out, manifest = small
    assert manifest["hostile_lines"] == {reason: 1 for reason in dumpgen.HOSTILE_LINES}
    raw = bz2.decompress((out / dumpgen.TRUTHY_FILE).read_bytes())
    assert raw.count(dumpgen.INVALID_UTF8_BYTES + b'"@en .') == 1
    text = raw.decode("utf-8", "replace")
    for reason, template in dumpgen.HOSTILE_LINES.items():
        if reason != "invalid_utf8":
            tail = template.split("{s}")[-1]
            assert text.count(tail) >= 1, reason


def test_skew_labels_start_with_the_hot_prefix(small):
    out, manifest = small
    labels = [line for line in _text(out).splitlines()
              if "rdf-schema#label>" in line and line.endswith('"@en .')]
    hot = [line for line in labels if f'"{dumpgen.HOT_LABEL} ' in line]
    assert manifest["skew_items"] >= SMALL["skew_facts"] / dumpgen.SKEW_FACTS_PER_ITEM
    assert len(hot) >= manifest["skew_items"]


# ---------------------------------------------------------------- the pipeline on it


@pytest.mark.spark
@pytest.mark.slow
def test_ingestion_stages_on_a_generated_dump(spark, cfg, small):
    from refactx_pipeline.stages import labels, parse, sitelinks, verbalize
    from pyspark.sql import functions as F
    from refactx_pipeline.stages.contract import StageContext

    out, manifest = small
    expected = manifest["expected"]
    cfg = cfg.updated({
        "input.dumps": [str(out / manifest["truthy"])],
        "input.enwiki_page": str(out / manifest["page"]),
        "input.enwiki_page_props": str(out / manifest["page_props"]),
    })

    p = parse.run(StageContext(cfg, spark=spark))
    want = expected["parse"]
    assert p["lines_in"] == want["lines_in"] == manifest["lines"]  # every stream of the bz2 file read
    assert p["rejected_by_reason"] == want["rejected_by_reason"]  # each hostile line, with its reason
    assert p["statements_seen"] == want["statements_seen"]
    assert p["statements_filtered_by_reason"] == want["statements_filtered_by_reason"]
    filtered = p["statements_filtered_by_reason"]
    assert max(filtered, key=filtered.get) == "datatype_ExternalId"
    assert p["property_types_declared"] == want["property_types_declared"]
    assert p["datatype_source"] == {"declared": want["property_types_declared"]}
    assert p["skipped_by_reason"]["unknown_value"] == want["unknown_value"]
    assert p["skipped_by_reason"].get("no_value", 0) == want["no_value"]
    rejects = spark.read.parquet(str(cfg.stage_dir("parse") / "rejects"))
    assert rejects.where(F.col("reason").isNull() | F.col("line").isNull()).count() == 0

    s = sitelinks.run(StageContext(cfg, spark=spark))
    assert s["sitelinks"] == expected["sitelinks"]["sitelinks"]
    assert s["rejected_by_reason"] == expected["sitelinks"]["rejected_by_reason"]
    assert s["dropped_by_reason"] == expected["sitelinks"]["dropped_by_reason"]

    lab = labels.run(StageContext(cfg, spark=spark))
    assert lab["labels_by_source"]["wikipedia"] == s["sitelinks"]
    assert lab["dropped_without_label"] > 0  # items without an English label + description
    items_labelled = lab["labels"] - lab["labels_by_source"]["label"]  # properties are labelled by "label"
    assert items_labelled == expected["labels"]["items_displayable"]
    # the default policy leaves no label shared: every colliding entity was told apart
    assert lab["colliding_entities"] > 0 and lab["labels_still_shared"] == 0
    assert sum(lab["collision_outcome"].values()) == lab["colliding_entities"]

    v = verbalize.run(StageContext(cfg, spark=spark))
    # identical texts are de-duplicated: a little under the generator's bound
    assert 0.95 * expected["facts_at_most"] <= v["facts"] <= expected["facts_at_most"]
    assert v["statements_kept"] == expected["statement_facts_at_most"]
    facts = spark.read.parquet(str(cfg.stage_dir("verbalize") / "facts"))
    below_hot = facts.where(F.col("text").startswith("<" + manifest["hot_label"] + " ")).count()
    assert below_hot >= SMALL["skew_facts"]
