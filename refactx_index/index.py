"""The index interface shared by the PostgreSQL and the in-memory trees.

An index answers one question: which tokens may follow this prefix, how many facts
lie behind each, and may a fact end here. Both implementations store the same rows
(``refactx_index.format``) and walk them with :class:`RowTreeIndex`; they differ only
in how a missing row is fetched.

Walking a prefix: start at node 0 of the root row (key ``b""``); follow children
inside the fragment; on reaching an *external* node, continue at node 0 of the row
keyed by that node's full prefix.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping, Protocol, Sequence, runtime_checkable

from .errors import FormatError

if TYPE_CHECKING:  # numpy is imported by the implementations, not at package import
    import numpy as np

    from .cache import ByteLRUCache
    from .format import Fragment


@dataclass(frozen=True)
class NextTokens:
    """The answer for one prefix.

    ``tokens`` (int64, sorted ascending) may follow the prefix; ``leaves[i]`` facts
    start with ``prefix + [tokens[i]]``; ``ends`` is true when the prefix itself is a
    fact. A prefix outside the tree gives empty arrays and ``ends=False``. The arrays
    are read-only views into cached rows: copy before modifying.
    """

    tokens: "np.ndarray"
    leaves: "np.ndarray"
    ends: bool

    @property
    def empty(self) -> bool:
        """True when the prefix leads nowhere (no child and not a fact)."""
        return self.tokens.size == 0 and not self.ends

    @property
    def total_leaves(self) -> int:
        """Facts starting with the prefix (``sum(leaves) + ends``)."""
        return int(self.leaves.sum()) + int(self.ends)


@dataclass(frozen=True)
class IndexInfo:
    """What an index was built from (the catalog row of its build)."""

    name: str
    tokenizer: str
    tokenizer_hash: str
    vocab_size: int
    depth: int
    subtree_threshold: int
    format_version: int
    fact_prefix: str = " "
    fact_suffix: str = ""
    facts: int | None = None
    rows: int | None = None
    build_id: int | None = None


@runtime_checkable
class TreeIndex(Protocol):
    """What every index offers; see :class:`NextTokens` for the answer's meaning."""

    @property
    def info(self) -> IndexInfo: ...

    def next_tokens(self, prefix: Sequence[int]) -> NextTokens: ...

    def next_tokens_batch(self, prefixes: Sequence[Sequence[int]]) -> list[NextTokens]: ...

    def close(self) -> None: ...


def tokenizer_sha256(path: str | os.PathLike[str]) -> str:
    """The vocabulary fingerprint stored in the catalog: sha256 of ``tokenizer.json``.

    ``path`` is the file or the directory holding it.
    """
    from .vocab import file_sha256, resolve_tokenizer_file

    return file_sha256(resolve_tokenizer_file(os.fspath(path)))


def prefix_key(tokens: Sequence[int]) -> bytes:
    """Row key of a prefix (big-endian uint32 per token), without going through numpy."""
    try:
        return struct.pack(f">{len(tokens)}I", *tokens)
    except struct.error as exc:
        raise ValueError(f"token ids must lie in [0, 2**32): {exc}") from exc


def decode_row(node: bytes | memoryview) -> "Fragment":
    """Decode a stored row and freeze its arrays (they are shared through the cache)."""
    from .format import decode_fragment

    frag = decode_fragment(node)
    for arr in (frag.tokens, frag.child_start, frag.child_count, frag.ends, frag.external,
                frag.leaves):
        arr.flags.writeable = False
    return frag


def fragment_nbytes(frag: "Fragment") -> int:
    return frag.nbytes


class _Need:
    """A walk stopped because the row keyed by ``prefix[:length]`` is not at hand."""

    __slots__ = ("length",)

    def __init__(self, length: int) -> None:
        self.length = length




