"""The tree row format: round trips, the leaf-count invariant, corrupt input."""

from __future__ import annotations

import os
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refactx_index.tree import format as fmt
from refactx_index.errors import FormatError

from ..treedata import as_version_4
from refactx_index.tree.format import (
    FORMAT_VERSION,
    MAX_DICTIONARY_BYTES,
    PresetDictionary,
    decode_fragment,
    decode_prefix,
    encode_children,
    encode_prefix,
    encode_subtree,
    iter_suffixes,
    make_dictionary,
    with_dictionary,
)

token = st.sampled_from([0, 1, 2, 3, 255, 256, 65535, 65536, 151_000, 2**32 - 1])
facts_strategy = st.lists(st.lists(token, min_size=0, max_size=12), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(facts_strategy)
def test_subtree_round_trip_and_invariant(facts):
    expected = {tuple(f) for f in facts}
    frag = decode_fragment(encode_subtree(facts))
    assert {p for p, ext in iter_suffixes(frag) if not ext} == expected
    assert int(frag.leaves[0]) == len(expected)
    for i in range(frag.n_nodes):
        toks, leaves = frag.children(i)
        assert np.all(np.diff(toks) > 0), "children must be sorted and distinct"
        assert int(leaves.sum()) + int(frag.ends[i]) == int(frag.leaves[i])


def test_children_row_keeps_external_leaf_counts():
    frag = decode_fragment(encode_children([70000, 5, 9], [3, 1, 2], ends=True))
    toks, leaves = frag.children(0)
    assert toks.tolist() == [5, 9, 70000]
    assert leaves.tolist() == [1, 2, 3]
    assert bool(frag.ends[0]) and int(frag.leaves[0]) == 7
    assert frag.external[1:].all()
    assert frag.child(0, 9) == 2 and frag.child(0, 10) == -1


def test_a_packed_row_stores_small_children_whole_beside_external_ones():
    """``encode_packed``: the children given as suffixes are complete subtrees, the others
    external with their leaf counts; the same fragment format, read by the same decoder."""
    from refactx_index.tree.format import encode_packed

    node = encode_packed([[5, 1], [5, 2, 3], [], [70000]], [9, 6], [40, 2])
    frag = decode_fragment(node)
    toks, leaves = frag.children(0)
    assert toks.tolist() == [5, 6, 9, 70000] and leaves.tolist() == [2, 2, 40, 1]
    assert bool(frag.ends[0]) and int(frag.leaves[0]) == 46
    start = int(frag.child_start[0])
    assert frag.external[start:start + 4].tolist() == [False, True, True, False]
    five = frag.child(0, 5)
    assert frag.children(five)[0].tolist() == [1, 2] and not frag.external[five]
    assert bool(frag.ends[frag.child(0, 70000)])
    with pytest.raises(ValueError, match="whole or external"):
        encode_packed([[5, 1]], [5], [3])
    with pytest.raises(ValueError, match="at least one leaf"):
        encode_packed([[5, 1]], [6], [0])


def test_prefix_keys_sort_like_token_sequences():
    seqs = [[], [1], [1, 0], [2], [255, 1], [256], [70000, 3]]
    keys = [encode_prefix(s) for s in seqs]
    assert keys == sorted(keys)
    for s, k in zip(seqs, keys):
        assert decode_prefix(k).tolist() == s
    with pytest.raises(ValueError):
        encode_prefix([-1])


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda b: b[:5], "shorter than its header"),
        (lambda b: bytes([FORMAT_VERSION + 1]) + b[1:], "version"),
        (lambda b: b[:20] + bytes([b[20] ^ 4]) + b[21:], "checksum"),
        (lambda b: b[:-1], None),
        (lambda b: b[:10] + b"\x00" * (len(b) - 10), None),
    ],
)
def test_corrupt_fragments_raise_format_error(mutate, message):
    good = encode_subtree([[1, 2, 3], [1, 2, 4], [7]], compress=False)
    with pytest.raises(FormatError, match=message):
        decode_fragment(mutate(good))


