"""The index interface shared by the PostgreSQL and the in-memory trees.

An index answers one question: which tokens may follow this prefix, how many facts
lie behind each, and may a fact end here. Both implementations store the same rows
(``refactx_index.tree.format``) and walk them with :class:`RowTreeIndex`; they differ only
in how a missing row is fetched.

Walking a prefix: start at node 0 of the root row (key ``b""``); follow children
inside the fragment; on reaching an *external* node, continue at node 0 of the row
keyed by that node's full prefix.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from ..errors import FormatError, VocabularyMismatch
from ..vocab import VocabularyLike, as_vocabulary, encode_facts, file_sha256, resolve_tokenizer_file
from .cache import ByteLRUCache
from .format import Fragment, PresetDictionary, decode_fragment, encode_prefix
from .provenance import Provenance, fact_id, group_sources

log = logging.getLogger(__name__)


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
    vocabulary: str  # the vocabulary's name
    vocabulary_sha256: str  # the sha256 of its tokenizer.json ("": a tokenizer given as an object)
    vocab_size: int
    depth: int  # the deepest row's prefix length: a lookup from the root fetches no deeper
    subtree_threshold: int
    format_version: int
    fact_prefix: str = " "
    fact_suffix: str = ""
    facts: int | None = None
    rows: int | None = None
    build_id: int | None = None
    provenance_rows: int | None = None  # None: the build has no provenance (docs/provenance.md)
    # what the sequences are: "facts" (<s> <p> <o> ., written after "Fact:") or "paths"
    # (A -> r -> B ., written after "Path:"; docs/paths.md), the catalog's index_kind
    index_kind: str = "facts"
    # format versions 3 and 4: the build's preset dictionary (None: its rows use none); read once
    # when the build is opened, so every row of this build decodes with it and no other
    dictionary: "PresetDictionary | None" = field(default=None, repr=False)


@runtime_checkable
class TreeIndex(Protocol):
    """What every index offers; see :class:`NextTokens` for the answer's meaning."""

    @property
    def info(self) -> IndexInfo: ...

    def next_tokens(self, prefix: Sequence[int]) -> NextTokens: ...

    def next_tokens_batch(self, prefixes: Sequence[Sequence[int]], *,
                          build: "ServedBuild | None" = None) -> list[NextTokens]: ...

    def serving_build(self) -> "ServedBuild": ...

    def root(self, build: "ServedBuild | None" = None) -> "Cursor": ...

    def advance_batch(self, moves: Sequence[tuple["Cursor | None", int]], *,
                      build: "ServedBuild | None" = None) -> list["Cursor | None"]: ...

    def close(self) -> None: ...


def tokenizer_sha256(path: str | os.PathLike[str]) -> str:
    """The vocabulary fingerprint stored in the catalog: sha256 of ``tokenizer.json``.

    ``path`` is the file or the directory holding it.
    """

    return file_sha256(resolve_tokenizer_file(os.fspath(path)))


def decode_row(node: bytes | memoryview, version: int | None = None,
               dictionary: "PresetDictionary | None" = None) -> "Fragment":
    """Decode a stored row of a build in format ``version`` (a row of another version is a
    ``FormatError``) with the build's preset ``dictionary``, and freeze its arrays (they are
    shared through the cache)."""

    frag = decode_fragment(node, version, dictionary)
    for arr in (frag.tokens, frag.child_start, frag.child_count, frag.ends, frag.external,
                frag.leaves):
        arr.flags.writeable = False
    return frag


def fragment_nbytes(frag: "Fragment") -> int:
    return frag.nbytes


_TOKEN = struct.Struct(">I")

