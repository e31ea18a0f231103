"""The "next week" generator (``refactx_testing.dumpgen.nextweek``): a second dump from a first
one, seeded; what it reports it changed is what changed in the dump's lines; and the diff stage,
on the verbalized facts of the two dumps, finds the changes it made and no others."""

from __future__ import annotations

import bz2
import json
from collections import Counter

import pytest

from refactx_testing import dumpgen
from refactx_testing.dumpgen import nextweek as nw
from refactx_testing.dumpgen.shape import DESCRIPTION, DIRECT, ENTITY, PREF_LABEL

FIRST = dict(lines=12_000, seed=4, compressor="python", workers=1)
SHARE = 0.25


@pytest.fixture(scope="module")
def weeks(tmp_path_factory):
    root = tmp_path_factory.mktemp("nextweek")
    first = dumpgen.generate(root / "week1", **FIRST)
    second = nw.nextweek(root / "week1", root / "week2", share=SHARE, seed=9, chunk_lines=3_000, compressor="python")
    return root, first, second


def _lines(folder) -> list[str]:
    with bz2.open(folder / dumpgen.TRUTHY_FILE, "rb") as fh:
        return fh.read().decode("utf-8", "replace").split("\n")[:-1]


def _statements(lines: list[str]) -> Counter:
    return Counter(line for line in lines if f"> <{DIRECT}P" in line and nw._STATEMENT.match(line.encode()))


def _terms(lines: list[str], predicate: str) -> dict[str, str]:
    pattern = nw._TERM[predicate]
    return {m.group(1).decode()[len(ENTITY) + 1:-1]: m.group(2).decode()
            for m in (pattern.match(line.encode()) for line in lines) if m is not None}


def test_the_next_week_is_seeded_and_written_as_the_first(weeks, tmp_path):
    root, first, second = weeks
    again = nw.nextweek(root / "week1", tmp_path / "again", share=SHARE, seed=9, chunk_lines=3_000,
                        compressor="python")
    assert again == second
    for name in (dumpgen.TRUTHY_FILE, nw.EDITS_FILE, dumpgen.MANIFEST_FILE):
        assert (tmp_path / "again" / name).read_bytes() == (root / "week2" / name).read_bytes(), name
    other = nw.nextweek(root / "week1", tmp_path / "other", share=SHARE, seed=10, compressor="python")
    assert _lines(tmp_path / "other") != _lines(root / "week2")
    # the enwiki dumps are copied; the manifest names the files and the lines, as generate's does
    for name in (dumpgen.PAGE_FILE, dumpgen.PAGE_PROPS_FILE):
        assert (root / "week2" / name).read_bytes() == (root / "week1" / name).read_bytes()
    raw = (root / "week2" / dumpgen.TRUTHY_FILE).read_bytes()
    assert raw.count(b"BZh9") >= second["bz2_streams"] >= 4  # one stream per 3,000 lines
    assert len(_lines(root / "week2")) == second["lines"] == second["nextweek"]["lines_out"]
    assert second["nextweek"]["lines_in"] == first["lines"]
    assert json.loads((root / "week2" / dumpgen.MANIFEST_FILE).read_text()) == second
    assert other["nextweek"]["items_edited"] != second["nextweek"]["items_edited"] or \
        other["nextweek"]["statements_added"] != second["nextweek"]["statements_added"]


def test_no_share_copies_every_line(weeks, tmp_path):
    root, first, _ = weeks
    same = nw.nextweek(root / "week1", tmp_path / "same", share=0.0, compressor="python")
    assert _lines(tmp_path / "same") == _lines(root / "week1")
    counts = same["nextweek"]
    assert counts["items_seen"] > 300 and counts["items_edited"] == counts["items_created"] == 0
    assert nw.read_edits(tmp_path / "same") == []


