"""The answer policies (refactx_index.qa.policies) without an engine: what each rule allows at
each step of random walks over a real index (the shared sample's facts in SmolLM2's
vocabulary), and the registry and its parser.

A walk is what an engine does with the masks, as sets: at each step the fact matcher's
allowed ids (none: any id), then each rule's :class:`Allowed` in the list's order (PREFER
narrows where it leaves something, ONLY narrows or replaces, END replaces); the walk writes
one id of what is left, drawn by hypothesis, and where nothing constrains it, a piece of text
a model might write (a new fact, an answer line, a new question, the end)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from refactx_index.constraint.matcher import FACT, FREE, FactMatcher
from refactx_index.engines.core import trigger_variants
from refactx_index.errors import InputRefused
from refactx_index.prompting.prompt import UNKNOWN, plain_reply_finished, word_stems
from refactx_index.qa.ask import question_entities
from refactx_index.qa.policies import (BEST_POLICIES, END, ONLY, POLICIES, PREFER, AnswerContext, EntitiesFirst,
                                       GroundedAnswer, NamedRelationsOnly, PlainEnd, PrefillFact, RelationsFirst,
                                       parse_policies, policy_list, policy_names, policy_rules, prefill_of,
                                       token_pieces, written_facts)
from refactx_index.tree.memory import MemoryTreeIndex

TRIGGER = "Fact:"
WALK = settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    from refactx_index.qa.models import model_directory

    return AutoTokenizer.from_pretrained(model_directory("smollm2"))


@pytest.fixture(scope="module")
def facts(sample_fact_texts):
    return sample_fact_texts


@pytest.fixture(scope="module")
def index(tok, facts):
    from refactx_index.qa.models import model_directory

    return MemoryTreeIndex.from_facts(facts, str(model_directory("smollm2") / "tokenizer.json"))


@pytest.fixture(scope="module")
def world(tok, index):
    """What every walk shares: the matcher, the end ids, the free-text pieces."""
    eos = [tok.eos_token_id]
    matcher = FactMatcher(index, trigger_variants(tok, TRIGGER), eos)
    texts = ["\nFact:", "\nAnswer:", " so", "\nQuestion:", "\nAnswer: yes.\n", "\n"]
    chunks = [tuple(tok(t, add_special_tokens=False)["input_ids"]) for t in texts] + [tuple(eos)]
    token_pieces(tok)  # once, before the first timed example
    return matcher, eos, chunks


def _question(fact: str) -> tuple[str, str, str]:
    subject, relation, _ = fact[1:-3].split("> <", 2)
    return f"What is the {relation} of {subject}?", subject, relation


def _compose(pool: set[int] | None, allowed) -> set[int] | None:
    """What an engine leaves after one rule, as a set (None: every id)."""
    if allowed is None or not allowed.ids:
        return pool
    ids = set(allowed.ids)
    if allowed.how == END or pool is None:
        return ids
    kept = pool & ids
    return kept or (pool if allowed.how == PREFER else ids)


class Walk:
    """One walk: the reply text, the states, and at each step what each rule allowed."""

    def __init__(self, tok, world, context: AnswerContext, data, max_steps: int = 120):
        matcher, eos, chunks = world
        self.tok, self.matcher, self.eos = tok, matcher, set(eos)
        self.rules = policy_rules(context)
        self.prefill = context.prefill
        prompt = tok(f"Question: {context.questions[0]}\nReply:\n{self.prefill}", add_special_tokens=False)["input_ids"]
        self.start = matcher.start_batch([prompt])[0]
        self.steps: list[tuple[str, object, list, set[int] | None]] = []  # reply, state, each rule's Allowed, pool
        self.generated: list[int] = []
        self.ended = False
        state, pending, ids = self.start, [], list(prompt)
        for _ in range(max_steps):
            reply = self.reply()
            allowed = matcher.allowed(state)
            pool = None if allowed is None else {int(t) for t in allowed}
            answers = [rule.allowed(0, reply) for rule in self.rules]
            for a in answers:
                pool = _compose(pool, a)
            self.steps.append((reply, state, answers, pool))
            if pool is None:  # nothing constrains the row: a piece of text a model might write
                if not pending:
                    pending = list(data.draw(st.sampled_from(chunks)))
                token = pending.pop(0)
            elif pending and pending[0] in pool:
                token = pending.pop(0)
            else:
                pending = []
                token = data.draw(st.sampled_from(sorted(pool)))
            if token in self.eos:
                self.ended = True
                break
            self.generated.append(token)
            ids.append(token)
            state = matcher.step_batch([state], [token], [ids[-matcher.tail_length:]])[0]

    def reply(self) -> str:
        return self.prefill + self.tok.decode(self.generated, skip_special_tokens=True)

    def facts(self) -> list[tuple[str, ...]]:
        return written_facts(self.reply(), TRIGGER)


def _context(tok, index, question: str, policies, entities=None) -> AnswerContext:
    policies = policy_list(policies)
    if entities is None:
        entities = question_entities(index, tok, question) if any(p.needs_entities for p in policies) else []
    return AnswerContext(tokenizer=tok, index=index, vocabulary=tok, questions=[question], trigger=TRIGGER,
                         eos=[tok.eos_token_id], entities=[entities], policies=policies,
                         prefill=prefill_of(policies, TRIGGER))


def _stored_ids(tok, index, text: str) -> tuple[int, ...]:
    from refactx_index.vocab import as_vocabulary, encode_facts

    return tuple(encode_facts(as_vocabulary(tok).tokenizer(), [text], (), index.info.fact_prefix, "").ids(0))


# ---------------------------------------------------------------- each policy


def test_prefill_fact_opens_every_reply_inside_a_fact(tok, index, facts, world):
    """The prompt ends with the trigger: the row starts inside a fact, at the tree's root,
    so its first fact is written before anything else; without it the row starts free."""

    @given(data=st.data(), i=st.integers(0, len(facts) - 1))
    @WALK
    def check(data, i):
        question, _, _ = _question(facts[i])
        walk = Walk(tok, world, _context(tok, index, question, [PrefillFact()]), data, max_steps=60)
        assert walk.start.mode == FACT and walk.start.prefix == ()
        assert walk.steps[0][3] == {int(t) for t in index.next_tokens_batch([()])[0].tokens}
        plain = Walk(tok, world, _context(tok, index, question, []), data, max_steps=1)
        assert plain.start.mode == FREE and plain.steps[0][3] is None
        written = walk.facts()
        if written:  # the first line of the reply is a stored fact
            assert walk.reply().startswith(TRIGGER + " " + written[0][-1]) and written[0][-1] in set(facts)

    check()


def test_entities_first_writes_a_question_entity_as_the_first_subject(tok, index, facts, world):
    """While a subject is written, each id it allows extends the subject written so far
    toward the stored ids of a question entity or of an object written before; so the first
    fact's subject is one of the question's entities."""

    @given(data=st.data(), i=st.integers(0, len(facts) - 1))
    @WALK
    def check(data, i):
        question, subject, _ = _question(facts[i])
        entities = question_entities(index, tok, question)
        assume(subject in entities)
        walk = Walk(tok, world, _context(tok, index, question, [PrefillFact(), EntitiesFirst()], entities), data,
                    max_steps=80)
        for reply, state, (allowed,), _ in walk.steps:
            if allowed is None or not allowed.ids:
                continue
            assert allowed.how == PREFER and state.mode == FACT
            names = entities + [f[-2] for f in written_facts(reply[:reply.rfind(TRIGGER)], TRIGGER)]
            paths = [_stored_ids(tok, index, f"<{n}>") for n in names]
            for token in allowed.ids:
                grown = state.prefix + (token,)
                assert any(p[:len(grown)] == grown for p in paths), (reply, tok.decode([token]))
        written = walk.facts()
        assume(written)
        assert written[0][0] in entities, walk.reply()

    check()


def test_relations_first_writes_a_relation_the_question_names_then_answers(tok, index, facts, world):
    """At a fact's relation, each id it allows continues a relation of the subject that
    covers a word of the question; so the first fact's relation is one the question names,
    and once no named relation is left to write, the next line is the answer."""

    @given(data=st.data(), i=st.integers(0, len(facts) - 1))
    @WALK
    def check(data, i):
        question, subject, relation = _question(facts[i])
        entities = question_entities(index, tok, question)
        assume(entities == [subject])
        policies = [PrefillFact(), EntitiesFirst(), RelationsFirst()]
        context = _context(tok, index, question, policies, entities)
        words = policy_rules(context)[1].words[0]
        assume(word_stems(relation) & words)
        walk = Walk(tok, world, context, data, max_steps=80)
        rule = walk.rules[1]
        for reply, state, (_, allowed), _ in walk.steps:
            if allowed is None or not allowed.ids or state.mode != FACT:
                continue
            written = reply[reply.rfind(TRIGGER) + len(TRIGGER):]
            if written.count("> <") == 1 and ">" not in written.split("> <", 1)[1]:  # at the relation
                s, r = written.strip()[1:].split("> <", 1)
                named = [x for x in rule.relations_of(s) if word_stems(x) & words]
                for token in allowed.ids:
                    grown = r + tok.decode([token])
                    assert any(f"{x}>".startswith(grown) or grown.startswith(f"{x}>") for x in named), (reply, grown)
        written = walk.facts()
        assume(written)
        assert written[0][0] == subject and word_stems(written[0][1]) & words, walk.reply()
        first = walk.reply().split("\n")
        if len(first) > 1 and not rule.open_words(0, written[:1])[1] and len(written) == 1:
            assert ("Answer:".startswith(first[1]) or first[1].startswith("Answer:")), walk.reply()

    check()


def test_grounded_answers_only_a_name_of_a_stored_fact_written_or_i_dont_know(tok, index, facts, world):
    """On an ``Answer:`` line each id it allows continues `` NAME.`` for an object of a fact
    the reply wrote, or `` I don't know.``; a complete one allows only the end. So a walk
    that answers, answers one of them and ends there."""

    @given(data=st.data(), i=st.integers(0, len(facts) - 1))
    @WALK
    def check(data, i):
        question, _, _ = _question(facts[i])
        walk = Walk(tok, world, _context(tok, index, question, [PrefillFact(), GroundedAnswer()]), data)
        for reply, _, (allowed,), pool in walk.steps:
            if allowed is None:
                continue
            assert allowed.how in (ONLY, END) and pool == set(allowed.ids)
            at = reply.rfind("\nAnswer:")
            written = reply[at + len("\nAnswer:"):]
            names = [f" {f[-2]}." for f in written_facts(reply[:at], TRIGGER)] + [f" {UNKNOWN}"]
            for token in allowed.ids:
                if token in walk.eos:
                    assert any(written.startswith(n) for n in names) or allowed.how == END, reply
                else:
                    grown = written + tok.decode([token])
                    assert any(n.startswith(grown) or grown.startswith(n) for n in names), (reply, grown)
        reply = walk.reply()
        if "\nAnswer:" in reply and len(walk.steps) < 120:
            assert walk.ended
            answer = reply[reply.rfind("\nAnswer:") + len("\nAnswer:"):]
            objects = {f[-2] for f in walk.facts()}
            assert answer == f" {UNKNOWN}" or answer[1:-1] in objects, reply

    check()


def test_named_relations_only_answers_from_a_chained_fact_of_a_named_relation(tok, index, facts, world):
    """With the best policies and named relations only, an answer is an object of a fact
    chained from a question entity whose relation covers a word of the question, or "I
    don't know"."""

    @given(data=st.data(), i=st.integers(0, len(facts) - 1))
    @WALK
    def check(data, i):
        question, _, _ = _question(facts[i])
        policies = [*BEST_POLICIES, NamedRelationsOnly()]
        context = _context(tok, index, question, policies)
        walk = Walk(tok, world, context, data)
        reply = walk.reply()
        assume("\nAnswer:" in reply and walk.ended)
        answer = reply[reply.rfind("\nAnswer:") + len("\nAnswer:"):]
        words = walk.rules[1].words[0]
        reached, named = set(context.entities[0]), set()
        for f in walk.facts():
            if f[0] in reached:
                reached.add(f[-2])
                if word_stems(f[1]) & words:
                    named.add(f[-2])
        assert answer == f" {UNKNOWN}" or answer[1:-1] in named, (reply, context.entities, words)

    check()