class RowTreeIndex:
    """Walks stored rows; subclasses provide :meth:`_fetch_rows`.

    Rows are decoded once and kept in a byte-bounded LRU cache. A lookup that
    misses a row fetches, in one call, every row its prefix may still need
    (the keys ``prefix[:i]`` for ``i`` from the missing one up to the depth ``D``);
    keys with no row simply do not come back.
    """

    def __init__(self, info: IndexInfo, cache: "ByteLRUCache[bytes, Fragment]") -> None:
        self._info = info
        self._cache = cache

    # ------------------------------------------------------------------ interface
    @property
    def info(self) -> IndexInfo:
        return self._info

    @property
    def cache(self) -> "ByteLRUCache[bytes, Fragment]":
        return self._cache

    def _fetch_rows(self, keys: list[bytes]) -> Mapping[bytes, bytes]:
        """Stored ``node`` bytes of those ``keys`` that have a row (one round trip)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release resources (the in-memory index has none)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next_tokens(self, prefix: Sequence[int]) -> NextTokens:
        """Allowed next tokens, their leaf counts, and whether ``prefix`` is a fact."""
        return self.next_tokens_batch([prefix])[0]

    def next_tokens_batch(self, prefixes: Sequence[Sequence[int]]) -> list[NextTokens]:
        """:meth:`next_tokens` for many prefixes, fetching missing rows in one round trip."""
        prefs = [_as_tuple(p) for p in prefixes]
        fetched: dict[bytes, Fragment] = {}  # rows of this call, even if the cache drops them
        results: list[NextTokens | None] = [None] * len(prefs)
        pending = list(range(len(prefs)))
        requested: set[bytes] = set()  # keys asked for in earlier rounds
        while pending:
            wanted: set[bytes] = set()
            still: list[int] = []
            for i in pending:
                located = self._locate(prefs[i], fetched)
                if isinstance(located, _Need):
                    key = prefix_key(prefs[i][: located.length])
                    if key in requested:
                        raise FormatError(
                            f"index {self._info.name!r}: no row for prefix key {key.hex()} "
                            "although its parent marks it external"
                        )
                    wanted.update(self._speculative_keys(prefs[i], located.length))
                    still.append(i)
                else:
                    results[i] = located
            if still:
                requested |= wanted
                for key, node in self._fetch_rows(sorted(wanted)).items():
                    frag = decode_row(node)
                    fetched[key] = frag
                    self._cache.put(key, frag)
            pending = still
        return results  # type: ignore[return-value]

    # ------------------------------------------------------------------ walking
    def _speculative_keys(self, prefix: tuple[int, ...], start: int) -> list[bytes]:
        stop = min(len(prefix), max(self._info.depth, start))
        return [prefix_key(prefix[:j]) for j in range(start, stop + 1)]

    def _row(self, key: bytes, fetched: dict[bytes, "Fragment"]) -> "Fragment | None":
        frag = fetched.get(key)
        if frag is None:
            frag = self._cache.get(key)
        return frag

    def _locate(self, prefix: tuple[int, ...], fetched: dict[bytes, "Fragment"]):
        frag = self._row(b"", fetched)
        if frag is None:
            return _Need(0)
        node = 0
        external = frag.external
        for i, tok in enumerate(prefix):
            if external[node]:
                frag = self._row(prefix_key(prefix[:i]), fetched)
                if frag is None:
                    return _Need(i)
                external = frag.external
                node = 0
            node = frag.child(node, tok)
            if node < 0:
                return _empty_answer()
        if node and external[node]:
            frag = self._row(prefix_key(prefix), fetched)
            if frag is None:
                return _Need(len(prefix))
            node = 0
        toks, leaves = frag.children(node)
        return NextTokens(toks, leaves, bool(frag.ends[node]))


def _as_tuple(prefix: Sequence[int] | Iterable[int]) -> tuple[int, ...]:
    if isinstance(prefix, tuple):
        return prefix
    tolist = getattr(prefix, "tolist", None)
    return tuple(tolist()) if tolist is not None else tuple(int(t) for t in prefix)


def _empty_answer() -> NextTokens:
    import numpy as np

    empty = np.zeros(0, dtype=np.int64)
    empty.flags.writeable = False
    return NextTokens(empty, empty, False)


def vocabulary_size(tokenizer: object) -> int:
    """Vocabulary size of a ``tokenizers.Tokenizer`` (added tokens included) or a
    transformers tokenizer (``len``)."""
    get = getattr(tokenizer, "get_vocab_size", None)
    if get is not None:
        return int(get(with_added_tokens=True))
    return len(tokenizer)  # type: ignore[arg-type]


def check_vocabulary(info: IndexInfo, tokenizer: object | None) -> None:
    """Raise :class:`VocabularyMismatch` unless ``tokenizer`` is the one the index was built for.

    ``tokenizer`` may be ``None`` (no check), a path to ``tokenizer.json`` or its
    directory (compared by sha256), a string (the vocabulary name or its sha256),
    or a tokenizer object (compared by vocabulary size, the best it offers).
    """
    from .errors import VocabularyMismatch

    if tokenizer is None:
        return
    if isinstance(tokenizer, (str, os.PathLike)) and os.path.exists(tokenizer):
        digest = tokenizer_sha256(tokenizer)
        if digest != info.tokenizer_hash:
            raise VocabularyMismatch(
                f"index {info.name!r} was built for vocabulary {info.tokenizer!r} "
                f"(sha256 {info.tokenizer_hash[:12]}), not for {os.fspath(tokenizer)!r} "
                f"(sha256 {digest[:12]})"
            )
        return
    if isinstance(tokenizer, str):
        if tokenizer not in (info.tokenizer, info.tokenizer_hash):
            raise VocabularyMismatch(
                f"index {info.name!r} was built for vocabulary {info.tokenizer!r} "
                f"(sha256 {info.tokenizer_hash[:12]}), not {tokenizer!r}"
            )
        return
    size = vocabulary_size(tokenizer)
    if size != info.vocab_size:
        raise VocabularyMismatch(
            f"index {info.name!r} was built for vocabulary {info.tokenizer!r} of "
            f"{info.vocab_size} tokens; the tokenizer given has {size}"
        )
