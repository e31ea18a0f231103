"""The in-memory index: a corporate graph of 10k triples with a real tokenizer, the
cut rule, the file format, and text exploration."""

from __future__ import annotations

import numpy as np
import pytest

from refactx_index import FormatError, TreeIndex, VocabularyMismatch
from refactx_index.tree.explore import complete, enumerate_facts
from refactx_index.tree import format as fmt
from refactx_index.tree.format import decode_fragment, decode_prefix
from refactx_index.tree.memory import MemoryTreeIndex, build_rows, encode_texts
from refactx_index.vocab import open_tokenizer

from ..conftest import tokenizer_dir
from ..treedata import expected_next, random_sequences


def corporate_graph(n_companies: int = 1000) -> list[str]:
    """10 triples per company: 10k facts with shared subjects and properties."""
    props = ["industry", "founded in", "headquarters", "chief executive", "employees",
             "parent organization", "stock exchange", "legal form", "country", "website"]
    facts = []
    for i in range(n_companies):
        company = f"Company {i:04d}"
        values = [f"industry {i % 17}", str(1900 + i % 120), f"City {i % 97}", f"Person {i}",
                  str(10 * (i % 500) + 7), f"Company {(i * 7) % n_companies:04d}",
                  ["NYSE", "NASDAQ", "LSE", "none"][i % 4], ["SA", "GmbH", "Inc", "Ltd"][i % 4],
                  f"Country {i % 31}", f"https://c{i}.example.com"]
        facts += [f"<{company}> <{p}> <{v}> ." for p, v in zip(props, values)]
    return facts


@pytest.fixture(scope="module")
def tokenizer():
    return open_tokenizer(str(tokenizer_dir("gpt2")))


@pytest.fixture(scope="module")
def graph(tokenizer):
    facts = corporate_graph()
    index = MemoryTreeIndex.from_facts(facts, tokenizer_dir("gpt2"), name="corp", 
                                       threshold=16)
    seqs = {tuple(s) for s in encode_texts(tokenizer, [" " + f for f in facts])}
    return facts, seqs, index


def test_ten_thousand_triples_answer_like_brute_force(graph):
    facts, seqs, index = graph
    assert isinstance(index, TreeIndex)
    assert index.info.facts == len(seqs) == 10_000
    assert index.info.vocabulary == "gpt2" and len(index.info.vocabulary_sha256) == 64
    assert index.info.vocab_size == 50257
    rng = np.random.default_rng(0)
    sample = [sorted(seqs)[i] for i in rng.choice(len(seqs), 60, replace=False)]
    prefixes = {s[:k] for s in sample for k in range(len(s) + 1)}
    answers = index.next_tokens_batch(sorted(prefixes))
    for p, answer in zip(sorted(prefixes), answers):
        assert (dict(zip(answer.tokens.tolist(), answer.leaves.tolist())), answer.ends) == \
            expected_next(seqs, p)
    assert index.next_tokens(()).total_leaves == 10_000
    assert index.next_tokens((50256,)).empty


@pytest.mark.parametrize("max_tokens,threshold", [(1, 1), (8, 1), (12, 3), (4096, 1), (4096, 64), (30, 64)])
def test_cut_rule_rows(max_tokens, threshold):
    seqs = random_sequences(seed=max_tokens * 10 + threshold, n=400)
    rows = build_rows(seqs, threshold=threshold, max_subtree_tokens=max_tokens)
    for key, node in rows.items():
        prefix = tuple(decode_prefix(key).tolist())
        frag = decode_fragment(node)
        below = [s for s in seqs if s[: len(prefix)] == prefix]
        assert int(frag.leaves[0]) == len(below)  # leaf counts add up
        expanded = bool(frag.external.any())
        # expanded exactly when more than T facts, or more than B tokens, lie below
        tokens_below = sum(len(s) - len(prefix) for s in below)
        assert expanded == (len(below) > threshold or tokens_below > max_tokens)
        if not expanded:  # every row is bounded by facts and tokens, at any depth
            assert len(below) <= threshold and tokens_below <= max_tokens
        if expanded:  # every external child has its own row
            for tok in frag.children(0)[0].tolist():
                assert key + int(tok).to_bytes(4, "big") in rows
    index = MemoryTreeIndex(rows, MemoryTreeIndex.from_sequences(seqs).info)
    for s in list(seqs)[:50]:
        for k in range(len(s) + 1):
            answer = index.next_tokens(s[:k])
            assert (dict(zip(answer.tokens.tolist(), answer.leaves.tolist())), answer.ends) == \
                expected_next(seqs, s[:k])


def test_build_rows_rejects_bad_input():
    with pytest.raises(ValueError):
        build_rows([], threshold=2)
    with pytest.raises(ValueError):
        build_rows([()], threshold=2)
    with pytest.raises(ValueError):
        build_rows([(1, 2)], threshold=0)
    with pytest.raises(ValueError):
        build_rows([(1, 2)], max_subtree_tokens=0)