def test_compressed_body_that_does_not_inflate_is_a_format_error():
    good = encode_subtree([list(range(i, i + 30)) for i in range(20)])
    assert good[1] & 1, "a large fragment should be stored compressed"
    bad = good[:12] + bytes(b ^ 0xFF for b in good[12:])
    with pytest.raises(FormatError):
        decode_fragment(bad)


def test_header_layout_is_stable():
    blob = encode_subtree([[5]], compress=False)
    version, flags, tw, cw, lw, _, n, crc = struct.unpack_from("<BBBBBBII", blob)
    assert (version, flags, tw, n) == (FORMAT_VERSION, 0, 1, 2) == (5, 0, 1, 2)
    assert crc == zlib.crc32(blob[14:], zlib.crc32(blob[:10]))


def as_version_1(blob: bytes) -> bytes:
    """The same fragment as version 1 wrote it: no checksum."""
    return bytes([1]) + blob[1:10] + blob[14:]


def test_version_1_rows_are_still_read():
    for seqs in ([[5]], [[1, 2, 3], [1, 2, 4], [7]], [list(range(i, i + 30)) for i in range(20)]):
        blob = encode_subtree(seqs)
        old, new = decode_fragment(as_version_1(blob)), decode_fragment(blob)
        assert old.tokens.tolist() == new.tokens.tolist() and old.leaves.tolist() == new.leaves.tolist()


@pytest.mark.parametrize("compress", [False, True])
def test_a_flipped_bit_anywhere_is_caught_by_the_checksum(compress):
    blob = encode_subtree([list(range(i, i + 30)) for i in range(20)] + [[3, 4]], compress=compress)
    for position in range(len(blob)):
        if position == 0:
            continue  # the version byte: refused as an unknown version
        for bit in (0, 7):
            bad = bytearray(blob)
            bad[position] ^= 1 << bit
            with pytest.raises(FormatError):
                decode_fragment(bytes(bad))


@settings(max_examples=200, deadline=None)
@given(facts=st.sets(st.lists(st.sampled_from([0, 1, 2, 70_000, 2**32 - 1]), min_size=1, max_size=8)
                     .map(tuple), min_size=1, max_size=40).map(sorted),
       cuts=st.lists(st.tuples(st.booleans(), st.integers(0, 8)), min_size=40, max_size=40))
def test_subtree_runs_encode_like_one_subtree_per_row(facts, cuts):
    """The prefix rows job's vectorized encoder gives each row encode_subtree's bytes."""
    from refactx_index.tree.format import encode_subtree_runs

    n = np.array([len(f) for f in facts])
    mat = np.full((len(facts), int(n.max())), -1, dtype=np.int64)
    for i, f in enumerate(facts):
        mat[i, : len(f)] = f
    lcp = np.zeros(len(facts), dtype=np.int64)
    for i in range(1, len(facts)):
        a, b = facts[i - 1], facts[i]
        while lcp[i] < min(len(a), len(b)) and a[lcp[i]] == b[lcp[i]]:
            lcp[i] += 1
    # rows: runs of neighbours sharing their first ``depth`` tokens
    lo, hi, depth = [], [], []
    i = 0
    while i < len(facts):
        extend, d = cuts[i]
        d = min(d, int(n[i]))
        j = i + 1
        while extend and j < len(facts) and lcp[j] >= d:
            j += 1
        lo.append(i), hi.append(j), depth.append(d)
        i = j
    got = encode_subtree_runs(mat, n, lcp, np.array(lo), np.array(hi), np.array(depth))
    assert got == [encode_subtree([facts[x][d:] for x in range(a, b)]) for a, b, d in zip(lo, hi, depth)]


# --------------------------------------------------------------------------- versions 3 and 4


def as_version_2(blob: bytes) -> bytes:
    """The same row as version 2 wrote it (a row without a dictionary differs in its version
    byte only, and so in its checksum)."""
    head = bytes([2]) + blob[1:10]
    return head + struct.pack("<I", zlib.crc32(blob[14:], zlib.crc32(head))) + blob[14:]


def fragments_equal(a, b) -> bool:
    """The decoded content: the same children, leaf counts, ends and external nodes."""
    return all(np.array_equal(getattr(a, f), getattr(b, f))
               for f in ("tokens", "child_start", "child_count", "ends", "external", "leaves"))


