"""How a build's rows are compressed: format version 4 (zstd against a dictionary trained per
build) against version 3 (raw deflate level 9 against a 32 KiB dictionary of 1 KiB pieces),
on the same rows, in one run.

Rows: a prefix rows stage's output (``<build>/prefix_rows/<vocab>/rows`` and its
``dictionary.bin``), by default the one ``bench/bench_e2e.py`` leaves in its work folder (the
realistic preset). Their uncompressed bodies are recovered, then compressed again, every row,
on one core, by each codec:

* ``v3 deflate 9``: version 3 as it was written (its dictionary made here as version 3's
  ``make_dictionary`` made it: the first 1,024 bytes of each sampled body up to 32 KiB);
* ``deflate 6``: the same with deflate level 6 (deflate's cheaper level);
* ``v4 zstd 13``: version 4 exactly as the build writes it (``format.make_dictionary`` and
  ``format.with_dictionary``);
* ``zstd N``: the same trained dictionary at other levels (``--zstd-levels``).

Per codec: row bytes per fact (bodies and 14-byte headers; keys and PostgreSQL's overhead
are not included: bench_e2e measures the loaded index), the seconds to compress every row,
and MB/s of uncompressed body. Then ``decode_fragment`` of ``--rows`` leaf-weighted rows as
version 3 and as version 4 rows, best of 3 per row, ``--rounds`` alternating rounds (the
spread between rounds on a shared VM is as large as the difference).

Run: .venv/bin/python bench/bench_row_codecs.py [--stage DIR] [--facts N] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import struct
import time
import zlib
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow.parquet as pq
import zstandard

from refactx_index.tree import format as fmt
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_STAGE = ROOT / "build" / "bench_e2e" / "build-local2" / "wikidata" / "bench2" / "prefix_rows" / "qwen2.5"
HEADER = 14
V3_DICTIONARY_BYTES = 32 * 1024
V3_PIECE_BYTES = 1024


def plain_bodies(nodes: list[bytes], dictionary: fmt.PresetDictionary | None) -> list[bytes]:
    """The uncompressed body of every stored row (version 3 or 4, as the stage wrote them)."""
    out = []
    for node in nodes:
        body, flags = node[HEADER:], node[1]
        if flags & 4:
            body = dictionary.decompressor().decompress(body)
        elif flags & 2:
            inflater = zlib.decompressobj(-15, dictionary.data)
            body = inflater.decompress(body) + inflater.flush()
        elif flags & 1:
            body = zlib.decompress(body)
        out.append(body)
    return out


def plain_row(node: bytes, body: bytes) -> bytes:
    """The row written without a dictionary (as the stage encodes it before the dictionary pass)."""
    head = bytes([fmt.FORMAT_VERSION, 0]) + node[2:10]
    return head + struct.pack("<I", zlib.crc32(body, zlib.crc32(head))) + body


def version3_dictionary(prefixes: list[bytes], bodies: list[bytes]) -> fmt.PresetDictionary:
    """Version 3's dictionary of these rows, made as its ``make_dictionary`` made it."""
    order = sorted(range(len(bodies)), key=lambda i: fmt.dictionary_sample_order(prefixes[i]))
    pieces, size = [], 0
    for i in order[: fmt.DICTIONARY_SAMPLE_ROWS]:
        piece = bodies[i][:V3_PIECE_BYTES][: V3_DICTIONARY_BYTES - size]
        pieces.append(piece)
        size += len(piece)
        if size >= V3_DICTIONARY_BYTES:
            break
    return fmt.PresetDictionary(b"".join(pieces))


def deflate_rows(nodes: list[bytes], bodies: list[bytes], dictionary: fmt.PresetDictionary,
                 level: int) -> list[bytes]:
    """Version 3 rows: raw deflate against ``dictionary`` where smaller, the crc32 seeded as
    version 3 seeded it."""
    out = []
    for node, body in zip(nodes, bodies):
        deflater = zlib.compressobj(level, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, dictionary.data)
        packed = deflater.compress(body) + deflater.flush()
        if len(body) >= 16 and len(packed) < len(body):
            head = bytes([3, 2]) + node[2:10]
            out.append(head + struct.pack("<I", zlib.crc32(packed, zlib.crc32(head, dictionary.crc))) + packed)
        else:
            head = bytes([3, 0]) + node[2:10]
            out.append(head + struct.pack("<I", zlib.crc32(body, zlib.crc32(head))) + body)
    return out


def zstd_sizes(bodies: list[bytes], dictionary: fmt.PresetDictionary, level: int) -> int:
    """Row bytes with the version 4 dictionary at another zstd level (bodies only; a row that
    would not shrink stays plain, as the encoder does)."""
    params = zstandard.ZstdCompressionParameters.from_level(
        level, format=zstandard.FORMAT_ZSTD1_MAGICLESS, write_checksum=False,
        write_content_size=True, write_dict_id=False)
    compressor = zstandard.ZstdCompressor(dict_data=zstandard.ZstdCompressionDict(dictionary.data),
                                          compression_params=params)
    return sum(HEADER + min(len(body), len(compressor.compress(body))) for body in bodies)