def test_save_and_load_round_trip(graph, tmp_path):
    _, seqs, index = graph
    path = tmp_path / "corp.rfx"
    index.save(path)
    loaded = MemoryTreeIndex.load(path, vocabulary=tokenizer_dir("gpt2"))
    assert loaded.info == index.info and dict(loaded.rows) == dict(index.rows)
    some = sorted(seqs)[123]
    a, b = index.next_tokens(some[:5]), loaded.next_tokens(some[:5])
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.leaves, b.leaves)
    with pytest.raises(VocabularyMismatch):
        MemoryTreeIndex.load(path, vocabulary=tokenizer_dir("llama3"))


def test_corrupt_or_foreign_files_are_refused(graph, tmp_path):
    _, _, index = graph
    path = tmp_path / "corp.rfx"
    index.save(path)
    data = path.read_bytes()
    bad = tmp_path / "bad.rfx"
    for payload, match in [
        (b"PK\x03\x04" + data[4:], "not a refactx_index tree file"),
        (data[:-10], "checksum"),
        (data[:-100] + bytes(100), "checksum"),
        (data[:12] + b"{not json" + data[21:], "JSON|checksum"),
    ]:
        bad.write_bytes(payload)
        with pytest.raises(FormatError, match=match):
            MemoryTreeIndex.load(bad)


def test_answers_are_read_only(graph):
    _, _, index = graph
    answer = index.next_tokens(())
    with pytest.raises(ValueError):
        answer.leaves[0] = 0


def test_complete_and_enumerate_by_text(graph, tokenizer):
    facts, _, index = graph
    listed = list(enumerate_facts(index, tokenizer, "<Company 0042> <"))
    expected = sorted(f for f in facts if f.startswith("<Company 0042> <"))
    assert sorted(text for text, _ in listed) == expected and len(expected) == 10
    completions = complete(index, tokenizer, "<Company 0042> <", limit=50)
    assert sum(n for _, n in completions) == 10
    assert ("industry> <industry 8> .", 1) in completions
    # a prefix that ends inside a token: still found by text
    partial = complete(index, tokenizer, "<Company 004", limit=50)
    assert sum(n for _, n in partial) == 100
    assert all(text for text, _ in partial)
    assert list(enumerate_facts(index, tokenizer, limit=3)) and \
        len(list(enumerate_facts(index, tokenizer, limit=3))) == 3
    assert complete(index, tokenizer, "<No such company>") == []