def test_plain_end_ends_a_plain_reply_after_its_answer_line_or_at_a_new_question(tok, index, facts, world):
    """Once the reply holds a finished ``Answer:`` line or opens ``Question:``, only the end
    ids; before, nothing."""

    @given(data=st.data(), i=st.integers(0, len(facts) - 1))
    @WALK
    def check(data, i):
        question, _, _ = _question(facts[i])
        walk = Walk(tok, world, _context(tok, index, question, [PlainEnd()]), data, max_steps=60)
        for reply, _, (allowed,), pool in walk.steps:
            if plain_reply_finished(reply):
                assert allowed is not None and allowed.how == ONLY and pool == walk.eos, reply
            else:
                assert allowed is None
        if plain_reply_finished(walk.reply()):
            assert walk.ended

    check()


# ---------------------------------------------------------------- the registry


def test_the_registry_parses_names_in_one_order_and_refuses_others_naming_the_valid_ones():
    assert parse_policies("best") == BEST_POLICIES
    assert parse_policies("grounded,prefill-fact") == (PrefillFact(), GroundedAnswer())
    assert parse_policies(["grounded", "grounded"]) == (GroundedAnswer(),)
    assert parse_policies("plain") == () == parse_policies("")
    assert parse_policies(policy_names(BEST_POLICIES)) == BEST_POLICIES
    assert policy_names(()) == "plain"
    with pytest.raises(InputRefused, match="'groundd'.*prefill-fact, entities-first, relations-first, grounded"):
        parse_policies("prefill-fact,groundd")
    with pytest.raises(InputRefused, match="relations-first"):
        parse_policies("named-relations-only,grounded")
    with pytest.raises(InputRefused, match="plain"):
        parse_policies("plain,grounded")
    assert prefill_of(BEST_POLICIES, TRIGGER) == TRIGGER and prefill_of((), TRIGGER) == ""