# A cursor reaching an external node with at most this many facts below it fetches every row
# below it (a few kB to ~100 kB): the rest of the fact's walk then needs no more round trips.
# Above it, only the row itself (the subtree may be huge). With a background fetcher, the
# step waits for its own row only and the rows below come on another connection.
# Off (0) by default: inline, the step that triggers it waits for the whole subtree, and on a
# database next to the walk (loopback) that made the cold walk's p99 step slower in almost
# every run at about the same mean (docs/runtime.md, "Why cursors do not prefetch by default"); every step
# then pays at most its own row's round trip. A far database (round trips much dearer than a
# decode) is where 2048 pays off: 17% fewer round trips on the realistic walks.
PREFETCH_LEAVES = 0
AHEAD_CACHE_BYTES = 16 << 20


def _ahead_cache(max_bytes: int) -> "ByteLRUCache[bytes, bytes]":
    return ByteLRUCache(max_bytes, len)


def key_successor(key: bytes) -> bytes | None:
    """The least key above every key that starts with ``key`` (None: there is none)."""
    b = bytearray(key)
    while b:
        if b[-1] < 0xFF:
            b[-1] += 1
            return bytes(b)
        b.pop()
    return None


@dataclass(frozen=True, slots=True)
class Cursor:
    """A node of the tree, reached by a prefix: the decoded row holding it and the node.

    Generation keeps one cursor per row and advances it by one token per step
    (:meth:`RowTreeIndex.advance_batch`), so a step costs one child search, not a
    walk from the root. A cursor never rests on an external node: reaching one moves
    it to node 0 of the row keyed by that node's prefix. ``key`` is the prefix's row
    key (``format.encode_prefix``); ``depth`` its length in tokens.
    """

    frag: "Fragment"
    node: int
    key: bytes
    build: "ServedBuild"  # the build this cursor walks: a generation stays on one build

    @property
    def depth(self) -> int:
        return len(self.key) // 4

    def next_tokens(self) -> NextTokens:
        """The children of this node with their leaf counts, and whether a fact ends here."""
        toks, leaves = self.frag.children(self.node)
        return NextTokens(toks, leaves, bool(self.frag.ends[self.node]))


@dataclass
class LookupStats:
    """Counters of one index: answers given, round trips to the row store, rows fetched
    and decoded. Benchmarks read them; they are plain integers, not synchronised."""

    lookups: int = 0
    round_trips: int = 0  # on a lookup's critical path
    rows_fetched: int = 0
    rows_decoded: int = 0
    ahead_round_trips: int = 0  # subtrees fetched in the background (no lookup waits for them)
    ahead_rows: int = 0


@dataclass(frozen=True, eq=False)
class ServedBuild:
    """One build as served: its catalog facts, the cache of its decoded rows, and how to
    fetch its rows. A lookup takes the index's current ``ServedBuild`` once and reads only
    through it, so rows of one build can never answer for another, even while the index
    switches builds under concurrent lookups (each build has its own cache)."""

    info: IndexInfo
    cache: "ByteLRUCache[bytes, Fragment]"
    fetch_rows: Callable[[list[bytes]], Mapping[bytes, bytes]]
    # every row whose prefix starts with one of the keys, in one round trip (None: not offered)
    fetch_below: Callable[[list[bytes]], Mapping[bytes, bytes]] | None = None
    # the provenance rows (fact_id, kind, subject, property, object, value) of fact ids (id ->
    # the fact's text, which a packed value is rebuilt from), in one round trip (None: the
    # build has no provenance)
    fetch_provenance: Callable[[Mapping[int, str]], Sequence[tuple]] | None = None
    # rows fetched ahead by fetch_below, kept as stored bytes until a walk reaches them
    ahead: "ByteLRUCache[bytes, bytes]" = field(default_factory=lambda: _ahead_cache(AHEAD_CACHE_BYTES))


class _Need:
    """A walk stopped because the row keyed by ``prefix[:length]`` is not at hand."""

    __slots__ = ("length",)

    def __init__(self, length: int) -> None:
        self.length = length