def test_package_import_is_light():
    import subprocess
    import sys

    code = ("import sys, refactx_index; "
            "print(sorted(m for m in ('numpy', 'psycopg', 'torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_changed_header_byte_is_caught_by_the_checksum(graph, tmp_path):
    """The JSON header (vocabulary, fact prefix, depth) is covered too."""
    _, _, index = graph
    path = tmp_path / "corp.rfx"
    index.save(path)
    data = path.read_bytes()
    at = data.index(b'"fact_prefix": " "') + len('"fact_prefix": "')
    for changed in (b"_", b"!"):  # still valid JSON, a plausible header: only the checksum tells
        (tmp_path / "bad.rfx").write_bytes(data[:at] + changed + data[at + 1:])
        with pytest.raises(FormatError, match="checksum"):
            MemoryTreeIndex.load(tmp_path / "bad.rfx")


def test_a_file_of_the_first_layout_is_read_with_a_warning_naming_the_rewrite(graph, tmp_path, caplog):
    import json
    import struct
    import zlib
    from dataclasses import asdict

    from dataclasses import replace

    from refactx_index.tree.memory import build_rows

    _, seqs, index = graph
    # a file of that layout holds no dictionary: the same build's rows without one
    index = MemoryTreeIndex(build_rows(seqs, threshold=16), replace(index.info, dictionary=None))
    records = b"".join(struct.pack("<II", len(k), len(index.rows[k])) + k + index.rows[k]
                       for k in sorted(index.rows))
    info = old_header_names(asdict(index.info))
    del info["dictionary"]
    header = {**info, "records": len(index.rows), "crc32": zlib.crc32(records)}
    head = json.dumps(header, sort_keys=True).encode()
    old = tmp_path / "old.rfx"
    old.write_bytes(b"RFXTREE1" + struct.pack("<I", len(head)) + head + records)
    loaded = MemoryTreeIndex.load(old)
    assert loaded.info == index.info and dict(loaded.rows) == dict(index.rows)
    assert "not covered by its checksum" in caplog.text and ".save(path)" in caplog.text
    loaded.save(old)  # the rewrite the warning names: the new layout, no warning
    caplog.clear()
    assert MemoryTreeIndex.load(old).info == index.info and "checksum" not in caplog.text


def old_header_names(info: dict) -> dict:
    """IndexInfo's fields as files written before 0.2.0 name them (the vocabulary's name and
    sha256 under ``tokenizer`` and ``tokenizer_hash``)."""
    renamed = {"vocabulary": "tokenizer", "vocabulary_sha256": "tokenizer_hash"}
    return {renamed.get(k, k): v for k, v in info.items()}


def version_2_file(index: MemoryTreeIndex, path) -> None:
    """``index`` as the second layout wrote it: no dictionary, format version 2 rows."""
    import json
    import struct
    import zlib
    from dataclasses import asdict

    rows = {}
    for key, node in index.rows.items():
        head = bytes([2]) + node[1:10]
        rows[key] = head + struct.pack("<I", zlib.crc32(node[14:], zlib.crc32(head))) + node[14:]
    records = b"".join(struct.pack("<II", len(k), len(rows[k])) + k + rows[k] for k in sorted(rows))
    info = old_header_names(asdict(index.info))
    del info["dictionary"]
    header = {**info, "format_version": 2, "records": len(rows)}
    head = json.dumps(header, sort_keys=True).encode()
    path.write_bytes(b"RFXTREE2" + struct.pack("<II", len(head), zlib.crc32(records, zlib.crc32(head)))
                     + head + records)


def test_the_dictionary_is_saved_with_the_file_and_old_files_still_read(graph, tmp_path):
    from dataclasses import replace

    from refactx_index.tree.memory import build_rows

    _, seqs, index = graph
    assert index.info.dictionary is not None and index.info.format_version == fmt.FORMAT_VERSION
    assert any(node[1] & 4 for node in index.rows.values())
    index.save(tmp_path / "v3.rfx")
    loaded = MemoryTreeIndex.load(tmp_path / "v3.rfx")
    assert loaded.info.dictionary == index.info.dictionary and dict(loaded.rows) == dict(index.rows)
    plain = MemoryTreeIndex(build_rows(seqs, threshold=16), replace(index.info, dictionary=None))
    version_2_file(plain, tmp_path / "v2.rfx")
    old = MemoryTreeIndex.load(tmp_path / "v2.rfx")
    assert old.info.format_version == 2 and old.info.dictionary is None
    assert (old.info.vocabulary, old.info.vocabulary_sha256) == (index.info.vocabulary, index.info.vocabulary_sha256)
    assert old.info.vocabulary == "gpt2" and len(old.info.vocabulary_sha256) == 64
    for seq in sorted(seqs)[:: max(1, len(seqs) // 50)]:
        for k in range(len(seq)):
            a, b = old.next_tokens(seq[:k]), loaded.next_tokens(seq[:k])
            assert a.tokens.tolist() == b.tokens.tolist() and a.leaves.tolist() == b.leaves.tolist()
            assert a.ends == b.ends
    # a changed dictionary byte is the file's checksum error, never a wrong answer
    data = bytearray((tmp_path / "v3.rfx").read_bytes())
    head_len = int.from_bytes(data[8:12], "little")
    data[16 + head_len + 5] ^= 1
    (tmp_path / "bad.rfx").write_bytes(bytes(data))
    with pytest.raises(FormatError, match="checksum"):
        MemoryTreeIndex.load(tmp_path / "bad.rfx")


def test_the_vectorized_plain_cut_gives_the_python_walk_s_rows():
    """``build_rows``' plain cut (vectorized: ``plain_cut_rows``) gives the rows of its Python walk
    (the packed cut's, with packing that never applies: no child is small enough to pack), byte
    for byte, under every cut (thresholds and token caps small enough to expand at many depths;
    duplicates; a sequence that is a prefix of others); ``from_id_arrays`` gives ``from_sequences``'
    index."""
    import numpy as np

    from refactx_index.tree.memory import MemoryTreeIndex, build_rows

    rng = np.random.default_rng(24)
    for trial in range(30):
        n = int(rng.integers(1, 300))
        seqs = [tuple(int(t) for t in rng.integers(0, 5 + trial, size=int(rng.integers(1, 9)))) for _ in range(n)]
        seqs += seqs[: n // 7] + [s[:1] for s in seqs[: n // 5]]
        for threshold, max_tokens in [(1, 1), (2, 5), (3, 40), (16, 1000), (1024, 32768)]:
            walked = build_rows(seqs, threshold=threshold, max_subtree_tokens=max_tokens,
                                pack_facts=len(seqs) + 1, pack_child_facts=0)
            assert build_rows(seqs, threshold=threshold, max_subtree_tokens=max_tokens) == walked, (trial, threshold)
        values = np.array([t for s in seqs for t in s], dtype=np.int64)
        offsets = np.concatenate(([0], np.cumsum([len(s) for s in seqs])))
        index = MemoryTreeIndex.from_id_arrays(values, offsets, name="m", vocabulary="", vocabulary_sha256="",
                                               vocab_size=0, index_kind="paths")
        reference = MemoryTreeIndex.from_sequences(seqs, name="m", index_kind="paths", dictionary=False)
        assert index.rows == reference.rows and index.info == reference.info


def test_the_plain_cut_refuses_no_fact_and_an_empty_one():
    from refactx_index.errors import InputRefused
    from refactx_index.tree.memory import build_rows

    with pytest.raises(InputRefused, match="at least one fact"):
        build_rows([])
    with pytest.raises(InputRefused, match="at least one token"):
        build_rows([(1, 2), ()])