def test_the_command_names_the_registrys_policies():
    """cli.py writes the names out (importing the registry loads numpy): they are its."""
    from refactx_index.cli import BEST_POLICY_NAMES, POLICY_NAMES

    assert POLICY_NAMES == tuple(POLICIES)
    assert BEST_POLICY_NAMES == tuple(p.name for p in BEST_POLICIES)


def test_the_command_builds_the_list_from_its_flags():
    from refactx_index.cli import _policies, build_parser

    parser = build_parser()

    def policies(*argv: str):
        return _policies(parser.parse_args(["ask", "--index-file", "x.rfx", *argv, "Q?"]), "default")

    assert policies() == "default"
    assert policies("--plain") == ()
    assert policies("--grounded", "--prefill-fact") == (PrefillFact(), GroundedAnswer())
    assert policies("--policies", "best", "--named-relations-only") == (*BEST_POLICIES, NamedRelationsOnly())
    with pytest.raises(InputRefused, match="--plain"):
        policies("--plain", "--grounded")
    args = build_parser().parse_args(["eval", "q.jsonl", "--index-file", "x.rfx", "--entities-first"])
    assert _policies(args, ()) == (EntitiesFirst(),)


def test_the_policies_module_imports_no_torch():
    code = "import sys, refactx_index.qa.policies; print('torch' in sys.modules or 'transformers' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
