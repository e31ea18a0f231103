"""Exploring an index by text: completions of a text prefix, and the facts below it.

Text and tokens do not align one to one (a prefix's last token may merge with what
follows it in a full fact), so the walk starts at the longest token prefix of the
text that is in the tree and whose decoding is a prefix of the text, and keeps every
path whose decoding agrees with the text. ``text`` is fact text; the index's
``fact_prefix`` is prepended unless the text already starts with it.
"""

from __future__ import annotations

from typing import Iterator

from .index import TreeIndex
from .vocab import decode_continuation


def _encode(tokenizer: object, text: str) -> list[int]:
    enc = tokenizer.encode(text, add_special_tokens=False)  # type: ignore[attr-defined]
    return list(getattr(enc, "ids", enc))


def _decode(tokenizer: object, ids: tuple[int, ...]) -> str:
    # as the continuation of other text: SentencePiece decoders (Mistral, Phi-3) drop the
    # leading space of a whole sequence, and fact text starts with one
    return decode_continuation(getattr(tokenizer, "backend_tokenizer", tokenizer), ids)


def _full_text(index: TreeIndex, text: str) -> str:
    prefix = index.info.fact_prefix
    return text if text.startswith(prefix) else prefix + text


def _frontier(index: TreeIndex, tokenizer: object, full: str) -> Iterator[tuple[tuple[int, ...], str, int]]:
    """Minimal tree prefixes whose decoding starts with ``full``: (ids, decoded, leaves)."""
    ids = _encode(tokenizer, full)
    base: tuple[int, ...] = ()
    for cut in range(len(ids), -1, -1):
        cand = tuple(ids[:cut])
        if full.startswith(_decode(tokenizer, cand)) and not index.next_tokens(cand).empty:
            base = cand
            break
    stack = [(base, index.next_tokens(base).total_leaves)]
    while stack:
        p, leaves = stack.pop()
        decoded = _decode(tokenizer, p)
        if decoded.startswith(full):
            yield p, decoded, leaves
        elif full.startswith(decoded):
            answer = index.next_tokens(p)
            for tok, n in zip(answer.tokens.tolist()[::-1], answer.leaves.tolist()[::-1]):
                stack.append((p + (tok,), n))


def complete(index: TreeIndex, tokenizer: object, text: str, limit: int = 20) -> list[tuple[str, int]]:
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
    index: TreeIndex, tokenizer: object, text: str = "", limit: int | None = None
) -> Iterator[tuple[str, tuple[int, ...]]]:
    """Every fact whose text starts with ``text``: (fact text without ``fact_prefix``, token ids).

    Walks the tree depth first in token order; ``limit`` stops after that many facts.
    """
    full = _full_text(index, text)
    strip = len(index.info.fact_prefix)
    count = 0
    for start, _, _ in _frontier(index, tokenizer, full):
        stack = [start]
        while stack:
            p = stack.pop()
            answer = index.next_tokens(p)
            if answer.ends:
                yield _decode(tokenizer, p)[strip:], p
                count += 1
                if limit is not None and count >= limit:
                    return
            stack.extend(p + (t,) for t in answer.tokens.tolist()[::-1])