def sample_rows(count: int = 60) -> dict[bytes, bytes]:
    rng = np.random.default_rng(0)
    rows = {}
    for i in range(count):
        facts = [[i, 70_000 + int(rng.integers(0, 50)), *rng.integers(0, 300, int(rng.integers(1, 9)))]
                 for _ in range(int(rng.integers(1, 30)))]
        rows[encode_prefix([i])] = encode_subtree(facts)
    rows[b""] = encode_children(list(range(count)), [3] * count, ends=False)
    return rows


def test_version_2_rows_are_still_read_in_a_version_2_build():
    for seqs in ([[5]], [[1, 2, 3], [1, 2, 4], [7]], [list(range(i, i + 30)) for i in range(20)]):
        blob = encode_subtree(seqs)
        old = decode_fragment(as_version_2(blob), 2)
        assert fragments_equal(old, decode_fragment(blob, FORMAT_VERSION))
        with pytest.raises(FormatError, match=f"version 2 row inside a format version {FORMAT_VERSION} build"):
            decode_fragment(as_version_2(blob), FORMAT_VERSION)


def test_dictionary_rows_decode_to_the_same_content_and_are_smaller():
    rows = sample_rows()
    dictionary = make_dictionary(rows.items())
    assert 0 < len(dictionary.data) <= MAX_DICTIONARY_BYTES
    packed = {key: with_dictionary(node, dictionary) for key, node in rows.items()}
    assert sum(map(len, packed.values())) < sum(map(len, rows.values()))
    assert any(node[1] & 4 for node in packed.values()), "some rows use the dictionary"
    for key, node in rows.items():
        assert fragments_equal(decode_fragment(packed[key], FORMAT_VERSION, dictionary), decode_fragment(node, FORMAT_VERSION))


@settings(max_examples=100, deadline=None)
@given(facts_strategy, facts_strategy)
def test_dictionary_round_trip_property(facts, other):
    """Any row, compressed against a dictionary made from any other rows, decodes as before."""
    sampled = {encode_prefix([i]): encode_subtree(other) for i in range(3)}
    dictionary = make_dictionary(sampled.items())
    for node in (encode_subtree(facts), encode_children([5, 9, 70_000], [1, 2, 3], ends=True)):
        assert fragments_equal(decode_fragment(with_dictionary(node, dictionary), FORMAT_VERSION, dictionary),
                               decode_fragment(node, FORMAT_VERSION))


def test_the_dictionary_is_deterministic_whatever_the_order_of_the_rows():
    rows = sample_rows()
    items = list(rows.items())
    first = make_dictionary(items)
    assert make_dictionary(reversed(items)) == first
    assert make_dictionary(sorted(items, key=lambda kv: kv[1])).data == first.data


def test_a_dictionary_row_without_its_dictionary_or_with_another_is_a_format_error():
    rows = sample_rows()
    dictionary = make_dictionary(rows.items())
    key = next(k for k in rows if k)
    node = with_dictionary(rows[key], dictionary)
    assert node[1] & 4
    with pytest.raises(FormatError, match="preset dictionary, read without one"):
        decode_fragment(node, FORMAT_VERSION)
    other = PresetDictionary(dictionary.data[:-1] + bytes([dictionary.data[-1] ^ 1]))
    with pytest.raises(FormatError, match="checksum mismatch.*another build's preset dictionary"):
        decode_fragment(node, FORMAT_VERSION, other)
    with pytest.raises(FormatError, match="checksum"):
        decode_fragment(node, FORMAT_VERSION, PresetDictionary(b"another build"))


def test_a_flipped_bit_in_a_dictionary_row_is_caught():
    rows = sample_rows()
    dictionary = make_dictionary(rows.items())
    node = with_dictionary(rows[encode_prefix([3])], dictionary)
    assert node[1] & 4
    for position in range(1, len(node)):
        for bit in (0, 7):
            bad = bytearray(node)
            bad[position] ^= 1 << bit
            with pytest.raises(FormatError):
                decode_fragment(bytes(bad), FORMAT_VERSION, dictionary)


