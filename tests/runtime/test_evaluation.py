"""Scoring of ``refactx eval`` on a hand-made question file: each kind of reply counted as
docs/evaluation.md says (no model: the replies are written here, the scoring is the real one)."""

from __future__ import annotations

import json

import pytest

from refactx_index.qa.ask import GeneratedFact
from refactx_index.errors import InputRefused
from refactx_index.qa.evaluation import (
    Question,
    fact_object,
    markdown_table,
    normalize,
    read_question_file,
    read_questions,
    report,
    score,
    was_cut,
    write_outputs,
)
from refactx_index.tree.provenance import fact_id

BELFAST = "<Belfast> <country> <United Kingdom> ."  # the description question's gold fact
QUESTIONS = [
    {"id": "alias", "type": "forward", "question": "Which country is Cologne in?",
     "answers": [{"label": "Germany", "aliases": ["Federal Republic of Germany", "BRD"], "id": "Q183"}]},
    {"id": "unknown", "type": "forward", "question": "Who owns Copperleaf Trust Inc?",
     "answers": ["Quayside Group Inc"]},
    {"id": "empty", "type": "inverse", "question": "Who owns Granite Credit LLC?",
     "answers": [{"label": "Thornbury Bancorp plc", "aliases": []}]},
    {"id": "cut", "type": "inverse", "question": "What is the capital of Germany?",
     "answers": [{"label": "Berlin", "aliases": []}]},
    {"id": "extra-words", "type": "yes_no", "question": "Is Brussels in Belgium?", "answers": ["yes"]},
    {"id": "wrong", "type": "yes_no", "question": "Is Cologne in France?", "answers": ["no"]},
    {"id": "description", "type": "forward", "question": "Which country is Belfast in?",
     "answers": [{"label": "United Kingdom (country in Europe)", "aliases": ["UK"]}],
     "fact_ids": [7, fact_id(BELFAST)]},
]


def _fact(text: str, stored: bool = True) -> GeneratedFact:
    return GeneratedFact(text=text, token_ids=(1, 2), stored=stored)


@pytest.fixture()
def questions(tmp_path):
    path = tmp_path / "hand-made.jsonl"
    path.write_text("\n".join(json.dumps(q) for q in QUESTIONS) + "\n\n", encoding="utf-8")
    return {q.id: q for q in read_questions(path)}


@pytest.mark.parametrize("text, normalized", [
    ("The United Kingdom (England, Scotland, Wales, and Northern Ireland).", "united kingdom"),
    ("Berlin.", "berlin"),
    ("  an   Apple ", "apple"),
    ("Poznań (city in Greater Poland) (Poland)", "poznań"),
    ("1994-10-25", "1994 10 25"),
    ("I don't know.", "i don t know"),
    ("(only a parenthesis)", "only parenthesis"),  # nothing would be left: the text is kept
])
def test_normalization_folds_case_articles_punctuation_and_the_description(text, normalized):
    assert normalize(text) == normalized


def test_each_kind_of_reply_is_counted_as_the_docs_say(questions):
    germany = _fact("<Cologne> <country> <Germany> .")
    scored = {
        # an alias is right, and the fact it wrote (its object a gold label) supports it
        "alias": score(questions["alias"], "Federal Republic of Germany.", [germany], cut=False, seconds=1.0),
        "unknown": score(questions["unknown"], "I don't know.", [], cut=False, seconds=1.0),
        # no Answer: line at a natural end: answered, and wrong
        "empty": score(questions["empty"], "", [], cut=False, seconds=1.0),
        # the fact the limit cut is not counted as written
        "cut": score(questions["cut"], "", [GeneratedFact("<Germany> <capital> <Ber", (1,), False, complete=False)],
                     cut=True, seconds=1.0),
        # exact match: the right answer with extra words is wrong
        "extra-words": score(questions["extra-words"], "Yes, Brussels is in Belgium.", [], cut=False, seconds=1.0),
        "wrong": score(questions["wrong"], "Yes.", [_fact("<Cologne> <country> <France> .", stored=False)],
                       cut=False, seconds=1.0),
        # the display label's description is not needed, nor is the gold one's
        "description": score(questions["description"], "The United Kingdom (England, Scotland, Wales).",
                             [_fact("<Belfast> <country> <United Kingdom (country in Europe)> .")], cut=False,
                             seconds=1.0),
    }
    assert {k: s.right for k, s in scored.items()} == {
        "alias": True, "unknown": False, "empty": False, "cut": False, "extra-words": False, "wrong": False,
        "description": True}
    assert {k for k, s in scored.items() if not s.answered} == {"unknown", "cut"}
    assert scored["unknown"].unknown and scored["cut"].cut
    assert {k for k, s in scored.items() if s.supported} == {"alias", "description"}
    assert scored["description"].id_right is False  # the fact written is not the gold one
    assert scored["alias"].id_right is None  # the question has no gold ids

    summary = report({"constrained": list(scored.values())})["constrained"]
    assert summary["all"]["questions"] == 7 and summary["all"]["right"] == 2
    assert summary["all"]["A"] == round(2 / 7, 4)
    assert summary["all"]["P"] == round(2 / 5, 4)  # "I don't know" and the cut answer left out
    assert summary["all"]["facts_per_question"] == round(3 / 7, 3)
    assert summary["all"]["facts_stored_share"] == round(2 / 3, 4)
    assert summary["forward"]["A"] == round(2 / 3, 4) and summary["yes_no"]["P"] == 0.0
    assert summary["inverse"]["answered"] == 1 and summary["inverse"]["P"] == 0.0


