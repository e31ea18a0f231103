"""Which dump a run builds (refactx_pipeline.scheduling.dumps), and how a run is summed up
(refactx_pipeline.scheduling.history): pure functions, no Airflow, no Spark, no database."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from refactx_index.errors import ConfigError
from refactx_pipeline.config import Config
from refactx_pipeline.scheduling.dumps import Dump, choose_dump, complete_dump_dates, newest_unbuilt
from refactx_pipeline.scheduling.history import describe_run, run_status

MARKER = "_IMPORTED"


def make_root(tmp_path: Path, complete: list[str], partial: list[str] = ()) -> Path:
    root = tmp_path / "dumps"
    for date in [*complete, *partial]:
        (root / date).mkdir(parents=True)
        (root / date / f"wikidata-{date}-truthy-BETA.nt.bz2").write_bytes(b"")
    for date in complete:
        (root / date / MARKER).write_text("")
    return root


def config(root: Path | None, **overrides) -> Config:
    values = {"input.dump_files": "*-truthy-BETA.nt.bz2", "input.dumps": ["/fallback.nt"], **overrides}
    if root is not None:
        values["input.dumps_root"] = str(root)
    return Config().updated(values)


def test_only_dated_folders_with_the_marker_are_complete(tmp_path):
    root = make_root(tmp_path, ["20260101", "20260108"], partial=["20260115"])
    (root / "latest").mkdir()  # Wikimedia's symlinks and other names are not dumps
    (root / "latest" / MARKER).write_text("")
    (root / "2026011").mkdir()
    (root / "20260122").write_text("a file, not a folder")
    assert complete_dump_dates(root, MARKER) == ["20260101", "20260108"]
    assert complete_dump_dates(root, "other-marker") == []
    assert complete_dump_dates(tmp_path / "absent", MARKER) == []


@pytest.mark.parametrize(
    ("complete", "built", "expected"),
    [
        ([], [], None),  # nothing landed
        (["20260101"], [], "20260101"),  # first dump
        (["20260101", "20260108"], ["20260101"], "20260108"),  # a newer dump landed
        (["20260101", "20260108"], ["20260108"], None),  # newest already built
        (["20260101"], ["20260108"], None),  # never an older dump after a newer one
        (["20260101", "20260108"], ["latest"], "20260108"),  # built names that are not dates
    ],
)
def test_newest_unbuilt(complete, built, expected):
    assert newest_unbuilt(complete, built) == expected


def test_scheduled_run_takes_the_newest_complete_dump_never_a_half_written_one(tmp_path):
    root = make_root(tmp_path, ["20260101"], partial=["20260108"])
    cfg = config(root)
    assert choose_dump(cfg, []) == Dump("20260101", (str(root / "20260101" / "*-truthy-BETA.nt.bz2"),))
    assert choose_dump(cfg, ["20260101"]) is None  # 20260108 is still being written
    (root / "20260108" / MARKER).write_text("")
    assert choose_dump(cfg, ["20260101"]).dump_date == "20260108"


def test_on_demand_run_takes_the_dump_it_names(tmp_path):
    root = make_root(tmp_path, ["20260101"], partial=["20260108"])
    cfg = config(root)
    # built or not, an explicit date is built; its folder once complete
    assert choose_dump(cfg, ["20260101"], dump_date="20260101").dump_date == "20260101"
    assert choose_dump(cfg, [], dump_date="20260108") is None
    # explicit files win; without a dumps root, the config's dumps
    assert choose_dump(cfg, [], dump_date="x1", dumps=["/a.nt"]) == Dump("x1", ("/a.nt",))
    assert choose_dump(config(None), [], dump_date="x1") == Dump("x1", ("/fallback.nt",))


def test_scheduled_run_without_a_dumps_root_is_a_config_error():
    with pytest.raises(ConfigError, match="input.dumps_root"):
        choose_dump(config(None), [])


def test_marker_must_be_a_file_name():
    with pytest.raises(ConfigError, match="input.dump_marker"):
        Config().updated({"input.dump_marker": "../done"})


def branch(*stages: str, build_id: int = 7, vocab: str = "qwen2.5") -> dict:
    counts = {s: {} for s in stages}
    if "load" in counts:
        counts["load"] = {"vocabularies": {vocab: {"facts": 3828}}}
    if "activate" in counts:
        counts["activate"] = {"vocabularies": {vocab: {"build_id": build_id}}}
    return counts


def test_run_status_and_history_line():
    every = ("tokenize", "prefix_rows", "load", "validate", "activate")
    both = {"stages": {}, "vocabularies": {"qwen2.5": branch(*every), "gpt2": branch(*every, vocab="gpt2")}}
    partial = {"stages": {}, "vocabularies": {"qwen2.5": branch(*every), "gpt2": branch("tokenize")}}
    assert run_status(both) == "success"
    assert run_status(partial) == "partial"
    assert run_status({"stages": {}, "vocabularies": {"gpt2": {}}}) == "failed"
    assert run_status({"stages": {}, "vocabularies": {}}) == "failed"
    line = describe_run({"run_id": 2, "dag_run_id": "scheduled__x", "dump_date": "20260108", "status": "partial",
                         "finished_at": datetime(2026, 1, 8, 12, tzinfo=timezone.utc), "counts": partial})
    assert line == ("    2 2026-01-08 12:00:00  20260108  partial  gpt2: failed at prefix_rows; "
                    "qwen2.5: active build 7, 3828 facts  (scheduled__x)")
