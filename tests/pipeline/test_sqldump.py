"""The MySQL dump reader on the three real heads and on hand-written hostile rows."""

from __future__ import annotations

import pytest

from refactx_pipeline.stages.sqldump import RAW, REASON, read_create_table, read_mysql_table, split_insert_line, unescape_mysql
from tests.conftest import shared_path

HEADS = {
    "enwiki-20150112-page.head1MiB.sql": ("page", 13, 9559, "Hollywood_cycles"),
    "enwiki-20150112-page_props.head1MiB.sql": ("page_props", 4, 22934, "Jetee, La"),
    "wikidatawiki-20150113-wb_items_per_site.head1MiB.sql": ("wb_items_per_site", 4, 18165, "Montanhes araneses"),
}


def test_escapes_null_and_many_rows_per_line():
    line = (
        "INSERT INTO `t` VALUES (1,'it\\'s','a\\\\b',NULL),(2,'x,y)(z','line\\nbreak','0.5'),"
        "(3,_binary 'bin',0x4142,-1.5e3);"
    )
    rows = [v for v, reason, _ in split_insert_line(line, "t", 4) if reason is None]
    assert rows == [
        ["1", "it's", "a\\b", None],
        ["2", "x,y)(z", "line\nbreak", "0.5"],
        ["3", "bin", "AB", "-1.5e3"],
    ]


def test_wrong_width_and_truncation_are_rejects_and_neighbours_kept():
    line = "INSERT INTO `t` VALUES (1,'a'),(2,'b','extra'),(3,'c'),(4,'cut"
    out = list(split_insert_line(line, "t", 2))
    assert [v for v, r, _ in out if r is None] == [["1", "a"], ["3", "c"]]
    assert [(r, raw) for v, r, raw in out if r] == [
        ("column_count", "(2,'b','extra')"),
        ("truncated_row", "(4,'cut"),
    ]


def test_other_table_and_garbage():
    assert list(split_insert_line("INSERT INTO `x` VALUES (1);", "t", 1))[0][1] == "not_an_insert_into_table"
    out = list(split_insert_line("INSERT INTO `t` VALUES (1) junk", "t", 1))
    assert out[0][0] == ["1"] and out[1][1] == "garbage_between_rows"


def test_unescape_mysql():
    assert unescape_mysql("a\\0b\\Zc\\\"d\\%") == 'a\0b\x1ac"d%'


@pytest.mark.parametrize("name", sorted(HEADS))
def test_real_heads(spark, name):
    path = str(shared_path("data", "wikipedia", name))
    table, width, rows, truncated = HEADS[name]
    got_table, columns = read_create_table(path)
    assert (got_table, len(columns)) == (table, width)
    _, df = read_mysql_table(spark, path)
    assert df.columns == columns + [REASON, RAW]
    assert df.where(f"{REASON} is null").count() == rows
    rejects = df.where(f"{REASON} is not null").collect()
    assert len(rejects) == 1 and rejects[0][REASON] == "truncated_row"
    assert truncated in rejects[0][RAW]


def test_create_table_columns_follow_the_dump(tmp_path):
    dump = tmp_path / "x.sql"
    dump.write_text(
        "/*M!999999\\- enable the sandbox mode */\n-- comment\nCREATE TABLE `page` (\n"
        "  `page_id` int unsigned NOT NULL,\n  `page_namespace` int NOT NULL,\n  `page_title` varbinary(255),\n"
        "  PRIMARY KEY (`page_id`)\n) ENGINE=InnoDB;\n"
    )
    assert read_create_table(str(dump)) == ("page", ["page_id", "page_namespace", "page_title"])
