"""Fixtures of the model tests: tokenizers trained once per module."""

import random
from pathlib import Path

import pytest

from tests.models.tokenizer_helpers import (
    CHATML,
    PAD_ADDED_TOKEN,
    SPECIALS,
    WORDS,
    ids_of,
    make_hf_dir,
    train_sp,
)


@pytest.fixture(scope="module")
def bpe_json(tmp_path_factory) -> Path:
    """A tiny byte-level BPE trained on generated sentences, saved as tokenizer.json."""
    from tokenizers import Tokenizer as RawTokenizer
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    rng = random.Random(0)
    sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 10))) for _ in range(50)]
    tok = RawTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(sentences, trainer)
    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def chatml_dir(tmp_path_factory, bpe_json) -> Path:
    im_end, eot = ids_of(bpe_json, "<|im_end|>", "<|endoftext|>")
    return make_hf_dir(
        tmp_path_factory.mktemp("chatml"),
        bpe_json,
        {"eos_token": "<|im_end|>", "pad_token": PAD_ADDED_TOKEN, "chat_template": CHATML},
        generation_config__json={"eos_token_id": [im_end, eot], "pad_token_id": eot},
    )


@pytest.fixture(scope="module")
def chatml_jinja_dir(tmp_path_factory, bpe_json) -> Path:
    """Template only in chat_template.jinja; tokenizer_config holds a decoy that must lose."""
    return make_hf_dir(
        tmp_path_factory.mktemp("chatml_jinja"),
        bpe_json,
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": "DECOY {{ messages }}"},
        chat_template__jinja=CHATML,
    )


@pytest.fixture(scope="module")
def auto_tokenizer():
    transformers = pytest.importorskip("transformers")
    return lambda path: transformers.AutoTokenizer.from_pretrained(str(path))


@pytest.fixture(scope="module")
def sp_bytes() -> bytes:
    return train_sp("bpe", pad_id=3, control_symbols=["<ctl>"])


# ----------------------------------------------------------------------------- HF backend vs transformers
