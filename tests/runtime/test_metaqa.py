"""MetaQA's own question files: the reader on the real dev files (skipped when ../shared has
none), malformed lines counted, and ``refactx eval`` end to end with the real model on an
index built from the slice of kb.txt that holds a few questions' facts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from refactx_index.errors import InputRefused
from refactx_index.qa.evaluation import MetaQAReader, read_question_file, stratified_sample

METAQA = Path(__file__).resolve().parents[3] / "shared" / "data" / "metaqa"
ROOT = Path(__file__).resolve().parents[2]
needs_metaqa = pytest.mark.skipif(not (METAQA / "kb.txt").is_file(), reason="MetaQA is not in ../shared")


@needs_metaqa
@pytest.mark.parametrize("hop, count", [("1-hop", 9992), ("2-hop", 14872), ("3-hop", 14274)])
def test_the_real_dev_files_are_read_whole(hop, count):
    read = read_question_file(METAQA / hop / "qa_dev.txt")
    assert len(read.questions) == count and read.rejected == []
    first = read.questions[0]
    lines = (METAQA / hop / "qa_dev.txt").read_text(encoding="utf-8").splitlines()
    qtypes = (METAQA / hop / "qa_dev_qtype.txt").read_text(encoding="utf-8").splitlines()
    text, answers = lines[0].split("\t")
    assert first.topic == text[text.index("[") + 1:text.index("]")]
    assert "[" not in first.question and first.topic in first.question
    assert first.answers == tuple(answers.split("|")) and first.type == qtypes[0] and first.hop == hop
    assert {q.type for q in read.questions} == set(qtypes)


@needs_metaqa
def test_a_stratified_sample_is_fixed_by_its_seed():
    questions = (read_question_file(METAQA / "1-hop" / "qa_dev.txt").questions
                 + read_question_file(METAQA / "2-hop" / "qa_dev.txt").questions)
    a, b = stratified_sample(questions, 50, seed=7), stratified_sample(questions, 50, seed=7)
    assert [q.id for q in a] == [q.id for q in b]
    assert sum(q.hop == "1-hop" for q in a) == sum(q.hop == "2-hop" for q in a) == 50
    assert [q.id for q in stratified_sample(questions, 50, seed=8)] != [q.id for q in a]


def _write(folder: Path, lines: list[str], qtypes: list[str] | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "qa_dev.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if qtypes is not None:
        (folder / "qa_dev_qtype.txt").write_text("\n".join(qtypes) + "\n", encoding="utf-8")
    return folder / "qa_dev.txt"


def test_malformed_lines_are_counted_with_their_line_and_reason(tmp_path):
    lines = ["what movies did [Tom Cullen] act in\tWeekend",
             "no tab here [Tom Cullen]",
             "what did Tom Cullen act in\tWeekend",
             "what did [Tom] [Cullen] act in\tWeekend",
             "who directed [Weekend]\t | ",
             "who directed [ ]\tAndrew Haigh",
             "who directed [Weekend]\tAndrew Haigh|"]
    path = _write(tmp_path / "1-hop", lines, ["actor_to_movie"] + ["movie_to_director"] * 6)
    read = read_question_file(path)
    assert [(r.line, r.reason) for r in read.rejected] == [
        (2, "1 tab-separated fields (expected question and answers)"),
        (3, "no [topic entity] in the question"), (4, "more than one [topic entity]"),
        (5, "no gold answer"), (6, "an empty [topic entity]")]
    assert [(q.question, q.answers, q.type, q.hop, q.id) for q in read.questions] == [
        ("what movies did Tom Cullen act in", ("Weekend",), "actor_to_movie", "1-hop", "1-hop:1"),
        ("who directed Weekend", ("Andrew Haigh",), "movie_to_director", "1-hop", "1-hop:7")]
    # without a qtype file the type is the hop; a qtype file of another length is refused
    (tmp_path / "1-hop" / "qa_dev_qtype.txt").unlink()
    assert {q.type for q in read_question_file(path).questions} == {"1-hop"}
    _write(tmp_path / "1-hop", lines, ["actor_to_movie"])
    with pytest.raises(InputRefused, match="7 lines but 1 in qa_dev_qtype.txt"):
        read_question_file(path)
    bad = _write(tmp_path / "2-hop", ["[x] no tab"], None)
    with pytest.raises(InputRefused, match="no questions .*line 1"):
        read_question_file(bad, "metaqa")
    assert MetaQAReader().accepts(path, lines[0]) and not MetaQAReader().accepts(tmp_path / "q.jsonl", "{}")


def _slice(topics: set[str], out: Path) -> Path:
    """The kb.txt lines of every film whose lines name one of ``topics``."""
    lines = (METAQA / "kb.txt").read_text(encoding="utf-8").splitlines()
    films = {line.split("|")[0] for line in lines if set(line.split("|")) & topics}
    out.write_text("\n".join(line for line in lines if line.split("|")[0] in films) + "\n", encoding="utf-8")
    return out


@needs_metaqa
@pytest.mark.slow
def test_eval_of_metaqa_questions_end_to_end_with_the_real_model(tmp_path):
    from refactx_index.cli import main
    from refactx_index.qa.models import model_directory
    from ..pgdb import needs_pipeline

    needs_pipeline()
    from refactx_pipeline.config import Config, VocabularyConfig
    from refactx_pipeline.graph.index import build_graph_index

    one = (METAQA / "1-hop" / "qa_dev.txt").read_text(encoding="utf-8").splitlines()[:3]
    one_types = (METAQA / "1-hop" / "qa_dev_qtype.txt").read_text(encoding="utf-8").splitlines()[:3]
    two = (METAQA / "2-hop" / "qa_dev.txt").read_text(encoding="utf-8").splitlines()[1:2]
    two_types = (METAQA / "2-hop" / "qa_dev_qtype.txt").read_text(encoding="utf-8").splitlines()[1:2]
    topics = {line[line.index("[") + 1:line.index("]")] for line in one + two}
    q1 = _write(tmp_path / "1-hop", one + ["a line without its answers", "what did [Nobody At All] act in\tX"],
                one_types + ["actor_to_movie", "actor_to_movie"])
    q2 = _write(tmp_path / "2-hop", two, two_types)

    cfg = Config.load(str(ROOT / "conf" / "metaqa.toml"), env={}).updated(
        {"graph.triples": [str(_slice(topics, tmp_path / "kb-slice.txt"))]})
    built = build_graph_index(cfg, VocabularyConfig.parse(f"smollm2={model_directory('smollm2')}"))
    built.index.save(tmp_path / "metaqa.rfx")

    out = tmp_path / "eval" / "metaqa"
    assert main(["eval", str(q1), str(q2), "--index-file", str(tmp_path / "metaqa.rfx"), "--beams", "1",
                 "--max-new-tokens", "40", "--batch-size", "5", "--no-plot", "--prefill-fact",
                 "--out", str(out)]) == 0
    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["rejected_lines"] == 1 and doc["rejected"][0]["line"] == 4
    # the examples come from the index's own facts
    assert all(a.count("Fact: <") >= 1 for _, a in doc["prompt"]["examples"])
    constrained = doc["summary"]["constrained"]
    assert constrained["all"]["questions"] == 4 and constrained["apart"]["questions"] == 1
    assert constrained["apart"]["topic_not_in_index"] == 1
    assert constrained["1-hop"]["questions"] == 3 and constrained["2-hop"]["questions"] == 1
    for mode in ("constrained", "unconstrained"):
        s = doc["summary"][mode]["all"]
        assert s["hits1"] + sum(s["failures"].values()) == s["questions"]
    by_id = {a["id"]: a for a in doc["answers"]["constrained"]}
    assert by_id["1-hop:5"]["topic_found"] is False and by_id["1-hop:5"]["supported_by_index"] is False
    kb = [line.split("|") for line in (tmp_path / "kb-slice.txt").read_text(encoding="utf-8").splitlines()]
    for n, line in enumerate(one, 1):
        text, answers = line.split("\t")
        topic = text[text.index("[") + 1:text.index("]")]
        near = {x.lower() for s, _, o in kb if topic in (s, o) for x in (s, o)}
        assert by_id[f"1-hop:{n}"]["topic_found"] is True
        assert by_id[f"1-hop:{n}"]["supported_by_index"] == all(a.lower() in near for a in answers.split("|"))
    # every reply opens with a fact, and constrained every complete fact is stored
    assert all(a["facts"] >= 1 for a in doc["answers"]["constrained"])
    assert constrained["all"]["facts_stored_share"] == 1.0


FACTS_WRITTEN = ("I need the director of Kismet.\nFact: <Kismet> <directed by> <William Dieterle> .\n"
                 "Fact: <Kismet> <genre> <Drama, War (1944)> .\nFact: <Kismet> <starring> <Nobody Stored> .\nAnswer:")


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    from transformers import AutoTokenizer

    from refactx_index.qa.models import model_directory

    return AutoTokenizer.from_pretrained(model_directory("smollm2"))


def test_grounded_answers_never_let_out_a_name_no_stored_written_fact_holds(smollm2_tokenizer):
    """Whatever the model's scores, the text after ``Answer:`` ends as an object of a stored
    fact written before it (not the subject a fact was looked up from), or "I don't know.",
    then the reply ends."""
    import torch
    from hypothesis import given, settings, strategies as st

    from refactx_index.qa.ask import GroundedAnswer

    tok = smollm2_tokenizer
    prompt = tok("Question: who directed Kismet?\n", add_special_tokens=False)["input_ids"]
    reply = tok(FACTS_WRITTEN, add_special_tokens=False)["input_ids"]
    eos = [tok.eos_token_id]
    allowed = {" William Dieterle.", " Drama, War (1944).", " I don't know."}
    size = len(tok)

    @given(seed=st.integers(0, 2**31 - 1), bias=st.sampled_from(["none", "eos", "other"]))
    @settings(max_examples=40, deadline=None)
    def check(seed, bias):
        processor = GroundedAnswer(tok, len(prompt), "Fact:", eos, stored=lambda text: "Nobody" not in text)
        generator = torch.Generator().manual_seed(seed)
        ids = list(prompt) + list(reply)
        for _ in range(30):
            scores = torch.randn(1, size, generator=generator)
            if bias == "eos":  # a model eager to stop
                scores[0, eos] += 50
            elif bias == "other":  # a model eager to name the unstored actor
                for t in tok(" Nobody Stored.", add_special_tokens=False)["input_ids"]:
                    scores[0, t] += 50
            scores = processor(torch.tensor([ids]), scores)
            nxt = int(scores[0].argmax())
            if nxt in eos:
                break
            ids.append(nxt)
        answer = tok.decode(ids[len(prompt) + len(reply):], skip_special_tokens=True)
        assert answer in allowed, answer
        assert nxt in eos

    check()


MOVIE_FACTS = [
    "<Kismet> <directed by> <William Dieterle> .", "<William Dieterle> <directed> <Kismet> .",
    "<William Dieterle> <directed> <The Devil and Daniel Webster> .",
    "<The Devil and Daniel Webster> <directed by> <William Dieterle> .",
    "<Kismet> <starring> <Marlene Dietrich> .", "<Kismet> <starring> <Ronald Colman> .",
    "<Marlene Dietrich> <starred in> <Kismet> .", "<Ronald Colman> <starred in> <Kismet> .",
    "<Kismet> <release year> <1944> .", "<1944> <release year of> <Kismet> .",
    "<Top Hat> <starring> <Ginger Rogers> .", "<Ginger Rogers> <starred in> <Top Hat> .",
    "<Top Hat> <release year> <1935> .", "<1935> <release year of> <Top Hat> .",
]


def test_the_prompt_is_drawn_from_the_index_and_rendered_as_text_without_a_chat_template():
    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.prompting.prompt import UNKNOWN, Prompt, index_examples
    from refactx_index.vocab import open_tokenizer

    from ..conftest import tokenizer_dir

    tok = open_tokenizer(str(tokenizer_dir("qwen2.5")))
    index = MemoryTreeIndex.from_facts(MOVIE_FACTS, tok)
    examples = index_examples(index, tok, unknown=True)
    assert index_examples(index, tok) == tuple(e for e in examples if not e[1].endswith(UNKNOWN))
    stored = set(MOVIE_FACTS)
    for _, answer in examples:  # every fact an example writes is a stored one
        assert all(line[len("Fact: "):] in stored for line in answer.splitlines() if line.startswith("Fact:"))
    endings = [a.splitlines()[-1] for _, a in examples]
    assert "Answer: yes." in endings and f"Answer: {UNKNOWN}" in endings
    assert any(a.count("Fact:") >= 2 and q.startswith("What are all") for q, a in examples)  # a list
    assert any(q.startswith("What is the ") and " of what " in q for q, _ in examples)  # a chain
    assert len({q.split(" ", 2)[2].split(" ")[0] for q, _ in examples}) >= 2  # more than one subject

    prompt = Prompt(examples=examples)
    text = prompt.render(tok, "who directed Top Hat", prefill="Fact:")  # tokenizers.Tokenizer: no chat template
    assert text.startswith(prompt.system) and text.endswith("Question: who directed Top Hat\nReply:\nFact:")
    assert all(f"Question: {q}\nReply:\n{a}" in text for q, a in examples)


@pytest.fixture(scope="module")
def movie_index():
    from refactx_index.qa.models import model_directory
    from refactx_index.tree.memory import MemoryTreeIndex

    return MemoryTreeIndex.from_facts(MOVIE_FACTS, str(model_directory("smollm2") / "tokenizer.json"))


def _relations_first(tok, index, question):
    from refactx_index.qa.ask import question_entities
    from refactx_index.qa.policies import RelationsFirstRule

    entities = [question_entities(index, tok, question)]
    return RelationsFirstRule(tok, index, tok, [question], entities, "Fact:")


def test_relations_first_chains_a_second_fact_from_the_first_ones_object(smollm2_tokenizer, movie_index):
    """A question of two relation words (``directed``, ``starred``) is not let answer after
    the first fact: the next line opens a fact, its subject is the first fact's object, its
    relation the one the question names; a question of one relation word is left alone."""
    tok = smollm2_tokenizer
    from refactx_index.qa.models import model_directory
    from refactx_index.tree.memory import MemoryTreeIndex

    rf = _relations_first(tok, movie_index, "who starred in the films William Dieterle directed")
    assert rf.entities == [["William Dieterle"]]
    first = "Fact: <William Dieterle> <directed> <Kismet> ."
    assert rf.targets(0, "Fact: <William Dieterle> <") == ["Fact: <William Dieterle> <directed>"]
    assert rf.targets(0, first) == ["\nFact:"]
    # the first fact's object: one that has the open relation (Dieterle directed two films, one with actors)
    assert rf.targets(0, "Fact: <William Dieterle> <directed> <") == ["Fact: <William Dieterle> <directed> <Kismet>"]
    assert rf.targets(0, first + "\n") == [first + "\nFact:"]
    assert rf.targets(0, first + "\nFact:") == [first + "\nFact: <Kismet> <"]
    assert rf.targets(0, first + "\nFact: <Kismet> <") == [first + "\nFact: <Kismet> <starring>"]
    # both words covered: the answer
    assert rf.targets(0, first + "\nFact: <Kismet> <starring> <Marlene Dietrich> .") == ["\nAnswer:"]
    one = _relations_first(tok, movie_index, "who directed Kismet")
    assert one.targets(0, "Fact: <Kismet> <directed by> <William Dieterle> .") == ["\nAnswer:"]
    # a one-word entity that is also a relation word ("directed" a subject of the index) stays a relation word
    tagged = MemoryTreeIndex.from_facts(MOVIE_FACTS + ["<directed> <tag of> <Kismet> ."],
                                        str(model_directory("smollm2") / "tokenizer.json"))
    assert "dire" in _relations_first(tok, tagged, "who directed Kismet").words[0]
    none = _relations_first(tok, movie_index, "who acted in Kismet")  # no relation named: no preference
    assert none.targets(0, "Fact: <Kismet> <starring> <Ronald Colman> .") == []
    assert none.targets(0, "Fact: <Kismet> <") == []
    assert one.targets(0, "Fact: <Kismet> <") == ["Fact: <Kismet> <directed by>"]


def test_relations_first_masks_answer_and_end_whatever_the_scores(smollm2_tokenizer, movie_index):
    import torch
    from hypothesis import given, settings, strategies as st

    from refactx_index.qa.ask import PolicyProcessor

    tok = smollm2_tokenizer
    rf = PolicyProcessor(tok, [_relations_first(tok, movie_index, "who starred in the films William Dieterle directed")],
                         0)
    ids = tok("Fact: <William Dieterle> <directed> <Kismet> .", add_special_tokens=False)["input_ids"]
    boosted = [tok.eos_token_id, *tok("\nAnswer:", add_special_tokens=False)["input_ids"][:1]]

    @given(seed=st.integers(0, 2**31 - 1))
    @settings(max_examples=20, deadline=None)
    def check(seed):
        scores = torch.randn(1, len(tok), generator=torch.Generator().manual_seed(seed))
        scores[0, boosted] += 50
        out = rf(torch.tensor([ids]), scores)
        chosen = tok.decode([int(out[0].argmax())])
        assert chosen.startswith("\n") and "\nFact:".startswith(chosen)

    check()


def test_question_prompt_shows_last_the_example_of_the_questions_relations(smollm2_tokenizer, movie_index):
    from refactx_index.prompting.prompt import Prompt, example_pool, question_prompt

    tok = smollm2_tokenizer
    pool = example_pool(movie_index, tok)
    stored = set(MOVIE_FACTS)
    for e in pool:  # every fact an example writes is stored, with the relations it names
        facts = [line[len("Fact: "):] for line in e.answer.splitlines() if line.startswith("Fact:")]
        assert facts and all(f in stored for f in facts)
        assert [f.split("> <")[1] for f in facts][:len(e.relations)][0] == e.relations[0]
    prompt = question_prompt(movie_index, tok, count=3)
    two = prompt.for_question("who starred in the films William Dieterle directed")
    assert isinstance(two, Prompt) and len(two.examples) == 3
    assert two.examples[-1][1].count("Fact:") >= 2  # a chain of the two relations closes the examples
    assert {"directed", "starring"} <= set(two.examples[-1][1].replace(">", "<").split("<"))
    one = prompt.for_question("when was Top Hat released")
    assert "<release year>" in one.examples[-1][1] and one.examples[-1][1].count("Fact:") == 1
    assert prompt.for_question("tell me something").examples == prompt.fallback
    assert prompt.render(tok, "who directed Kismet").endswith("who directed Kismet<|im_end|>\n<|im_start|>assistant\n")


@needs_metaqa
@pytest.mark.slow
def test_a_two_hop_question_is_answered_from_a_chain_of_two_facts_with_the_real_model(tmp_path):
    """Relations first, entities first and grounded, constrained, on a slice of kb.txt: the
    reply writes the question's first relation from its entity, then a fact from that fact's
    object with the second relation, and answers a gold name of the second fact."""
    from refactx_index.prompting.prompt import question_prompt
    from refactx_index.qa.ask import ask
    from refactx_index.qa.evaluation import fact_parts, read_question_file
    from refactx_index.qa.models import load_model, model_directory
    from ..pgdb import needs_pipeline

    needs_pipeline()
    from refactx_pipeline.config import Config, VocabularyConfig
    from refactx_pipeline.graph.index import build_graph_index

    line = next(n for n, text in enumerate((METAQA / "2-hop" / "qa_dev.txt").read_text(encoding="utf-8")
                                           .splitlines(), 1) if "[Eugenio Martín] starred who" in text)
    question = read_question_file(METAQA / "2-hop" / "qa_dev.txt").questions[line - 1]
    cfg = Config.load(str(ROOT / "conf" / "metaqa.toml"), env={}).updated(
        {"graph.triples": [str(_slice({question.topic}, tmp_path / "kb-slice.txt"))]})
    index = build_graph_index(cfg, VocabularyConfig.parse(f"smollm2={model_directory('smollm2')}")).index
    loaded = load_model("smollm2")
    [answer] = ask([question.question], index, loaded, prompt=question_prompt(index, loaded.tokenizer), num_beams=1,
                   max_new_tokens=96, policies="prefill-fact,entities-first,relations-first,grounded")
    facts = [fact_parts(f.text) for f in answer.facts]
    assert len(facts) >= 2 and all(f.stored for f in answer.facts), answer.reply
    assert facts[0][:2] == ["Eugenio Martín", "directed"]
    assert facts[1][0] == facts[0][2] and facts[1][1] == "starring", answer.reply
    assert answer.answer.rstrip(".") in {f[2] for f in facts[1:]} & set(question.answers), answer.reply


def test_grounded_answers_come_from_the_chain_of_the_questions_entities_and_named_relations(smollm2_tokenizer):
    from refactx_index.prompting.prompt import word_stems
    from refactx_index.qa.ask import GroundedAnswer

    grounded = GroundedAnswer(smollm2_tokenizer, 0, "Fact:", [smollm2_tokenizer.eos_token_id], stored=lambda t: True)
    reply = ("Fact: <William Dieterle> <directed> <Kismet> .\nFact: <Top Hat> <starring> <Ginger Rogers> .\n"
             "Fact: <Kismet> <release year> <1944> .\n")
    assert grounded.candidates(reply) == [" Ginger Rogers.", " 1944.", " I don't know."]
    # only the chain from the question's entity: Top Hat's fact is about another subject
    assert grounded.candidates(reply, ["William Dieterle"]) == [" 1944.", " I don't know."]
    assert grounded.candidates(reply, ["Nobody"]) == [" I don't know."]
    # only relations the question names: "when" names none of them, "released" names the year
    words = word_stems("when were the films William Dieterle directed released") - word_stems("William Dieterle")
    assert grounded.candidates(reply, ["William Dieterle"], words) == [" 1944.", " I don't know."]
    assert grounded.candidates(reply, ["William Dieterle"], word_stems("who starred")) == [" I don't know."]
