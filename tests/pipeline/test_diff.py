"""The diff of two builds (``refactx_pipeline.stages.diff``) on a real Spark session: over
random pairs of fact sets (statements added and removed, labels and descriptions changed,
no change at all, everything changed), its changes and counts equal those computed here in
plain Python from the two sets, with sets and dicts instead of joins."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = [pytest.mark.spark]

WORDS = ["Ada", "Bern", "Cole", "Dora", "Eli", "Fay"]  # few: labels collide, texts merge
PROPERTIES = {"P31": "instance of", "P50": "author", "P577": "publication date", "P17": "country"}
SourceKey = tuple  # (kind, subject, property, object, value), as PROVENANCE holds it


@dataclass(frozen=True)
class Graph:
    """What a build's facts are verbalized from: labels, descriptions, statements."""

    labels: dict[str, str]  # entity -> display label (properties: PROPERTIES)
    descriptions: dict[str, str] = field(default_factory=dict)
    statements: frozenset = frozenset()  # (subject, property, object item or None, value or None)

    def sources(self) -> dict[SourceKey, str]:
        """Each source with the text it makes (a statement naming an unlabelled entity makes none)."""
        out = {}
        for s, p, o, v in self.statements:
            if s in self.labels and (o is None or o in self.labels):
                obj = self.labels[o] if o is not None else v
                out["statement", s, p, o, v] = f"<{self.labels[s]}> <{self.labels[p]}> <{obj}> ."
        # described: the subjects and item objects of the statements kept
        named = {x for (_, s, _, o, _) in out for x in (s, o) if x is not None}
        for e in sorted(named):
            if e in self.descriptions:
                out["description", e, None, None, self.descriptions[e]] = (
                    f"<{self.labels[e]}> <description> <{self.descriptions[e]}> .")
        return out

    def facts(self) -> dict[str, tuple[str, str | None]]:
        """text -> (kind, property) as verbalize dedupes: a statement first, then the least property."""
        best: dict[str, tuple[int, str, str]] = {}
        for (kind, _, prop, _, _), text in self.sources().items():
            rank = (0 if kind == "statement" else 1, kind, prop or "")
            best[text] = min(best.get(text, rank), rank)
        return {text: (kind, prop or None) for text, (_, kind, prop) in best.items()}


def expected_diff(old: Graph, new: Graph) -> tuple[dict[str, str], dict[str, int]]:
    """(text -> change, entity -> relabelled facts naming it), by the definitions in diff.py."""
    old_src, new_src = old.sources(), new.sources()
    texts_old, texts_new = set(old_src.values()), set(new_src.values())
    by_text_new, by_text_old = defaultdict(set), defaultdict(set)
    for key, text in new_src.items():
        by_text_new[text].add(key)
    for key, text in old_src.items():
        by_text_old[text].add(key)
    change = {}
    for text in texts_new - texts_old:
        change[text] = "relabelled_added" if by_text_new[text] & old_src.keys() else "added"
    for text in texts_old - texts_new:
        change[text] = "relabelled_removed" if by_text_old[text] & new_src.keys() else "removed"
    relabelled_by_entity: dict[str, int] = defaultdict(int)
    changed = {e for e in old.labels.keys() & new.labels.keys() if old.labels[e] != new.labels[e]}
    for text, what in change.items():
        if what == "relabelled_added":
            named = {x for (_, s, p, o, _) in by_text_new[text] for x in (s, p, o) if x is not None}
            for e in named & changed:
                relabelled_by_entity[e] += 1
    return change, dict(relabelled_by_entity)


def entity_labels(labels: dict[str, str]) -> dict[str, str]:
    return {**labels, **PROPERTIES}