def timed(fn: Callable[[], object]) -> tuple[object, float]:
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def decode_times(rows: list[bytes], picks: np.ndarray, version: int,
                 dictionary: fmt.PresetDictionary) -> dict[str, float]:
    samples = []
    for i in picks:
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            fmt.decode_fragment(rows[i], version, dictionary)
            best = min(best, time.perf_counter() - started)
        samples.append(best * 1e6)
    a = np.array(samples)
    return {"mean_us": float(a.mean()), "p50_us": float(np.percentile(a, 50)),
            "p90_us": float(np.percentile(a, 90)), "p99_us": float(np.percentile(a, 99))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", type=Path, default=DEFAULT_STAGE,
                        help="a prefix rows stage's output folder for one vocabulary (rows/ and dictionary.bin)")
    parser.add_argument("--facts", type=int, default=None,
                        help="distinct facts of the build (default: from the stage's counts.json)")
    parser.add_argument("--zstd-levels", default="9,15", help="other zstd levels to compress with")
    parser.add_argument("--rows", type=int, default=600, help="leaf-weighted rows decoded per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    stage = args.stage
    if not (stage / "rows").exists():
        parser.error(f"{stage}/rows does not exist: run bench/bench_e2e.py first, or pass --stage")
    facts = args.facts or json.loads((stage / "counts.json").read_text())["distinct_facts"]
    stored = fmt.PresetDictionary((stage / "dictionary.bin").read_bytes()) if (stage / "dictionary.bin").exists() else None
    table = pq.read_table(stage / "rows", columns=["prefix", "node"])
    prefixes = [bytes(p) for p in table.column("prefix").to_pylist()]
    nodes = [bytes(n) for n in table.column("node").to_pylist()]
    bodies = plain_bodies(nodes, stored)
    raw = sum(map(len, bodies))
    print(f"{len(nodes):,} rows, {facts:,} facts, {raw / facts:.2f} B/fact of uncompressed bodies", flush=True)

    codecs: list[dict] = []

    def report(name: str, total: int, seconds: float) -> None:
        codecs.append({"codec": name, "bytes_per_fact": total / facts, "compress_s": seconds,
                       "mb_per_s": raw / seconds / 1e6})
        print(f"  {name:14s} {total / facts:6.2f} B/fact  compress {seconds:6.1f} s  ({raw / seconds / 1e6:5.1f} MB/s)",
              flush=True)

    d3, _ = timed(lambda: version3_dictionary(prefixes, bodies))
    v3, s = timed(lambda: deflate_rows(nodes, bodies, d3, 9))
    report("v3 deflate 9", sum(map(len, v3)), s)
    d6rows, s = timed(lambda: deflate_rows(nodes, bodies, d3, 6))
    report("deflate 6", sum(map(len, d6rows)), s)
    del d6rows
    plain = [plain_row(node, body) for node, body in zip(nodes, bodies)]
    d4, train_s = timed(lambda: fmt.make_dictionary(zip(prefixes, plain)))
    v4, s = timed(lambda: [fmt.with_dictionary(row, d4) for row in plain])
    report(f"v4 zstd {fmt.DICTIONARY_LEVEL}", sum(map(len, v4)), s)
    print(f"  (v4's dictionary: {len(d4.data):,} bytes, trained in {train_s:.1f} s)", flush=True)
    for level in (int(x) for x in args.zstd_levels.split(",") if x):
        total, s = timed(lambda: zstd_sizes(bodies, d4, level))
        report(f"zstd {level}", total, s)

    leaves = np.array([float(fmt.decode_fragment(row, 4, d4).leaves[0]) for row in v4])
    picks = np.random.default_rng(0).choice(len(v4), size=args.rows, p=leaves / leaves.sum())
    rounds = []
    for r in range(args.rounds):
        pair = {"v3": decode_times(v3, picks, 3, d3), "v4": decode_times(v4, picks, 4, d4)}
        rounds.append(pair)
        print(f"  decode round {r + 1}: " + "; ".join(
            f"{k} mean {v['mean_us']:.1f} µs, p90 {v['p90_us']:.0f}, p99 {v['p99_us']:.0f}" for k, v in pair.items()),
            flush=True)
    if args.json:
        args.json.write_text(json.dumps({"stage": str(stage), "rows": len(nodes), "facts": facts,
                                         "raw_bytes_per_fact": raw / facts, "dictionary_bytes": len(d4.data),
                                         "train_s": train_s, "codecs": codecs, "decode_rounds": rounds},
                                        indent=1) + "\n")
        print(f"figures: {args.json}")


if __name__ == "__main__":
    main()
