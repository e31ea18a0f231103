"""The model cache joins a GGUF file shipped in chunk packages (Gemma 3 270M) and checks its
sha256 against the one its package states: on the installed chunk files themselves, and on a
temporary copy of them with one byte changed."""

from __future__ import annotations

import hashlib
import logging
import shutil

import pytest

from refactx_index import cli
from refactx_index.errors import ConfigError
from refactx_index.qa import models

GEMMA = models._CHUNKED["gemma3-270m"]


@pytest.fixture(scope="module")
def parts():
    try:
        return [models._package_file("gemma3-270m", package, f"data/{name}") for package, name in GEMMA.parts]
    except ConfigError as exc:  # a machine without the chunk packages (./dev setup installs them)
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def stated() -> str:
    return models._stated_sha256(models._package_file("gemma3-270m", GEMMA.package, "data/SHA256SUMS"),
                                 GEMMA.filename)


def _sha256(path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def test_the_joined_chunks_are_the_file_the_package_states(parts, stated, tmp_path):
    target = models.assemble_chunks(parts, stated, tmp_path / "gguf" / GEMMA.filename)
    assert target.stat().st_size == sum(p.stat().st_size for p in parts)
    assert _sha256(target) == stated
    assert (tmp_path / "gguf" / (GEMMA.filename + ".sha256")).read_text().split()[0] == stated
    assert target.read_bytes()[:4] == b"GGUF"
    assert sorted(p.name for p in target.parent.iterdir()) == [GEMMA.filename, GEMMA.filename + ".sha256"]


def test_a_corrupted_chunk_is_refused_naming_the_expected_and_the_found_hash(parts, stated, tmp_path):
    copies = []
    for part in parts:
        copies.append(tmp_path / "chunks" / part.name)
        copies[-1].parent.mkdir(exist_ok=True)
        shutil.copyfile(part, copies[-1])
    with copies[2].open("r+b") as f:  # one byte of the third chunk, in its middle
        f.seek(copies[2].stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    found = hashlib.sha256()
    for copy in copies:
        found.update(copy.read_bytes())
    target = tmp_path / "cache" / GEMMA.filename
    with pytest.raises(ConfigError) as refused:
        models.assemble_chunks(copies, stated, target)
    message = str(refused.value)
    assert f"expected {stated}" in message and f"sha256 {found.hexdigest()}" in message
    assert str(copies[2]) in message
    assert list(target.parent.iterdir()) == []  # nothing kept: neither the file nor its scratch


def test_the_cache_joins_once_and_later_trusts_its_record(parts, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("REFACTX_MODEL_CACHE", str(tmp_path))
    caplog.set_level(logging.INFO, logger=models.__name__)
    first = models.packaged_gguf("gemma3-270m")
    assert first == tmp_path / "gguf" / GEMMA.filename
    assert sum("joined chunk" in r.getMessage() for r in caplog.records) == len(parts)  # progress, per chunk
    written = first.stat().st_mtime_ns
    caplog.clear()
    assert models.packaged_gguf("gemma3-270m") == first
    assert first.stat().st_mtime_ns == written and not caplog.records  # not joined again
    # a file changed after its check (another size) is joined anew
    with first.open("ab") as f:
        f.write(b"\0")
    models.packaged_gguf("gemma3-270m")
    assert first.stat().st_size == sum(p.stat().st_size for p in parts)
    assert any("joining" in r.getMessage() for r in caplog.records)


def test_the_model_names(parts):
    assert {"smollm2", "smollm2-135m", "gemma3-270m"} <= set(models.MODEL_NAMES)
    assert models.packaged_gguf("smollm2-135m") == models.packaged_gguf("smollm2")
    with pytest.raises(ConfigError, match="gemma3-270m"):
        models.model_directory("gemma3-27b")


def test_the_command_names_every_model():
    named = cli.MODEL_HELP.split(" (packaged)")[0].split(", ")
    assert sorted(named) == sorted(models.MODEL_NAMES)