@st.composite
def graphs(draw) -> Graph:
    n = draw(st.integers(1, 12))
    entities = [f"Q{i}" for i in range(1, n + 1)]
    labels = {e: draw(st.sampled_from(WORDS)) for e in entities if draw(st.integers(0, 9)) > 0}
    descriptions = {e: draw(st.sampled_from(["poet", "city", "work"])) for e in entities if draw(st.booleans())}
    statement = st.tuples(st.sampled_from(entities), st.sampled_from(sorted(PROPERTIES)),
                          st.one_of(st.sampled_from(entities), st.none()), st.sampled_from(["1999", "2000", "x"]))
    statements = {(s, p, o, None if o is not None else v) for s, p, o, v in draw(st.lists(statement, max_size=30))}
    return Graph(entity_labels(labels), descriptions, frozenset(statements))


@st.composite
def graph_pairs(draw) -> tuple[Graph, Graph]:
    old = draw(graphs())
    how = draw(st.sampled_from(["edits", "edits", "edits", "none", "relabel_all", "replace_all"]))
    if how == "none":
        return old, old
    entities = sorted(e for e in old.labels if e.startswith("Q"))
    if how == "relabel_all":  # every entity's label changes: every fact is re-labelled
        return old, replace(old, labels={e: (f"{lab} II" if e.startswith("Q") else lab)
                                         for e, lab in old.labels.items()})
    if how == "replace_all":  # another graph altogether
        return old, draw(graphs())
    kept = frozenset(x for x in old.statements if draw(st.integers(0, 4)) > 0)
    added = {(s, "P50", o, None) for s, o in draw(st.lists(st.tuples(st.sampled_from(entities or ["Q1"]),
                                                                     st.sampled_from(entities or ["Q1"])),
                                                           max_size=5))}
    labels = dict(old.labels)
    for e in entities:
        if draw(st.integers(0, 3)) == 0:
            labels[e] = draw(st.sampled_from(WORDS + ["Gil", "Hal"]))
    if entities and draw(st.booleans()):
        del labels[draw(st.sampled_from(entities))]  # an entity loses its label: its facts go
    descriptions = {e: (d if draw(st.integers(0, 3)) else d + " again") for e, d in old.descriptions.items()}
    return old, Graph(labels, descriptions, kept | added)


def tagged(graph: Graph, case: int) -> Graph:
    """``graph`` with every id and label prefixed by its case: the cases of one run share no
    text, source or entity, so one diff of their union is the union of their diffs."""
    t = f"c{case}:"
    return Graph({t + e: t + lab for e, lab in graph.labels.items()},
                 {t + e: t + d for e, d in graph.descriptions.items()},
                 frozenset((t + s, t + p, None if o is None else t + o, None if v is None else t + v)
                           for s, p, o, v in graph.statements))


def union(graphs: list[Graph]) -> Graph:
    return Graph({k: v for g in graphs for k, v in g.labels.items()},
                 {k: v for g in graphs for k, v in g.descriptions.items()},
                 frozenset().union(*(g.statements for g in graphs)))


def _frames(spark, graph: Graph):
    from pyspark.sql import functions as F

    from refactx_pipeline.stages.schemas import LABELS

    facts = spark.createDataFrame(
        [(t, k, p) for t, (k, p) in graph.facts().items()],
        "text string, kind string, property string").select(F.xxhash64("text").alias("fact_id"), "*")
    provenance = spark.createDataFrame(
        [(t, *key) for key, t in graph.sources().items()],
        "text string, kind string, subject string, property string, object string, value string",
    ).select(F.xxhash64("text").alias("fact_id"), "kind", "subject", "property", "object", "value")
    labels = spark.createDataFrame([(e, lab, "label") for e, lab in graph.labels.items()], LABELS)
    return facts, provenance, labels


SMALL = Graph(entity_labels({"Q1": "Ada", "Q2": "Bern"}), {"Q1": "poet"},
              frozenset({("Q1", "P50", "Q2", None), ("Q2", "P577", None, "1999")}))
# in every run: no change, every label changed, another graph altogether, no facts before
FIXED_PAIRS = [
    (SMALL, SMALL),
    (SMALL, replace(SMALL, labels=entity_labels({"Q1": "Ada II", "Q2": "Bern II"}))),
    (SMALL, Graph(entity_labels({"Q3": "Cole"}), {}, frozenset({("Q3", "P31", "Q3", None)}))),
    (Graph(entity_labels({})), SMALL),
]


