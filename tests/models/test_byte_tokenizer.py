"""The byte tokenizer of the embedded default: ids, round trips, transformers."""

import pytest

import models
from models import byte_tokenizer

TEXTS = ["Using the numbers 3, 5, 2, make 16. <answer>(3 + 5) * 2</answer>",
         "", " leading and trailing spaces ", "tabs\tand\nnewlines", "café 東京 🙂", "\x00\x7f\xff"]


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return byte_tokenizer.save_byte_tokenizer(tmp_path_factory.mktemp("byte_tok"))


def test_ids_are_bytes_and_specials(tok_dir):
    tok = models.load_tokenizer(tok_dir)
    assert tok.vocab_size == 259
    assert (tok.pad_id, tok.bos_id, tok.eos_ids) == (256, 257, (258,))
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False)
        assert ids == list(text.encode("utf-8"))
        assert tok.decode(ids) == text
    assert tok.decode([72, 105, 258, 256]) == "Hi"  # specials skipped
    assert len(set(byte_tokenizer.byte_alphabet())) == 256
    # the strings encode() matches as specials in any text
    assert tok.special_tokens == ("<pad>", "<bos>", "<eos>")
    assert [tok.encode(s, add_special_tokens=False) for s in tok.special_tokens] == [
        [256], [257], [258]]


def test_transformers_agrees(tok_dir):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(tok_dir))
    ours = models.load_tokenizer(tok_dir)
    for text in TEXTS:
        assert hf.encode(text, add_special_tokens=False) == ours.encode(text,
                                                                        add_special_tokens=False)
        assert hf.decode(hf.encode(text, add_special_tokens=False)) == text
    assert hf.eos_token_id == 258 and hf.pad_token_id == 256