def test_the_edits_reported_are_the_lines_changed(weeks):
    root, first, second = weeks
    counts = second["nextweek"]
    edits = nw.read_edits(root / "week2")
    by_edit = Counter(e[0] for e in edits)
    created = {s for e, s, _, _ in edits if e == "item_created"}
    deleted = {s for e, s, _, _ in edits if e == "item_deleted"}
    # what the counts say is what the log lists (a changed statement: one line removed, one added)
    assert by_edit["item_created"] == counts["items_created"] > 0
    assert by_edit["item_deleted"] == counts["items_deleted"] > 0
    assert by_edit["label_changed"] == counts["labels_changed"] > 0
    assert by_edit["description_changed"] == counts["descriptions_changed"] > 0
    added_to_old = sum(1 for e, s, _, _ in edits if e == "statement_added" and s not in created)
    assert added_to_old == counts["statements_added"] + counts["statements_changed"]
    assert by_edit["statement_removed"] == counts["statements_removed"] + counts["statements_changed"]
    assert min(counts["statements_added"], counts["statements_removed"], counts["statements_changed"]) > 0
    assert abs(counts["items_edited"] / counts["items_seen"] - SHARE) < 0.06

    # the statement lines that differ between the dumps are the ones the log lists
    old, new = _lines(root / "week1"), _lines(root / "week2")
    old_st, new_st = _statements(old), _statements(new)

    def line(s, p, v):
        return f"<{ENTITY}{s}> <{DIRECT}{p}> {v} ."

    gone = Counter(line(s, p, v) for e, s, p, v in edits if e == "statement_removed")
    gone.update(x for x in old_st.elements() if x.split(" ", 1)[0][len(ENTITY) + 1:-1] in deleted)
    came = Counter(line(s, p, v) for e, s, p, v in edits if e == "statement_added")
    assert old_st - new_st == gone - came
    assert new_st - old_st == came - gone

    # labels and descriptions: those the log names changed to what it says, no others
    for predicate, edit in ((PREF_LABEL, "label_changed"), (DESCRIPTION, "description_changed")):
        before, after = _terms(old, predicate), _terms(new, predicate)
        changed = {q for q in before.keys() & after.keys() if before[q] != after[q]}
        logged = {s: v for e, s, _, v in edits if e == edit}
        assert changed == set(logged) - deleted
        assert all(after[q] == logged[q] for q in changed)
    assert set(_terms(new, PREF_LABEL)) == (set(_terms(old, PREF_LABEL)) - deleted) | created


def test_bad_arguments_are_refused(weeks, tmp_path):
    root, _, _ = weeks
    with pytest.raises(ValueError, match="share"):
        nw.nextweek(root / "week1", tmp_path / "x", share=1.5)
    with pytest.raises(ValueError, match="beside the first"):
        nw.nextweek(root / "week1", root / "week1")
    with pytest.raises(SystemExit) as exit_info:
        dumpgen.main([str(tmp_path / "y"), "--next-week-of", str(root / "week1"), "--share", "-1"])
    assert exit_info.value.code == 2


def test_the_command_writes_the_next_week(weeks, tmp_path, capsys):
    root, _, second = weeks
    assert dumpgen.main([str(tmp_path / "cli"), "--next-week-of", str(root / "week1"), "--share", str(SHARE),
                         "--seed", "9", "--chunk-lines", "3000", "--compressor", "python"]) == 0
    assert json.loads(capsys.readouterr().out) == second["nextweek"]
    assert (tmp_path / "cli" / dumpgen.TRUTHY_FILE).read_bytes() == (root / "week2" / dumpgen.TRUTHY_FILE).read_bytes()


# ---------------------------------------------------------------- the diff of the two weeks' builds


def _verbalize(spark, cfg, folder, manifest, week: str):
    from refactx_pipeline.stages import labels, parse, verbalize
    from refactx_pipeline.stages.contract import StageContext

    # no sitelinks stage: every item is labelled from its terms, so each label edit shows
    cfg = cfg.updated({"paths.dump_date": week, "input.dumps": [str(folder / manifest["truthy"])]})
    assert not cfg.input.sitelinks_source()
    parsed = parse.run(StageContext(cfg, spark=spark))
    for stage in (labels, verbalize):
        stage.run(StageContext(cfg, spark=spark))
    return cfg, parsed