def test_the_dictionary_flag_is_refused_in_older_versions():
    node = as_version_2(encode_subtree([[1, 2, 3]], compress=False))
    head = bytes([2, 2]) + node[2:10]
    forged = head + struct.pack("<I", zlib.crc32(node[14:], zlib.crc32(head))) + node[14:]
    with pytest.raises(FormatError, match="flags"):
        decode_fragment(forged, 2, PresetDictionary(b"x" * 100))


def test_a_preset_dictionary_holds_1_to_64_kib():
    assert MAX_DICTIONARY_BYTES == 64 * 1024
    with pytest.raises(FormatError):
        PresetDictionary(b"x" * (MAX_DICTIONARY_BYTES + 1))
    with pytest.raises(FormatError):
        PresetDictionary(b"")


def as_version_3(node: bytes, dictionary: PresetDictionary) -> bytes:
    """A current row as version 3 wrote it: its body raw deflate (level 9) against the
    dictionary's bytes, flag bit 1, the checksum seeded alike."""
    body = decode_body(node, dictionary)
    deflater = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, dictionary.data[-32768:])
    packed = deflater.compress(body) + deflater.flush()
    head = bytes([3, 2]) + node[2:10]
    return head + struct.pack("<I", zlib.crc32(packed, zlib.crc32(head, dictionary.crc))) + packed


def decode_body(node: bytes, dictionary: PresetDictionary) -> bytes:
    return (dictionary.decompressor().decompress(node[14:]) if node[1] & 4
            else zlib.decompress(node[14:]) if node[1] & 1 else node[14:])


def test_version_3_builds_are_still_read_with_their_deflate_dictionary():
    """A version 3 build (rows deflated against a dictionary of at most 32 KiB) decodes to the
    same content as the version 4 rows of the same facts; a row of either version inside a
    build of the other is refused."""
    rows = sample_rows()
    dictionary = make_dictionary(rows.items())
    deflate_dictionary = PresetDictionary(dictionary.data[-32768:])
    for key, node in rows.items():
        current = with_dictionary(node, dictionary)
        old = as_version_3(as_version_4(current, dictionary), deflate_dictionary)
        assert fragments_equal(decode_fragment(old, 3, deflate_dictionary), decode_fragment(current, FORMAT_VERSION, dictionary))
        with pytest.raises(FormatError, match=f"version 3 row inside a format version {FORMAT_VERSION} build"):
            decode_fragment(old, FORMAT_VERSION, dictionary)
        with pytest.raises(FormatError, match=f"version {FORMAT_VERSION} row inside a format version 3 build"):
            decode_fragment(current, 3, deflate_dictionary)


def test_the_dictionary_is_trained_and_falls_back_to_raw_content_on_a_handful_of_rows():
    """Enough rows: a trained zstd dictionary (its magic first, entropy tables and content
    after). Too few for zstd's trainer: the rows' bytes as a raw content dictionary, which
    never starts with that magic (else zstd would parse it as a trained one)."""
    rows = sample_rows()
    assert make_dictionary(rows.items()).data[:4] == b"\x37\xa4\x30\xec"
    few = dict(list(rows.items())[:2])
    raw = make_dictionary(few.items())
    assert raw.data[:4] != b"\x37\xa4\x30\xec" and 0 < len(raw.data) <= MAX_DICTIONARY_BYTES
    for key, node in few.items():
        assert fragments_equal(decode_fragment(with_dictionary(node, raw), FORMAT_VERSION, raw), decode_fragment(node, FORMAT_VERSION))
    # a body that begins with the magic bytes (token ids 0x37 0xa4 0x30 0xec, one byte each)
    magic_first = {b"": encode_subtree([[0x37, 0xA4, 0x30, 0xEC, 1]], compress=False)}
    assert magic_first[b""][14:18] == b"\x37\xa4\x30\xec"
    guarded = make_dictionary(magic_first.items())
    assert guarded.data[0] == 0 and guarded.data[1:5] == b"\x37\xa4\x30\xec"
    node = with_dictionary(magic_first[b""], guarded)
    assert fragments_equal(decode_fragment(node, FORMAT_VERSION, guarded), decode_fragment(magic_first[b""], FORMAT_VERSION))