class RowTreeIndex:
    """Walks stored rows of the build it serves (a :class:`ServedBuild`, which says how to fetch them).

    Rows are decoded once and kept in a byte-bounded LRU cache. Two ways in:

    * :meth:`next_tokens_batch` walks each prefix from the root. A lookup that misses
      a row fetches, in one call, every row its prefix may still need (the keys
      ``prefix[:i]`` from the missing one down to the deepest row); keys with no row do
      not come back, and only the rows the walk reaches are decoded.
    * :meth:`advance_batch` moves cursors by one token each: only the rows of the
      external nodes just reached are needed, all fetched in one call.
    """

    def __init__(self, build: ServedBuild, *, prefetch_leaves: int = PREFETCH_LEAVES,
                 prefetch_in_background: bool = False) -> None:
        self._build = build
        self.prefetch_leaves = prefetch_leaves
        self.stats = LookupStats()
        # subtrees below rows just crossed, fetched on another thread (see PREFETCH_LEAVES)
        self._ahead_worker: "ThreadPoolExecutor | None" = None
        self._ahead_pending: dict[tuple[int, bytes], Future] = {}  # (id(build), key) -> fetch
        self._ahead_lock = threading.Lock()
        if prefetch_in_background:
            self._ahead_worker = ThreadPoolExecutor(1, thread_name_prefix="refactx-ahead")

    # ------------------------------------------------------------------ interface
    @property
    def info(self) -> IndexInfo:
        return self._build.info

    @property
    def cache(self) -> "ByteLRUCache[bytes, Fragment]":
        return self._build.cache

    def _serving(self) -> ServedBuild:
        """The build a new lookup reads (subclasses may switch builds here)."""
        return self._build

    def serving_build(self) -> ServedBuild:
        """The build a request starting now reads. A request that must see one build from
        its first token to its last (a generation, the check of the facts it wrote) takes it
        once and passes it as ``build=`` to :meth:`root`, :meth:`advance_batch` and
        :meth:`next_tokens_batch`: activations after that do not reach it, and a drop of its
        build is a :class:`~refactx_index.errors.BuildRetired`, never an answer from another
        build."""
        return self._serving()

    def provenance(self, texts: Sequence[str], *,
                   build: ServedBuild | None = None) -> "list[Provenance] | None":
        """The provenance of stored fact texts (``<s> <p> <o> .``, as verbalize wrote them), in
        order, read in one round trip from ``build`` (default: the serving one); a text that
        is not stored has no sources. None when the build has no provenance (an index file,
        or a build loaded without it)."""

        build = build or self._serving()
        if build.fetch_provenance is None:
            return None
        ids = [fact_id(t) for t in texts]
        if not ids:
            return []
        self.stats.round_trips += 1
        return group_sources(ids, build.fetch_provenance(dict(zip(ids, texts))))

    def _fetch(self, build: ServedBuild, keys: list[bytes]) -> Mapping[bytes, bytes]:
        self.stats.round_trips += 1
        found = build.fetch_rows(keys)
        self.stats.rows_fetched += len(found)
        return found

    def _fetch_below(self, build: ServedBuild, keys: list[bytes]) -> Mapping[bytes, bytes]:
        """The rows of ``keys`` and every row below them; the ones not asked for wait in
        ``build.ahead``, undecoded, until a walk reaches them."""
        self.stats.round_trips += 1
        assert build.fetch_below is not None
        found = build.fetch_below(keys)
        self.stats.rows_fetched += len(found)
        wanted = set(keys)
        for key, node in found.items():
            if key not in wanted and key not in build.cache:
                build.ahead.put(key, node)
        return found

    def _cached(self, build: ServedBuild, key: bytes) -> "Fragment | None":
        """A decoded row from the cache, or a row fetched ahead (decoded now), or None."""
        frag = build.cache.get(key)
        if frag is None:
            node = build.ahead.get(key)
            if node is not None:
                frag = self._decode(build, key, node)
        return frag

    def _decode(self, build: ServedBuild, key: bytes, node: bytes) -> "Fragment":
        frag = decode_row(node, build.info.format_version, build.info.dictionary)
        self.stats.rows_decoded += 1
        build.cache.put(key, frag)
        return frag

    def close(self) -> None:
        """Stop the background fetcher, if any (the in-memory index has none)."""
        if self._ahead_worker is not None:
            self._ahead_worker.shutdown(wait=True, cancel_futures=True)

    def wait_prefetched(self, timeout_s: float | None = None) -> bool:
        """Block until the subtrees being fetched in the background have arrived (a test's
        or a benchmark's synchronisation point; lookups never wait for them). False on timeout."""
        with self._ahead_lock:
            pending = list(self._ahead_pending.values())
        _, not_done = wait(pending, timeout=timeout_s)
        return not not_done

    def _prefetch_below(self, build: ServedBuild, keys: list[bytes]) -> None:
        """Fetch the rows below ``keys`` on the background thread, unless a fetch already on
        its way covers them (it was asked for one of their prefixes)."""
        assert self._ahead_worker is not None
        with self._ahead_lock:
            covered = [k for (b, k) in self._ahead_pending if b == id(build)]
            keys = [k for k in keys if not any(k.startswith(c) for c in covered)]
            if not keys:
                return
            future = self._ahead_worker.submit(self._fetch_ahead, build, keys)
            for k in keys:
                self._ahead_pending[(id(build), k)] = future

    def _fetch_ahead(self, build: ServedBuild, keys: list[bytes]) -> None:
        try:
            assert build.fetch_below is not None
            found = build.fetch_below(keys)
            self.stats.ahead_round_trips += 1
            self.stats.ahead_rows += len(found)
            for key, node in found.items():
                if key not in build.cache:
                    build.ahead.put(key, node)
        except Exception as exc:  # noqa: BLE001 - a lookup that needs a row fetches it itself
            log.debug("index %r: fetching ahead below %d rows failed: %s", build.info.name, len(keys), exc)
        finally:
            with self._ahead_lock:
                for k in keys:
                    self._ahead_pending.pop((id(build), k), None)

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next_tokens(self, prefix: Sequence[int]) -> NextTokens:
        """Allowed next tokens, their leaf counts, and whether ``prefix`` is a fact."""
        return self.next_tokens_batch([prefix])[0]

    def next_tokens_batch(self, prefixes: Sequence[Sequence[int]], *,
                          build: ServedBuild | None = None) -> list[NextTokens]:
        """:meth:`next_tokens` for many prefixes, fetching missing rows in one round trip
        (on ``build``, default the serving one: see :meth:`serving_build`)."""
        prefs = [_as_tuple(p) for p in prefixes]
        self.stats.lookups += len(prefs)
        return self._next_tokens_on(build or self._serving(), prefs)

    def _next_tokens_on(self, build: ServedBuild, prefs: list[tuple[int, ...]]) -> list[NextTokens]:
        # rows of this call, even if the cache drops them; raw bytes until a walk needs one
        fetched: dict[bytes, "Fragment | bytes"] = {}
        results: list[NextTokens | None] = [None] * len(prefs)
        pending = list(range(len(prefs)))
        requested: set[bytes] = set()  # keys asked for in earlier rounds
        while pending:
            wanted: set[bytes] = set()
            still: list[int] = []
            for i in pending:
                located = self._locate(build, prefs[i], fetched)
                if isinstance(located, _Need):
                    key = encode_prefix(prefs[i][: located.length])
                    if key in requested:
                        raise FormatError(
                            f"index {build.info.name!r}: no row for prefix key {key.hex()} "
                            "although its parent marks it external"
                        )
                    wanted.update(self._speculative_keys(build, prefs[i], located.length))
                    still.append(i)
                else:
                    results[i] = located
            if still:
                requested |= wanted
                fetched.update(self._fetch(build, sorted(wanted)))
            pending = still
        return results  # type: ignore[return-value]

    # ------------------------------------------------------------------ cursors
    def root(self, build: ServedBuild | None = None) -> Cursor:
        """A cursor at the root (the empty prefix) of ``build`` (default: the serving one)."""
        return self.advance_batch([(None, 0)], build=build)[0]  # type: ignore[return-value]

    def advance(self, cursor: Cursor, token: int) -> Cursor | None:
        """The cursor one ``token`` further, or ``None`` when ``token`` is not a child."""
        return self.advance_batch([(cursor, token)])[0]

    def advance_batch(self, moves: Sequence[tuple[Cursor | None, int]], *,
                      build: ServedBuild | None = None) -> list[Cursor | None]:
        """Advance each ``(cursor, token)``; ``(None, _)`` asks for the root of ``build``
        (default: the serving one). A cursor stays on the build it was made on.

        Rows not in the cache (the external nodes just reached) are fetched in one
        round trip for the whole batch; a cursor that stays inside its row costs one
        child search and no fetch.
        """
        out: list[Cursor | None] = [None] * len(moves)
        # rows to fetch, per build: cursors stay on the build they started on
        need: dict[ServedBuild, dict[bytes, list[int]]] = {}
        small: set[bytes] = set()  # keys whose whole subtree comes in the same round trip
        self.stats.lookups += len(moves)
        roots = build
        for i, (cur, tok) in enumerate(moves):
            if cur is None:
                build = roots = roots or self._serving()
                key = b""
            else:
                build = cur.build
                child = cur.frag.child(cur.node, tok)
                if child < 0:
                    continue
                key = cur.key + _TOKEN.pack(tok)
                if not cur.frag.external[child]:
                    out[i] = Cursor(cur.frag, child, key, build)
                    continue
            frag = self._cached(build, key)
            if frag is not None:
                out[i] = Cursor(frag, 0, key, build)
                continue
            # a small subtree (its facts known from the parent's external node) comes whole
            if (cur is not None and build.fetch_below is not None
                    and int(cur.frag.leaves[child]) <= self.prefetch_leaves):
                small.add(key)
            need.setdefault(build, {}).setdefault(key, []).append(i)
        for build, wanted in need.items():
            found: dict[bytes, bytes] = {}
            whole = sorted(k for k in wanted if k in small)
            single = sorted(k for k in wanted if k not in small)
            if whole and self._ahead_worker is not None:
                # the step waits for its own rows only; the subtrees below them follow
                self._prefetch_below(build, whole)
                whole, single = [], sorted(wanted)
            if whole:
                found.update(self._fetch_below(build, whole))
            if single:
                found.update(self._fetch(build, single))
            for key, slots in wanted.items():
                node = found.get(key)
                if node is None:
                    raise FormatError(
                        f"index {build.info.name!r}: no row for prefix key {key.hex() or '(root)'}"
                        + (" although its parent marks it external" if key else "")
                    )
                frag = self._decode(build, key, node)
                for i in slots:
                    out[i] = Cursor(frag, 0, key, build)
        return out

    # ------------------------------------------------------------------ walking
    def _speculative_keys(self, build: ServedBuild, prefix: tuple[int, ...], start: int) -> list[bytes]:
        stop = min(len(prefix), max(build.info.depth, start))
        return [encode_prefix(prefix[:j]) for j in range(start, stop + 1)]

    def _row(self, build: ServedBuild, key: bytes, fetched: dict[bytes, "Fragment | bytes"]) -> "Fragment | None":
        frag = fetched.get(key)
        if frag is None:
            return self._cached(build, key)
        if isinstance(frag, bytes):  # fetched by this call, decoded when first reached
            frag = fetched[key] = self._decode(build, key, frag)
        return frag

    def _locate(self, build: ServedBuild, prefix: tuple[int, ...], fetched: dict[bytes, "Fragment | bytes"]):
        frag = self._row(build, b"", fetched)
        if frag is None:
            return _Need(0)
        node = 0
        external = frag.external
        for i, tok in enumerate(prefix):
            if external[node]:
                frag = self._row(build, encode_prefix(prefix[:i]), fetched)
                if frag is None:
                    return _Need(i)
                external = frag.external
                node = 0
            node = frag.child(node, tok)
            if node < 0:
                return _empty_answer()
        if node and external[node]:
            frag = self._row(build, encode_prefix(prefix), fetched)
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
    empty = np.zeros(0, dtype=np.int64)
    empty.flags.writeable = False
    return NextTokens(empty, empty, False)