def test_a_reply_is_cut_only_when_the_limit_stopped_it_before_an_answer_was_finished():
    assert was_cut("I need the owner.\nFact: <X> <owned", "", 64, 64)
    assert was_cut("Fact: <X> <owned by> <Y> .\nAnswer: Y", "Y", 64, 64)  # the answer line may be cut
    assert not was_cut("Answer: Y\nI need more.", "Y", 64, 64)  # an answer, then more text
    assert not was_cut("Fact: <X> <owned", "", 30, 64)  # stopped before the limit


def test_gold_ids_score_the_stored_facts_written(questions):
    """A stored fact's id is verbalize's fact_id of its text; an unstored fact has none."""
    def scored(*facts):
        return score(questions["description"], "UK", list(facts), cut=False, seconds=0.1).id_right

    assert scored(_fact(BELFAST)) is True
    assert scored(_fact("<Belfast> <country> <Ireland> .")) is False
    assert scored(_fact(BELFAST, stored=False)) is None  # nothing stored written: not scored by id
    assert score(questions["alias"], "BRD", [_fact(BELFAST)], cut=False, seconds=0.1).id_right is None


def test_fact_object_reads_the_last_element():
    assert fact_object("<Northern Ireland (region)> <country> <United Kingdom (country in Europe)> .") == \
        "United Kingdom (country in Europe)"
    assert fact_object("<Germany> <capital> <Ber") is None


def test_a_bad_question_line_is_counted_with_its_line_and_the_others_read(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(QUESTIONS[0]) + "\n" + json.dumps({"question": "Who?", "answers": []}) + "\n"
                    + "{not json\n")
    read = read_question_file(path)
    assert [q.id for q in read.questions] == ["alias"]
    assert [(r.line, r.reason) for r in read.rejected][0] == (2, "not a question: 'answers' holds no gold answer")
    assert read.rejected[1].line == 3 and read.rejected[1].reason.startswith("not a question")
    path.write_text("{not json\n")
    with pytest.raises(InputRefused, match=r"bad.jsonl: no questions \(1 lines rejected, the first: line 1"):
        read_questions(path)


def test_hits_at_1_takes_the_first_answer_of_a_list_and_a_list_is_right_when_all_gold():
    q = Question("What films did X act in?", ("Top Hat", "Kitty Foyle", "Crouching Tiger, Hidden Dragon"),
                 topic="X", hop="1-hop")
    def scored(answer, facts=()):
        return score(q, answer, list(facts), cut=False, seconds=0.1)

    assert scored("Top Hat, Kitty Foyle.").right and scored("Top Hat, Kitty Foyle.").hits1
    assert scored("Crouching Tiger, Hidden Dragon").right  # a gold name holding a comma is one answer
    partly = scored("Top Hat and Swing Time")
    assert partly.hits1 and not partly.right and partly.failure is None
    assert not scored("Swing Time, Top Hat").hits1
    assert not scored("I don't know.").hits1