def test_a_corrupt_trained_dictionary_is_a_format_error_when_writing_and_reading():
    rows = sample_rows()
    dictionary = make_dictionary(rows.items())
    node = with_dictionary(rows[encode_prefix([3])], dictionary)
    assert node[1] & 4
    corrupt = PresetDictionary(dictionary.data[:8] + bytes(64))  # zstd's magic, then nothing it can parse
    with pytest.raises(FormatError, match="dictionary does not load"):
        with_dictionary(rows[encode_prefix([3])], corrupt)
    resealed = node[:10] + struct.pack("<I", zlib.crc32(node[14:], zlib.crc32(node[:10], corrupt.crc))) + node[14:]
    with pytest.raises(FormatError, match="does not decompress"):
        decode_fragment(resealed, FORMAT_VERSION, corrupt)


# --------------------------------------------------------------------------- the two decoders


def test_the_compiled_decoder_is_installed():
    """The extension is optional at install (no compiler: numpy decodes), so a build that
    silently lost it would only be slower: the project's own install must have it."""
    assert "compiled" in fmt.DECODERS, "refactx_index.tree._fragment was not built"
    assert fmt.DECODER == os.environ.get("REFACTX_DECODER", "compiled")


@pytest.mark.parametrize("decoder", sorted(fmt.DECODERS))
def test_a_decoded_row_keeps_26_bytes_a_node(decoder, monkeypatch):
    # child starts and counts in int32 (at most MAX_FRAGMENT_NODES); token ids (up to
    # 2**32 - 1) and leaf counts (up to 2**40) in int64
    monkeypatch.setattr(fmt, "DECODER", decoder)
    frag = decode_fragment(encode_subtree([[1, 2, 3], [1, 2, 4], [5], [2**32 - 1, 0]]))
    assert [a.dtype for a in (frag.tokens, frag.child_start, frag.child_count, frag.leaves)] == [
        np.int64, np.int32, np.int32, np.int64]
    assert frag.nbytes == 26 * frag.n_nodes
    assert int(frag.tokens[frag.child(0, 2**32 - 1)]) == 2**32 - 1


def decoded(body: bytes, tw: int, cw: int, lw: int, n: int, decoder: str):
    """A decoder's outcome on a body: its arrays, or its error's message."""
    try:
        frag = fmt.DECODERS[decoder](body, tw, cw, lw, n)
    except FormatError as exc:
        return str(exc)
    return [getattr(frag, f).tolist() for f in ("tokens", "child_start", "child_count", "ends", "external", "leaves")]


def plain_row(facts, external: bool) -> bytes:
    if external:  # an expanded row: its children external, with their leaf counts
        tokens = sorted({f[0] for f in facts if f})
        return encode_children(tokens, [len(facts) + i for i in range(len(tokens))], ends=[] in facts,
                               compress=False)
    return encode_subtree(facts, compress=False)


@settings(max_examples=300, deadline=None)
@given(facts=facts_strategy, external=st.booleans(),
       edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=3),
       cut=st.integers(-3, 3))
def test_the_compiled_and_numpy_decoders_agree_on_every_row_and_every_corruption(facts, external, edits, cut):
    """The same arrays from a row, and the same refusal (the first check it fails) from a row
    with bytes overwritten, cut short or extended past its header's checksum (what a forger
    can write: version 1 rows carry none)."""
    if "compiled" not in fmt.DECODERS:
        pytest.skip("refactx_index.tree._fragment is not built here")
    row = plain_row(facts, external)
    _, flags, tw, cw, lw, _, n = struct.unpack_from("<BBBBBBI", row)
    assert flags == 0
    body = bytearray(row[14:])
    for where, value in edits:
        if body:
            body[int(where * len(body))] = value
    body = bytes(body[: len(body) + cut] if cut < 0 else body + bytes(cut))
    assert decoded(body, tw, cw, lw, n, "compiled") == decoded(body, tw, cw, lw, n, "numpy")
    if not edits and not cut:
        assert isinstance(decoded(body, tw, cw, lw, n, "compiled"), list)