def vocabulary_size(tokenizer: "VocabularyLike") -> int:
    """Vocabulary size (added tokens included) of anything :func:`~refactx_index.vocab.as_vocabulary` takes."""

    return as_vocabulary(tokenizer).vocab_size


def sample_facts(index: "TreeIndex", count: int = 4) -> list[tuple[int, ...]]:
    """Up to ``count`` stored facts: from the root's most populous children, each followed
    down its most populous branch to the first fact end."""
    root = index.root()
    start = root.next_tokens()
    order = start.leaves.argsort()[::-1][:count]
    facts = []
    for tok in start.tokens[order].tolist():
        cursor, path = index.advance(root, tok), [tok]
        while cursor is not None:
            step = cursor.next_tokens()
            if step.ends or step.tokens.size == 0:
                facts.append(tuple(path))
                break
            nxt = int(step.tokens[int(step.leaves.argmax())])
            cursor, path = index.advance(cursor, nxt), path + [nxt]
    return facts


def check_vocabulary(index: "TreeIndex", vocabulary: "VocabularyLike | None") -> None:
    """Raise :class:`VocabularyMismatch` unless ``vocabulary`` writes the index's token ids:
    the one check of an index against a vocabulary, whatever opens it (a file, PostgreSQL,
    ``ask``, ``eval``, the server and its engines).

    ``vocabulary``: ``None`` (no check); a string that is no existing path, compared with the
    vocabulary name or sha256 the index records; else anything
    :func:`~refactx_index.vocab.as_vocabulary` takes. The same ``tokenizer.json`` (by sha256)
    passes at once and a vocabulary of another size fails. Otherwise (another file, or a
    tokenizer object, whose fingerprint is not its file's) a few stored facts, decoded and
    encoded again as the tokenize stage does, must give back their own ids.
    """

    if vocabulary is None:
        return
    info = index.info
    built = f"index {info.name!r} was built for vocabulary {info.vocabulary!r}"
    if isinstance(vocabulary, str) and not os.path.exists(vocabulary):
        if vocabulary not in (info.vocabulary, info.vocabulary_sha256):
            raise VocabularyMismatch(f"{built} (sha256 {info.vocabulary_sha256[:12]}), not {vocabulary!r}")
        return
    vocab = as_vocabulary(vocabulary)
    if info.vocabulary_sha256 and vocab.sha256 == info.vocabulary_sha256:
        return
    if info.vocab_size and vocab.vocab_size != info.vocab_size:
        raise VocabularyMismatch(f"{built} of {info.vocab_size} tokens; the vocabulary given has "
                                 f"{vocab.vocab_size}: build the index with the model's tokenizer.json")
    facts = sample_facts(index)
    texts = [vocab.continuation(f) for f in facts]
    prefix, suffix = info.fact_prefix, info.fact_suffix
    bodies = [t[len(prefix):len(t) - len(suffix) if suffix else None] for t in texts]
    encoded = encode_facts(vocab.tokenizer(), bodies, (), prefix, suffix)
    for i, fact in enumerate(facts):
        if tuple(encoded.ids(i)) != fact:
            raise VocabularyMismatch(f"{built} and stores ids the vocabulary given does not write: "
                                     f"stored fact {texts[i]!r} encodes differently")