@pytest.mark.spark
@pytest.mark.slow
def test_the_diff_of_the_two_weeks_is_what_nextweek_changed(spark, cfg, weeks):
    from pyspark.sql import functions as F

    from refactx_pipeline.stages import diff
    from refactx_pipeline.stages.contract import StageContext

    root, first, second = weeks
    old_cfg, old_parsed = _verbalize(spark, cfg, root / "week1", first, "week1")
    new_cfg, new_parsed = _verbalize(spark, cfg, root / "week2", second, "week2")
    # the parse stage reads every line of the next week; its hostile lines are the first week's
    # but for those of the items deleted (an item created copies none)
    assert new_parsed["lines_in"] == second["lines"]
    rejected_old, rejected_new = Counter(old_parsed["rejected_by_reason"]), Counter(new_parsed["rejected_by_reason"])
    assert rejected_new <= rejected_old and sum(rejected_new.values()) > 0
    counts = diff.run(StageContext(new_cfg, spark=spark), old_cfg.build_dir())
    assert json.loads((new_cfg.stage_dir("diff") / "counts.json").read_text()) == counts
    for what in diff.CHANGE_KINDS:
        assert counts[what] > 0, what
    assert counts["relabelled_entities"] > 0

    edits = nw.read_edits(root / "week2")
    created = {s for e, s, _, _ in edits if e == "item_created"}
    deleted = {s for e, s, _, _ in edits if e == "item_deleted"}
    added_pairs = {(s, p) for e, s, p, _ in edits if e == "statement_added"}
    removed_pairs = {(s, p) for e, s, p, _ in edits if e == "statement_removed"}
    relabelled = {s for e, s, _, _ in edits if e in ("label_changed", "description_changed")}

    def statement_sources(c):
        rows = spark.read.parquet(str(c.stage_dir("verbalize") / "provenance")).where(
            F.col("kind") == "statement").select("subject", "property", "object", "value").collect()
        return {tuple(r) for r in rows}

    old_src, new_src = statement_sources(old_cfg), statement_sources(new_cfg)
    # every statement the diff's sources gained or lost is one the generator added or removed,
    # or one of an item it created or deleted (or naming a deleted item: it lost its label)
    assert new_src - old_src and old_src - new_src
    for s, p, o, _ in new_src - old_src:
        assert s in created or (s, p) in added_pairs, (s, p, o)
    for s, p, o, _ in old_src - new_src:
        assert s in deleted or o in deleted or (s, p) in removed_pairs, (s, p, o)
    # and each item statement it added between items labelled in both weeks is a new source
    labelled = {r["entity"] for r in spark.read.parquet(str(new_cfg.stage_dir("labels") / "labels")).collect()}
    def item_statements(edit):
        return {(s, p, v[len(ENTITY) + 1:-1]) for e, s, p, v in edits
                if e == edit and v.startswith(f"<{ENTITY}Q") and s not in created}

    # (a later edit of the same item may remove a statement an earlier one added)
    item_added = item_statements("statement_added") - item_statements("statement_removed")
    checked = [(s, p, o) for s, p, o in item_added if s in labelled and o in labelled]
    assert checked
    new_items = {(s, p, o) for s, p, o, _ in new_src}
    assert all(x in new_items for x in checked)

    # the entities re-labelled are those whose label or description (which tells a homonym
    # apart) the generator changed, or that share a label with one of them
    entities = {r["entity"] for r in spark.read.parquet(str(new_cfg.stage_dir("diff") / "relabelled_entities")).collect()}
    collided = set()
    for c in (old_cfg, new_cfg):
        rows = spark.read.parquet(str(c.stage_dir("labels") / "collisions")).collect()
        collided |= {e for r in rows for e in r["entities"]}
    assert entities & relabelled
    assert entities <= relabelled | collided
