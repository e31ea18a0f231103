"""One Vocabulary value: a model directory's end ids (config and generation config) and logits
width, settled once per process; one check of an index against a vocabulary, whatever form
the vocabulary is given in; the constraint built from it; and no tokenizer typed as anything."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

from refactx_index.engines.core import FactConstraint
from refactx_index.errors import IndexNotFound, UnknownIndex, VocabularyMismatch
from refactx_index.tree.index import check_vocabulary
from refactx_index.tree.memory import MemoryTreeIndex
from refactx_index.vocab import as_vocabulary, open_model_vocabulary, open_tokenizer

from ..conftest import ROOT, tokenizer_dir
from .test_generation import EOS, corporate_facts

torch = pytest.importorskip("torch")

PERIOD = 13  # gpt2's "."


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A model directory of gpt2's tokenizer whose generation config adds an end id the base
    config lacks, and whose embedding is padded beyond the tokenizer."""
    directory = tmp_path_factory.mktemp("model")
    shutil.copy(tokenizer_dir("gpt2") / "tokenizer.json", directory / "tokenizer.json")
    (directory / "config.json").write_text(json.dumps({"eos_token_id": EOS, "vocab_size": 50304}))
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [EOS, PERIOD]}))
    return directory


@pytest.fixture(scope="module")
def index():
    return MemoryTreeIndex.from_facts(corporate_facts(), str(tokenizer_dir("gpt2")), threshold=2)


def test_a_model_directory_gives_every_end_id_and_the_logits_width_once_per_process(model_dir):
    vocabulary = open_model_vocabulary(model_dir)
    assert vocabulary.eos_ids == (EOS, PERIOD)
    assert (vocabulary.vocab_size, vocabulary.logits_size) == (50257, 50304)
    assert open_model_vocabulary(str(model_dir)) is vocabulary  # settled: not loaded again
    assert as_vocabulary(model_dir) is vocabulary
    assert vocabulary.tokenizer() is open_model_vocabulary(model_dir).tokenizer()
    assert vocabulary.encodes_by_pieces  # gpt2's byte-level regex: facts encoded by pieces


def test_one_check_takes_a_vocabulary_a_path_a_tokenizer_or_a_name(index, model_dir):
    gpt2 = open_tokenizer(str(tokenizer_dir("gpt2")))
    for same in (open_model_vocabulary(model_dir), str(tokenizer_dir("gpt2")), gpt2, "gpt2"):
        check_vocabulary(index, same)
    llama = open_tokenizer(str(tokenizer_dir("llama3")))
    for other in (str(tokenizer_dir("llama3")), llama, as_vocabulary(llama), "llama3"):
        with pytest.raises(VocabularyMismatch, match="index 'memory' was built for vocabulary 'gpt2'"):
            check_vocabulary(index, other)


def test_the_constraint_of_a_vocabulary_ends_a_refused_row_on_either_end_id(index, model_dir):
    constraint = FactConstraint.for_vocabulary({"corporate": index}, open_model_vocabulary(model_dir))
    constraint.refuse(0)
    logits = torch.zeros(1, 50304)
    constraint.apply(logits, np.asarray([0]))
    assert torch.isfinite(logits[0]).nonzero().flatten().tolist() == [PERIOD, EOS]
    with pytest.raises(UnknownIndex, match=r"unknown index 'nosuch'; this engine serves \['corporate'\]") as caught:
        constraint.add(1, "nosuch", [1, 2])
    assert isinstance(caught.value, IndexNotFound) and constraint.busy()  # slot 0 still refused


def test_no_runtime_parameter_takes_a_tokenizer_of_any_type():
    found = subprocess.run(["grep", "-rn", "tokenizer: object\\|tokenizer: Any", "runtime"], cwd=ROOT,
                           capture_output=True, text=True)
    assert found.returncode == 1 and not found.stdout, found.stdout
