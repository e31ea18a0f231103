"""The "next week" of a dump: a second dump written from a first one with a given share of its
items edited, the way a weekly Wikidata dump differs from the last (issue 55: benches and tests
of incremental builds need realistic pairs).

The first dump is read as a stream, one item at a time (an item's lines are consecutive in the
dumps ``generate`` writes, as in Wikidata's: its ``Special:EntityData`` metadata, its terms, its
statements, then any hostile line naming it), and each item is copied as it is or edited:

* ``share`` of the items (drawn per item from ``seed`` and its id) get one edit or a few:
  a statement added (a value of one of its properties taken from another item), removed or
  changed (its value replaced by another item's value of the same property), its English
  label changed (a word replaced by a word of another item's label: every fact that names
  the item is re-labelled), its English description changed;
* of those, ``DELETED_SHARE`` are deleted (every line of the item dropped; statements of other
  items that name it stay, as in Wikidata: they lose their object's label);
* ``CREATED_SHARE`` x ``share`` new items are written after the last one, each a copy of a
  recent item's English terms and statements under a new id and a new label.

Only well-formed lines are edited or used as values (never a hostile line, an unknown value,
a property entity or a core item of ``shape.CORE_ITEMS``); every other line is copied byte for
byte. Values come from per-property rings of the last values seen, so an edit never needs the
whole dump in memory: memory is one item's lines, the rings and one chunk of
lines (``chunk_lines``), compressed as one bz2 stream.

Written into ``out``: the truthy dump (same file name, one bz2 stream per ``chunk_lines``
lines), the enwiki SQL dumps copied (a week of Wikidata edits, Wikipedia's titles unchanged),
``edits.tsv.gz`` (one line per edit: ``edit, subject, property, value``; a changed statement is
a ``statement_removed`` and a ``statement_added`` line) and ``manifest.json`` (last: the file
names, the lines written, and ``nextweek``: the counts of what was changed). Deterministic: the
same first dump, ``share``, ``seed``, ``chunk_lines`` and compressor give the same bytes.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import logging
import os
import re
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from refactx_testing.dumpgen.generate import compress, resolve_compressor
from refactx_testing.dumpgen.shape import (
    CORE_ITEMS,
    DEFAULT_CHUNK_LINES,
    DESCRIPTION,
    DIRECT,
    ENTITY,
    ENTITY_DATA,
    MANIFEST_FILE,
    PAGE_FILE,
    PAGE_PROPS_FILE,
    PREF_LABEL,
    RDFS_LABEL,
    RDF_TYPE,
    SCHEMA_NAME,
    TRUTHY_FILE,
    WIKIBASE,
)

log = logging.getLogger(__name__)

EDITS_FILE = "edits.tsv.gz"
NEXTWEEK_VERSION = 1

# of the items edited, the share deleted; items created, as a share of those edited (Wikidata:
# some 4-6M edits a week over ~100M items, ~1-2M distinct items touched, ~10% as many created)
DELETED_SHARE = 0.03
CREATED_SHARE = 0.10
# an edited item's edits: how many (1 + a geometric draw), and of which kind
EDIT_KINDS = ("statement_added", "statement_changed", "statement_removed", "label_changed",
              "description_changed")
EDIT_WEIGHTS = np.array([0.40, 0.20, 0.12, 0.14, 0.14])
COUNTED_AS = {"statement_added": "statements_added", "statement_changed": "statements_changed",
              "statement_removed": "statements_removed", "label_changed": "labels_changed",
              "description_changed": "descriptions_changed"}
EXTRA_EDITS_P = 0.6  # success probability of the geometric draw of further edits (mean 1.67 edits)
RING = 64  # values kept per property, words kept for labels, items kept as templates of new ones
TEMPLATES = 32

_ENTITY_Q = (b"<" + ENTITY.encode() + b"Q")
_DATA_Q = (b"<" + ENTITY_DATA.encode() + b"Q")
_CORE = frozenset(c.qid for c in CORE_ITEMS)
# one literal as the dumps write it (the escapes N-Triples allows, nothing else), or an IRI
_LITERAL = rb'"(?:[^"\\\n]|\\[tbnrf"\'\\]|\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8})*"'
_OBJECT = rb"(?:" + _LITERAL + rb"(?:@[a-zA-Z]+(?:-[a-zA-Z0-9]+)*|\^\^<[^<>\"{}|^`\\ ]+>)?|<[^<>\"{}|^`\\ ]+>)"
_STATEMENT = re.compile(rb"^(<" + re.escape(ENTITY.encode()) + rb"Q\d+>) <" + re.escape(DIRECT.encode())
                        + rb"P(\d+)> (" + _OBJECT + rb") \.$")
_GENID = b"<http://www.wikidata.org/.well-known/genid/"
_TERM = {pred: re.compile(rb"^(<" + re.escape(ENTITY.encode()) + rb"Q\d+>) " + re.escape(pred.encode())
                          + rb' "((?:[^"\\\n]|\\[tbnrf"\'\\]|\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8})*)"@en \.$')
         for pred in (RDFS_LABEL, PREF_LABEL, SCHEMA_NAME, DESCRIPTION)}
_LABEL_PREDICATES = (RDFS_LABEL, PREF_LABEL, SCHEMA_NAME)
_ITEM_TYPE = (" " + RDF_TYPE + " <" + WIKIBASE + "Item> .").encode()


def _well_formed(line: bytes) -> bool:
    """A line a new item copies from its template: its type, its English terms, its
    statements with a known value (never a hostile line)."""
    if line.endswith(_ITEM_TYPE):
        return True
    m = _STATEMENT.match(line)
    if m is not None:
        return not m.group(3).startswith(_GENID)
    return any(pattern.match(line) for pattern in _TERM.values())


def item_id(line: bytes) -> int | None:
    """The Q number an item's line is about (its subject, or the subject of its metadata's
    ``Special:EntityData`` IRI); None for any other line."""
    for prefix in (_ENTITY_Q, _DATA_Q):
        if line.startswith(prefix):
            end = line.find(b">", len(prefix))
            digits = line[len(prefix):end]
            return int(digits) if end > 0 and digits.isdigit() else None
    return None


def item_groups(lines: Iterator[bytes]) -> Iterator[tuple[int | None, list[bytes]]]:
    """(item id, its lines) for each run of consecutive lines about one item; a line naming no
    item (the prelude's, a hostile line with a broken subject) stays with the run before it."""
    key: int | None = None
    group: list[bytes] = []
    for line in lines:
        qid = item_id(line)
        if qid is not None and qid != key and group:
            yield key, group
            group = []
        if qid is not None:
            key = qid
        group.append(line)
    if group:
        yield key, group


def _unit(seed: int, qid: int) -> float:
    """A uniform draw in [0, 1) of (seed, item): which items are edited does not depend on
    the order they are read in."""
    digest = hashlib.blake2b(f"{seed}:{qid}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


class _Ring:
    """The last ``size`` values added (a bounded sample of what the stream has shown)."""

    __slots__ = ("values", "seen", "size")

    def __init__(self, size: int = RING) -> None:
        self.values: list[Any] = []
        self.seen = 0
        self.size = size

    def add(self, value: Any) -> None:
        if len(self.values) < self.size:
            self.values.append(value)
        else:
            self.values[self.seen % self.size] = value
        self.seen += 1


class NextWeek:
    """The editor of one dump's items (``nextweek`` runs it); counts what it changed."""

    def __init__(self, share: float, seed: int, edits_out) -> None:
        self.share, self.seed = share, seed
        self.edits_out = edits_out
        self.values: dict[int, _Ring] = {}  # property -> recent object texts
        self.words = _Ring(4 * RING)  # recent words of English labels and descriptions
        self.templates = _Ring(TEMPLATES)  # recent items' lines, to copy into new items
        self.counts: Counter[str] = Counter()
        self.max_qid = 0

    # ------------------------------------------------------------ the stream

    def item(self, qid: int | None, lines: list[bytes]) -> list[bytes]:
        """One item's lines in the next week's dump (none: deleted)."""
        if qid is None or qid in _CORE:
            return lines
        self.max_qid = max(self.max_qid, qid)
        self.counts["items_seen"] += 1
        statements = [m for m in map(_STATEMENT.match, lines) if m is not None and not m.group(3).startswith(_GENID)]
        u = _unit(self.seed, qid)
        out = lines
        if u < self.share:
            rng = np.random.default_rng([self.seed, 55, qid])
            self.counts["items_edited"] += 1
            if rng.random() < DELETED_SHARE:
                self._log("item_deleted", qid)
                self.counts["items_deleted"] += 1
                out = []
            else:
                out = self._edit(qid, lines, statements, rng)
            if rng.random() < CREATED_SHARE:
                self.counts["_to_create"] += 1
        # the rings learn from the first week's lines, edited or not (an edit draws from the others)
        for m in statements:
            self.values.setdefault(int(m.group(2)), _Ring()).add(m.group(3))
        label = self._term(lines, PREF_LABEL)
        if label is not None:
            for word in label[1].split(b" "):
                if word:
                    self.words.add(word)
            if statements:
                self.templates.add(lines)
        return out

    def created(self) -> Iterator[list[bytes]]:
        """The new items' lines, ids after the largest seen (called after the last item)."""
        rng = np.random.default_rng([self.seed, 55, 0])
        for k in range(self.counts.pop("_to_create", 0)):
            if not self.templates.values:
                break
            template = self.templates.values[int(rng.integers(len(self.templates.values)))]
            qid = self.max_qid + 1 + k
            old = _ENTITY_Q + str(item_id(template[0]) or 0).encode() + b">"
            new = _ENTITY_Q + str(qid).encode() + b">"
            lines = [new + line[len(old):] for line in template if line.startswith(old) and _well_formed(line)]
            label = self._term(lines, PREF_LABEL)
            if label is None:
                continue
            lines = self._set_term(lines, _LABEL_PREDICATES, label[1], self._new_text(label[1], rng))
            for m in map(_STATEMENT.match, lines):
                if m is not None:
                    self._log("statement_added", qid, int(m.group(2)), m.group(3))
            self._log("item_created", qid)
            self.counts["items_created"] += 1
            yield lines

    # ------------------------------------------------------------ edits

    def _edit(self, qid: int, lines: list[bytes], statements: list[re.Match], rng: np.random.Generator) -> list[bytes]:
        kinds = rng.choice(len(EDIT_KINDS), size=int(rng.geometric(EXTRA_EDITS_P)), p=EDIT_WEIGHTS / EDIT_WEIGHTS.sum())
        for kind in (EDIT_KINDS[k] for k in kinds.tolist()):
            edited = getattr(self, "_" + kind)(qid, lines, rng)
            if edited is not None:
                lines = edited
                self.counts[COUNTED_AS[kind]] += 1
        return lines

    def _statements(self, lines: list[bytes]) -> list[tuple[int, re.Match]]:
        return [(i, m) for i, m in ((i, _STATEMENT.match(line)) for i, line in enumerate(lines))
                if m is not None and not m.group(3).startswith(_GENID)]

    def _other_value(self, pid: int, taken: set[bytes], rng: np.random.Generator) -> bytes | None:
        ring = self.values.get(pid)
        if ring is None:
            return None
        choices = [v for v in ring.values if v not in taken]
        return choices[int(rng.integers(len(choices)))] if choices else None

    def _statement_added(self, qid: int, lines: list[bytes], rng: np.random.Generator) -> list[bytes] | None:
        found = self._statements(lines)
        if not found:
            return None
        _, m = found[int(rng.integers(len(found)))]
        pid = int(m.group(2))
        value = self._other_value(pid, {s.group(3) for _, s in found if int(s.group(2)) == pid}, rng)
        if value is None:
            return None
        line = m.group(1) + b" <" + DIRECT.encode() + b"P%d> " % pid + value + b" ."
        self._log("statement_added", qid, pid, value)
        last = max(i for i, _ in found)
        return lines[:last + 1] + [line] + lines[last + 1:]

    def _statement_removed(self, qid: int, lines: list[bytes], rng: np.random.Generator) -> list[bytes] | None:
        found = self._statements(lines)
        if not found:
            return None
        i, m = found[int(rng.integers(len(found)))]
        self._log("statement_removed", qid, int(m.group(2)), m.group(3))
        return [line for j, line in enumerate(lines) if j != i and not self._normalized_of(line, lines[i], j, i)]

    def _statement_changed(self, qid: int, lines: list[bytes], rng: np.random.Generator) -> list[bytes] | None:
        found = self._statements(lines)
        if not found:
            return None
        i, m = found[int(rng.integers(len(found)))]
        pid = int(m.group(2))
        value = self._other_value(pid, {s.group(3) for _, s in found if int(s.group(2)) == pid}, rng)
        if value is None:
            return None
        self._log("statement_removed", qid, pid, m.group(3))
        self._log("statement_added", qid, pid, value)
        changed = m.group(1) + b" <" + DIRECT.encode() + b"P%d> " % pid + value + b" ."
        return [changed if j == i else line for j, line in enumerate(lines)
                if not self._normalized_of(line, lines[i], j, i)]

    @staticmethod
    def _normalized_of(line: bytes, statement: bytes, j: int, i: int) -> bool:
        """The ``direct-normalized`` line right after statement ``i``: it goes with its value."""
        return j == i + 1 and b"/prop/direct-normalized/" in line and line.split(b" ", 2)[1].rsplit(b"/", 1)[-1] \
            == statement.split(b" ", 2)[1].rsplit(b"/", 1)[-1]

    def _label_changed(self, qid: int, lines: list[bytes], rng: np.random.Generator) -> list[bytes] | None:
        label = self._term(lines, PREF_LABEL)
        if label is None:
            return None
        new = self._new_text(label[1], rng)
        self._log("label_changed", qid, None, new)
        return self._set_term(lines, _LABEL_PREDICATES, label[1], new)

    def _description_changed(self, qid: int, lines: list[bytes], rng: np.random.Generator) -> list[bytes] | None:
        found = [m for m in map(_TERM[DESCRIPTION].match, lines) if m is not None]
        if len(found) != 1:  # none, or a hostile line beside it
            return None
        new = self._new_text(found[0].group(2), rng)
        self._log("description_changed", qid, None, new)
        return self._set_term(lines, (DESCRIPTION,), found[0].group(2), new)

    def _term(self, lines: list[bytes], predicate: str) -> tuple[int, bytes] | None:
        """(line index, escaped text) of the item's English term (``skos:prefLabel``: the
        label's own line, which no hostile line imitates)."""
        for i, line in enumerate(lines):
            m = _TERM[predicate].match(line)
            if m is not None:
                return i, m.group(2)
        return None

    @staticmethod
    def _set_term(lines: list[bytes], predicates: tuple[str, ...], old: bytes, new: bytes) -> list[bytes]:
        out = []
        for line in lines:
            for pred in predicates:
                m = _TERM[pred].match(line)
                if m is not None and m.group(2) == old:
                    line = m.group(1) + b" " + pred.encode() + b' "' + new + b'"@en .'
                    break
            out.append(line)
        return out

    def _new_text(self, text: bytes, rng: np.random.Generator) -> bytes:
        """``text`` with one word replaced by (or, one time in three, followed by) a recent
        label's word; never ``text`` itself. Words are escaped text: escapes hold no space."""
        words = text.split(b" ")
        for _ in range(8):
            word = self.words.values[int(rng.integers(len(self.words.values)))] if self.words.values else b"Revised"
            if rng.random() < 1 / 3:
                new = words + [word]
            else:
                k = int(rng.integers(len(words)))
                new = words[:k] + [word] + words[k + 1:]
            if new != words:
                return b" ".join(new)
        return text + b" II"

    def _log(self, edit: str, qid: int, pid: int | None = None, value: bytes | None = None) -> None:
        self.edits_out.write(b"%s\tQ%d\t%s\t%s\n" % (edit.encode(), qid, b"P%d" % pid if pid is not None else b"",
                                                    value if value is not None else b""))


def read_edits(folder: str | os.PathLike) -> list[tuple[str, str, str, str]]:
    """The edits a ``nextweek`` run wrote (``edits.tsv.gz``): (edit, subject, property, value),
    value as written in the dump (an IRI, a literal, or a term's escaped text)."""
    with gzip.open(Path(folder) / EDITS_FILE, "rb") as fh:
        return [tuple(line.decode("utf-8").split("\t")) for line in fh.read().splitlines()]  # type: ignore[misc]


def _lines(path: Path) -> Iterator[bytes]:
    with bz2.open(path, "rb") as fh:
        for line in fh:
            yield line.rstrip(b"\n")


def nextweek(first: str | os.PathLike, out: str | os.PathLike, share: float = 0.01, seed: int = 0,
             chunk_lines: int = DEFAULT_CHUNK_LINES, compressor: str = "auto") -> dict[str, Any]:
    """Write the next week of the dump in ``first`` (a folder ``generate`` wrote) into ``out``,
    with ``share`` of its items edited (module docstring); return its manifest (also written as
    ``manifest.json``, last)."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share {share}: expected a share of the items, 0 to 1")
    if chunk_lines < 1:
        raise ValueError(f"chunk_lines {chunk_lines}: expected at least 1")
    src, dst = Path(first), Path(out)
    if src.resolve() == dst.resolve():
        raise ValueError(f"{dst}: the next week is written beside the first one, not over it")
    source = json.loads((src / MANIFEST_FILE).read_text())
    started = time.monotonic()
    compressor = resolve_compressor(compressor)
    dst.mkdir(parents=True, exist_ok=True)
    (dst / MANIFEST_FILE).unlink(missing_ok=True)
    truthy = dst / source.get("truthy", TRUTHY_FILE)
    tmp = truthy.with_suffix(".part")
    lines_out = bytes_out = streams = 0
    with gzip.GzipFile(dst / EDITS_FILE, "wb", mtime=0) as edits, open(tmp, "wb") as fh:
        editor = NextWeek(share, seed, edits)
        chunk: list[bytes] = []

        def flush() -> None:
            nonlocal lines_out, bytes_out, streams
            data = b"\n".join(chunk) + b"\n"
            fh.write(compress(data, compressor))
            lines_out += len(chunk)
            bytes_out += len(data)
            streams += 1
            chunk.clear()

        lines_in = 0
        for qid, group in item_groups(_lines(src / source.get("truthy", TRUTHY_FILE))):
            lines_in += len(group)
            chunk += editor.item(qid, group)
            if len(chunk) >= chunk_lines:
                flush()
        for group in editor.created():
            chunk += group
        if chunk:
            flush()
    tmp.replace(truthy)
    for name in (source.get("page", PAGE_FILE), source.get("page_props", PAGE_PROPS_FILE)):
        if (src / name).exists():
            shutil.copyfile(src / name, dst / name)
    counts = {"share": share, "seed": seed, "lines_in": lines_in, "lines_out": lines_out,
              **{k: editor.counts.get(k, 0) for k in (
                  "items_seen", "items_edited", "items_deleted", "items_created", "statements_added",
                  "statements_removed", "statements_changed", "labels_changed", "descriptions_changed")}}
    manifest = {
        "generator": "refactx_testing.dumpgen.nextweek",
        "version": NEXTWEEK_VERSION,
        "previous": {k: source.get(k) for k in ("generator", "version", "seed", "lines", "preset", "line_mix")},
        "preset": source.get("preset"),
        "chunk_lines": chunk_lines,
        "compressor": compressor,
        "truthy": truthy.name,
        "page": source.get("page", PAGE_FILE),
        "page_props": source.get("page_props", PAGE_PROPS_FILE),
        "edits": EDITS_FILE,
        "lines": lines_out,
        "bytes": bytes_out,
        "bz2_streams": streams,
        "items": source.get("items", 0) - counts["items_deleted"] + counts["items_created"],
        "nextweek": counts,
    }
    (dst / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    log.info("nextweek: %s of %s items edited (%s deleted), %s created, %s lines in %.1f s -> %s",
             f"{counts['items_edited']:,}", f"{counts['items_seen']:,}", f"{counts['items_deleted']:,}",
             f"{counts['items_created']:,}", f"{lines_out:,}", time.monotonic() - started, dst)
    return manifest