def test_each_miss_is_put_down_to_one_failure():
    q = Question("Who directed Kismet?", ("William Dieterle",), topic="Kismet", hop="1-hop")
    cases = {
        "cut_by_token_limit": dict(answer="", facts=[_fact("<Kismet> <directed by> <William Dieterle> .")], cut=True),
        "no_fact_written": dict(answer="Someone", facts=[], cut=False),
        "gold_in_a_fact_other_answer_text": dict(
            answer="Kismet was directed by him", facts=[_fact("<Kismet> <directed by> <William Dieterle> .")],
            cut=False),
        "other_subject": dict(answer="Andy", facts=[_fact("<War> <directed by> <Andy Warhol> .")], cut=False),
        "topic_other_facts": dict(answer="1944", facts=[_fact("<Kismet> <release year> <1944> .")], cut=False),
        "unknown_after_facts": dict(answer="I don't know.", facts=[_fact("<Kismet> <release year> <1944> .")],
                                    cut=False),
    }
    for failure, case in cases.items():
        assert score(q, case["answer"], case["facts"], case["cut"], 0.1).failure == failure, failure
    assert score(q, "William Dieterle", [], False, 0.1).failure is None
    two = Question("Who starred in the films Dieterle directed?", ("Marlene Dietrich",), topic="William Dieterle",
                   hop="2-hop")
    first = _fact("<William Dieterle> <directed> <Kismet> .")
    assert score(two, "Kismet", [first], False, 0.1).failure == "first_hop_only"
    chained = [first, _fact("<Kismet> <release year> <1944> .")]
    assert score(two, "1944", chained, False, 0.1).failure == "topic_other_facts"


def test_questions_the_index_cannot_answer_are_reported_apart():
    q = Question("Who directed Kismet?", ("William Dieterle",), type="movie_to_director", topic="Kismet", hop="1-hop")
    rows = [score(q, "William Dieterle", [], False, 0.1, (True, True)),
            score(q, "Nobody", [], False, 0.1, (False, False))]
    summary = report({"constrained": rows})["constrained"]
    assert summary["all"]["questions"] == 1 and summary["all"]["Hits@1"] == 1.0
    assert summary["1-hop"]["questions"] == 1 and summary["movie_to_director"]["questions"] == 1
    assert summary["apart"] == {**summary["apart"], "questions": 1, "topic_not_in_index": 1, "hits1": 0}


def test_outputs_are_json_markdown_and_a_png(questions, tmp_path):
    rows = [score(questions["alias"], "Germany", [], cut=False, seconds=2.0),
            score(questions["wrong"], "No", [], cut=False, seconds=4.0)]
    summary = write_outputs({"constrained": rows, "unconstrained": rows[:1]}, tmp_path / "out" / "eval",
                            {"questions_file": "hand-made.jsonl"})
    doc = json.loads((tmp_path / "out" / "eval.json").read_text())
    assert doc["summary"]["constrained"]["all"]["A"] == 1.0
    assert doc["summary"]["constrained"]["all"]["seconds_per_question"] == 3.0
    assert [a["id"] for a in doc["answers"]["constrained"]] == ["alias", "wrong"]
    table = (tmp_path / "out" / "eval.md").read_text()
    assert table == markdown_table(summary) and "| unconstrained | forward | 1 | 1.00 | 1.00 | 1.00 |" in table
    assert (tmp_path / "out" / "eval.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_endless_or_huge_line_is_refused_naming_the_file_and_line_without_reading_it_all(tmp_path):
    """/dev/zero (one line without end) and a 50 MB line: refused after at most MAX_LINE_BYTES
    of it, in a bounded memory (tracemalloc's peak, far under the line's size)."""
    import tracemalloc

    from refactx_index.qa.evaluation import MAX_LINE_BYTES

    huge = tmp_path / "huge.jsonl"
    with open(huge, "wb") as fh:
        fh.write(json.dumps(QUESTIONS[0]).encode() + b"\n")
        fh.write(b'{"question": "' + b"a" * (50 << 20) + b'"}\n')
    for path, fmt, line in (("/dev/zero", "jsonl", 1), ("/dev/zero", "auto", 1), (huge, "jsonl", 2),
                            (huge, "auto", 2)):
        tracemalloc.start()
        try:
            with pytest.raises(InputRefused, match=rf"{path}: line {line} is longer than {MAX_LINE_BYTES} bytes"):
                read_question_file(path, fmt)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 8 * MAX_LINE_BYTES, (path, fmt, peak)


def test_a_binary_file_is_refused_naming_the_file_and_line(tmp_path):
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(json.dumps(QUESTIONS[0]).encode() + b"\n" + bytes(range(128, 256)) * 4 + b"\n")
    with pytest.raises(InputRefused, match=r"garbage.bin: line 2 is not UTF-8 text \(a byte 0x80 at column 1\)"):
        read_question_file(garbage, "jsonl")
    metaqa = tmp_path / "qa_dev.txt"
    metaqa.write_bytes("what is [Berlin] the capital of\tGermany\n".encode() + b"\xff\xfe\n")
    with pytest.raises(InputRefused, match=r"qa_dev.txt: line 2 is not UTF-8"):
        read_question_file(metaqa)