def test_the_decoders_agree_on_the_checks_the_fuzzer_rarely_reaches():
    """A node before its parent, a node with no fact below it, stored counts past their bounds."""
    if "compiled" not in fmt.DECODERS:
        pytest.skip("refactx_index.tree._fragment is not built here")
    cases = [
        # node 1 claims both nodes as its children, itself included: a node before its parent
        (bytes([5, 6]) + bytes([0, 2, 0]) + bytes([0b00100000]) + bytes([0]), 1, 1, 1, 3),
        # a leaf that neither ends nor is external: no fact below it
        (bytes([5]) + bytes([1, 0]) + bytes([0]) + bytes([0]), 1, 1, 1, 2),
        # an external child whose stored count is 2**64 - 1 (it would wrap to -1 in int64)
        (bytes([5]) + bytes([1, 0]) + bytes([0]) + bytes([0b01000000]) + b"\xff" * 8, 1, 1, 8, 2),
        # one past MAX_FRAGMENT_LEAVES: two such children would add up past int64
        (bytes([5]) + bytes([1, 0]) + bytes([0]) + bytes([0b01000000]) + struct.pack("<Q", (1 << 40) + 1),
         1, 1, 8, 2),
        # a child count that wraps negative from uint64
        (bytes([5]) + struct.pack("<QQ", 2**64 - 1, 2) + bytes([0]) + bytes([0]), 1, 8, 1, 2),
        # well-formed: an external child of 7 facts under a root that ends
        (bytes([5]) + bytes([1, 0]) + bytes([0b10000000]) + bytes([0b01000000]) + bytes([7]), 1, 1, 1, 2),
    ]
    outcomes = [decoded(*case, "compiled") for case in cases]
    assert outcomes == [decoded(*case, "numpy") for case in cases]
    assert outcomes[:5] == ["fragment child counts put a node before its parent",
                            "fragment has a node with no fact below it",
                            "fragment has a leaf count out of range",
                            "fragment has a leaf count out of range",
                            "fragment child counts are inconsistent"]
    assert outcomes[5][-1] == [8, 7]  # leaves: the root's end and its child's 7
    with pytest.raises(ValueError, match="MAX_FRAGMENT_LEAVES"):
        encode_children([5], [(1 << 40) + 1], ends=False)


def test_version_5_stores_token_ids_below_2_24_in_3_bytes_and_version_4_rows_still_read():
    """Ids that took 4 bytes in version 4 take 3 in version 5 when all lie below 2**24 (a row
    with a larger id keeps 4); both decoders give the same fragment as the version 4 row of
    the same facts, which still decodes in a version 4 build; a width of 3 is refused in a
    version 4 row, and a version 4 row in a version 5 build."""
    facts = [[70_000 + i, 151_000, 5, i] for i in range(40)] + [[2**24 - 1, 1], [3, 65_536]]
    plain = encode_subtree(facts, compress=False)
    assert plain[2] == 3  # ids up to 2**24 - 1: 3 bytes each
    assert encode_subtree([[2**24, 1], [70_000]], compress=False)[2] == 4
    rows = sample_rows()
    dictionary = make_dictionary(rows.items())
    for node in [plain, encode_subtree(facts), with_dictionary(plain, dictionary)]:
        old = as_version_4(node, dictionary)
        assert old[0] == 4 and old[2] == 4 and len(old) > 0
        for decoder in fmt.DECODERS:
            fmt_decoder, fmt.DECODER = fmt.DECODER, decoder
            try:
                new_frag = decode_fragment(node, 5, dictionary)
                assert fragments_equal(new_frag, decode_fragment(old, 4, dictionary))
                assert {p for p, ext in iter_suffixes(new_frag) if not ext} == {tuple(f) for f in facts}
            finally:
                fmt.DECODER = fmt_decoder
        with pytest.raises(FormatError, match="version 4 row inside a format version 5 build"):
            decode_fragment(old, 5, dictionary)
    forged_head = bytes([4]) + plain[1:10]
    forged = forged_head + struct.pack("<I", zlib.crc32(plain[14:], zlib.crc32(forged_head))) + plain[14:]
    with pytest.raises(FormatError, match="header is corrupt"):
        decode_fragment(forged, 4)
