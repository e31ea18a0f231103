"""Exploring an index by text: completions of a text prefix, and the facts below it.

Text and tokens do not align one to one (a prefix's last token may merge with what
follows it in a full fact), so the walk starts at the longest token prefix of the
text that is in the tree and whose decoding is a prefix of the text, and keeps every
path whose decoding agrees with the text. ``text`` is fact text; the index's
``fact_prefix`` is prepended unless the text already starts with it.

A walk given a :class:`Budget` checks it at every step and raises :class:`WalkTimeout`
there once it is spent: a server's thread is free when it answers that the walk took too
long (a walk is not interrupted from outside, so it must stop itself).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ..errors import InputRefused, RefactxError
from ..vocab import VocabularyLike, as_vocabulary
from .index import TreeIndex


# a node with more children than this has them filtered by their own text before any decoding
_FEW_CHILDREN = 32


class WalkTimeout(RefactxError):
    """A walk spent its :class:`Budget` and stopped where it was."""


@dataclass
class Budget:
    """The time a walk may take from now; :meth:`check` raises :class:`WalkTimeout` once it
    is spent (``clock``: time.monotonic, or a test's)."""

    seconds: float
    clock: Callable[[], float] = time.monotonic
    ends: float = field(init=False)

    def __post_init__(self) -> None:
        self.ends = self.clock() + self.seconds

    def check(self) -> None:
        if self.clock() >= self.ends:
            raise WalkTimeout(f"the walk took over {self.seconds:g} s")


def _check(budget: Budget | None) -> None:
    if budget is not None:
        budget.check()


def _encode(tokenizer: VocabularyLike, text: str) -> list[int]:
    return as_vocabulary(tokenizer).encode([text])[0]


def _decode(tokenizer: VocabularyLike, ids: tuple[int, ...]) -> str:
    # as the continuation of other text: SentencePiece decoders (Mistral, Phi-3) drop the
    # leading space of a whole sequence, and fact text starts with one
    return as_vocabulary(tokenizer).continuation(ids)


def _full_text(index: TreeIndex, text: str) -> str:
    prefix = index.info.fact_prefix
    return text if text.startswith(prefix) else prefix + text


def _frontier(index: TreeIndex, tokenizer: VocabularyLike, full: str,
              budget: Budget | None = None) -> Iterator[tuple[tuple[int, ...], str, int]]:
    """Minimal tree prefixes whose decoding starts with ``full``: (ids, decoded, leaves)."""
    ids = _encode(tokenizer, full)
    base: tuple[int, ...] = ()
    # the text's ids stay on the tree only so far: no longer prefix can be a start (and a
    # long text that matches nothing costs a few lookups, not a decoding of every prefix)
    on_tree = 0
    while on_tree < len(ids) and ids[on_tree] in set(index.next_tokens(ids[:on_tree]).tokens.tolist()):
        _check(budget)
        on_tree += 1
    # start at a word boundary of the text, not at its last tokens: they may merge with what
    # follows in a stored fact (" <Germ" is " <", "G", "erm", but "Germany" is one token)
    for cut in range(min(max(len(ids) - 1, 0), on_tree), -1, -1):
        _check(budget)
        cand = tuple(ids[:cut])
        decoded = _decode(tokenizer, cand)
        at_boundary = decoded.endswith("<") or full[len(decoded):len(decoded) + 1] in (" ", "")
        if full.startswith(decoded) and at_boundary and not index.next_tokens(cand).empty:
            base = cand
            break
    texts: tuple[str | None, ...] | None = None
    stack = [(base, index.next_tokens(base).total_leaves)]
    while stack:
        _check(budget)
        p, leaves = stack.pop()
        decoded = _decode(tokenizer, p)
        if decoded.startswith(full):
            yield p, decoded, leaves
        elif full.startswith(decoded):
            answer = index.next_tokens(p)
            children = list(zip(answer.tokens.tolist()[::-1], answer.leaves.tolist()[::-1]))
            if len(children) > _FEW_CHILDREN:
                # a child's text is this text and its own (decoders extend text token by
                # token), so only children whose own text agrees with the rest can agree; a
                # token that decodes to part of a character ("\ufffd") or not at all is kept
                texts = texts or as_vocabulary(tokenizer).continuation_texts
                rest = full[len(decoded):]
                children = [(tok, n) for tok, n in children
                            if tok >= len(texts) or (t := texts[tok]) is None or "\ufffd" in t
                            or t.startswith(rest) or rest.startswith(t)]
            for tok, n in children:
                stack.append((p + (tok,), n))


def complete(index: TreeIndex, tokenizer: VocabularyLike, text: str, limit: int = 20) -> list[tuple[str, int]]:
    """Continuations of ``text`` in the index with the number of facts behind each.

    Each continuation runs to the next point where the tree branches or a fact ends,
    so ``" <Northern Ireland> <"`` gives ``("country> <United Kingdom> .", 1)``-like
    entries. An empty continuation means ``text`` is itself a fact. Most facts first,
    at most ``limit``.
    """
    full = _full_text(index, text)
    found: list[tuple[str, int]] = []
    for p, decoded, leaves in _frontier(index, tokenizer, full):
        if decoded == full:
            answer = index.next_tokens(p)
            if answer.ends:
                found.append(("", 1))
            children = [(p + (t,), n) for t, n in zip(answer.tokens.tolist(), answer.leaves.tolist())]
        else:
            children = [(p, leaves)]
        for q, n in children:
            while True:  # follow the single path down to the next branch or fact end
                answer = index.next_tokens(q)
                if answer.ends or answer.tokens.size != 1:
                    break
                q += (int(answer.tokens[0]),)
            found.append((_decode(tokenizer, q)[len(full):], n))
    found.sort(key=lambda item: (-item[1], item[0]))
    return found[:limit]


def enumerate_facts(
    index: TreeIndex, tokenizer: VocabularyLike, text: str = "", limit: int | None = None,
    budget: Budget | None = None,
) -> Iterator[tuple[str, tuple[int, ...]]]:
    """Every fact whose text starts with ``text``: (fact text without ``fact_prefix``, token ids).

    Walks the tree depth first in token order; ``limit`` stops after that many facts,
    ``budget`` (:class:`Budget`) when its time is spent.
    """
    full = _full_text(index, text)
    strip = len(index.info.fact_prefix)
    count = 0
    for start, _, _ in _frontier(index, tokenizer, full, budget):
        stack = [start]
        while stack:
            _check(budget)
            p = stack.pop()
            answer = index.next_tokens(p)
            if answer.ends:
                yield _decode(tokenizer, p)[strip:], p
                count += 1
                if limit is not None and count >= limit:
                    return
            stack.extend(p + (t,) for t in answer.tokens.tolist()[::-1])


# ---------------------------------------------------------------------- graph exploration
# The operations a step-by-step graph explorer asks for (for an entity, its relations; for an
# entity and a relation, its objects), answered from the tree's leaf counts: the walk stops
# at the ``>`` that closes the label asked for, so a count never enumerates the facts below.

@dataclass(frozen=True)
class Label:
    """A label that continues the text asked about, and the number of facts behind it."""

    label: str
    facts: int


def labels_after(index: TreeIndex, tokenizer: VocabularyLike, text: str, limit: int | None = None,
                 budget: Budget | None = None) -> list[Label]:
    """The labels that continue ``text`` up to the ``>`` that closes them, with the facts
    below each, most facts first (then by label). ``text`` ends where a label starts
    (``"<"``, ``"<Danny Boyle> <"``, or inside a label: ``"<Danny"``, whose entities are
    then the labels that start with ``Danny``)."""
    full = _full_text(index, text)
    open_at = full.rfind("<")
    head = full[open_at + 1:] if open_at >= 0 else ""
    counts: dict[str, int] = {}
    stack = [(p, leaves) for p, _, leaves in _frontier(index, tokenizer, full, budget)]
    while stack:
        _check(budget)
        p, leaves = stack.pop()
        rest = _decode(tokenizer, p)[len(full):]
        close = rest.find(">")
        if close >= 0:  # every fact below shares the label through its ">"
            label = head + rest[:close]
            counts[label] = counts.get(label, 0) + leaves
            continue
        answer = index.next_tokens(p)
        stack.extend((p + (t,), n) for t, n in zip(answer.tokens.tolist(), answer.leaves.tolist()))
    found = sorted((Label(k, v) for k, v in counts.items()), key=lambda x: (-x.facts, x.label))
    return found if limit is None else found[:limit]


def entities(index: TreeIndex, tokenizer: VocabularyLike, label_start: str, limit: int | None = 20,
             budget: Budget | None = None) -> list[Label]:
    """Subjects whose label starts with ``label_start``, with their fact counts."""
    return labels_after(index, tokenizer, "<" + label_start, limit, budget)


def relations(index: TreeIndex, tokenizer: VocabularyLike, entity: str, limit: int | None = None,
              budget: Budget | None = None) -> list[Label]:
    """The relations (properties) of ``entity``, ranked by how many facts each leads to."""
    return labels_after(index, tokenizer, f"<{entity}> <", limit, budget)


def objects(index: TreeIndex, tokenizer: VocabularyLike, entity: str, relation: str,
            limit: int | None = None, budget: Budget | None = None) -> list[Label]:
    """The objects of (``entity``, ``relation``)."""
    return labels_after(index, tokenizer, f"<{entity}> <{relation}> <", limit, budget)


def facts_page(index: TreeIndex, tokenizer: VocabularyLike, text: str = "", *, offset: int = 0,
               limit: int = 50, budget: Budget | None = None) -> list[str]:
    """The facts under ``text`` in token order, ``limit`` of them after the first ``offset``."""
    if offset < 0 or limit < 0:
        raise InputRefused("offset and limit must not be negative")
    page = []
    for i, (fact, _) in enumerate(enumerate_facts(index, tokenizer, text, limit=offset + limit, budget=budget)):
        if i >= offset:
            page.append(fact)
    return page