# Each example is one Spark run over many random cases (tagged apart): a Spark job costs
# seconds on a shared machine, a case in it nothing.
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(drawn=st.lists(graph_pairs(), min_size=12, max_size=30))
def test_diff_equals_plain_python(spark, drawn):
    from refactx_pipeline.stages import diff

    pairs = FIXED_PAIRS + drawn
    old = union([tagged(o, i) for i, (o, _) in enumerate(pairs)])
    new = union([tagged(n, i) for i, (_, n) in enumerate(pairs)])
    old_facts, old_provenance, old_labels = _frames(spark, old)
    new_facts, new_provenance, new_labels = _frames(spark, new)
    changes = diff.diff_facts(old_facts, old_provenance, new_facts, new_provenance).cache()
    relabelled = diff.relabelled_entities(changes, new_provenance, diff.label_changes(old_labels, new_labels))
    relabelled = relabelled.cache()
    facts_old, facts_new = old.facts(), new.facts()
    counts = diff.diff_counts(changes, len(facts_old), len(facts_new), relabelled)
    got = {r["text"]: r["change"] for r in changes.collect()}
    got_entities = {r["entity"]: r["facts"] for r in relabelled.collect()}
    changes.unpersist()
    relabelled.unpersist()

    # case by case, against plain Python
    for i, (o, n) in enumerate(pairs):
        want, want_entities = expected_diff(tagged(o, i), tagged(n, i))
        tag = f"<c{i}:"
        assert {t: c for t, c in got.items() if t.startswith(tag)} == want, (i, o, n)
        assert {e: k for e, k in got_entities.items() if e.startswith(f"c{i}:")} == want_entities, (i, o, n)
        if o == n:
            assert not want
    assert sum(got[t] == "relabelled_added" for t in got if t.startswith("<c1:")) == len(SMALL.facts())

    # the counts of the whole run
    want, want_entities = expected_diff(old, new)
    assert got == want and len(got) == counts["added"] + counts["removed"] + counts["relabelled_added"] + \
        counts["relabelled_removed"]
    assert counts["relabelled_entities"] == len(want_entities)
    assert (counts["facts_before"], counts["facts_after"]) == (len(facts_old), len(facts_new))
    assert counts["unchanged"] == len(facts_old.keys() & facts_new.keys())
    by_kind: dict[str, dict[str, int]] = {}
    by_property: dict[str, dict[str, int]] = {}
    for text, what in want.items():
        kind, prop = (facts_new if what.endswith("added") else facts_old)[text]
        by_kind.setdefault(kind, dict.fromkeys(diff.CHANGE_KINDS, 0))[what] += 1
        if prop is not None:
            by_property.setdefault(prop, dict.fromkeys(diff.CHANGE_KINDS, 0))[what] += 1
    for what in diff.CHANGE_KINDS:
        assert counts[what] == sum(1 for c in want.values() if c == what), what
    assert counts["by_kind"] == by_kind
    assert counts["by_property"] == by_property
    diff.check_counts(counts)


def test_check_counts_refuses_changes_that_do_not_add_up():
    from refactx_pipeline.stages import diff

    counts = {"facts_before": 10, "facts_after": 11, "added": 2, "removed": 1, "relabelled_added": 3,
              "relabelled_removed": 3}
    diff.check_counts(counts)
    with pytest.raises(ValueError, match="account for 12"):
        diff.check_counts({**counts, "added": 3})


def test_previous_work_dir_from_the_catalogs_rows_path(tmp_path):
    from refactx_pipeline.stages import diff

    work = tmp_path / "wikidata" / "20240401"
    assert diff.previous_work_dir(work / "prefix_rows" / "qwen2.5" / "rows") == work
    assert diff.previous_work_dir(work / "path_index" / "prefix_rows" / "gpt2" / "rows") == work
    with pytest.raises(ValueError, match="not the rows directory"):
        diff.previous_work_dir(work / "tokenize" / "gpt2" / "tokens")
