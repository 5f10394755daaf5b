"""SentencePiece backend, backend selection and error handling."""


import pytest

from models.tokenizer import HFTokenizer, SentencePieceTokenizer, load_tokenizer
from tests.models.tokenizer_helpers import TEXTS, _write_json, make_hf_dir, train_sp


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_sentencepiece_matches_processor(tmp_path, model_type):
    import sentencepiece as spm

    vocab_size = {"bpe": 100, "unigram": 50}[model_type]
    data = train_sp(model_type, vocab_size)
    (tmp_path / "tokenizer.model").write_bytes(data)
    tok, sp = load_tokenizer(tmp_path), spm.SentencePieceProcessor(model_proto=data)
    assert isinstance(tok, SentencePieceTokenizer) and tok.vocab_size == sp.get_piece_size() == vocab_size
    assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.eos_ids) == (sp.bos_id(), sp.eos_id(), None, (sp.eos_id(),))
    for text in TEXTS:
        plain = tok.encode(text, add_special_tokens=False)
        assert plain == sp.encode(text)
        assert tok.encode(text) == [sp.bos_id()] + plain  # add_bos_token defaults to True, no EOS
        assert tok.decode(tok.encode(text)) == sp.decode(plain)
    assert tok.encode_batch(["hello world", ""]) == [tok.encode("hello world"), [sp.bos_id()]]
    assert tok.decode(tok.encode("hello world") + [sp.eos_id()], skip_special_tokens=False) == "<s>hello world</s>"
    assert tok.token_to_id("<s>") == sp.bos_id() and tok.token_to_id("no-such-piece") is None
    assert tok.token_to_id("<unk>") == sp.unk_id() and tok.id_to_token(vocab_size) is None
    assert tok.id_to_token(sp.eos_id()) == "</s>"


def test_sentencepiece_special_token_rules(tmp_path, sp_bytes):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=sp_bytes)
    (tmp_path / "spiece.model").write_bytes(sp_bytes)  # any single *.model file
    tok = load_tokenizer(tmp_path)
    assert tok.pad_id == sp.pad_id() == 3 and tok.id_to_token(3) == "<pad>"
    body = sp.encode("hello world")
    assert tok.decode(body + [3, 3]) == "hello world"
    ctl = sp.piece_to_id("<ctl>")
    assert sp.is_control(ctl) and tok.token_to_id("<ctl>") == ctl
    assert tok.decode([ctl] + body) == "hello world"
    assert tok.decode([ctl] + body + [3], skip_special_tokens=False) == "<ctl>hello world<pad>"

    _write_json(tmp_path / "tokenizer_config.json", {"add_bos_token": False, "add_eos_token": True})
    _write_json(tmp_path / "generation_config.json", {"eos_token_id": [sp.eos_id(), 7]})
    tok = load_tokenizer(tmp_path)
    assert tok.encode("hello world") == body + [sp.eos_id()]
    assert tok.encode("hello world", add_special_tokens=False) == body
    assert tok.eos_ids == (sp.eos_id(), 7)

    piece = sp.id_to_piece(10)
    _write_json(tmp_path / "tokenizer_config.json", {"eos_token": piece, "bos_token": {"content": "</s>"}})
    tok = load_tokenizer(tmp_path)
    assert (tok.eos_id, tok.bos_id) == (10, sp.eos_id()) and not sp.is_control(10)
    assert tok.encode("hello world") == [sp.eos_id()] + body
    assert tok.decode(body + [10]) == "hello world"  # a configured special piece is skipped like control ones
    assert tok.decode(body + [10], skip_special_tokens=False) == f"hello world{piece}"
    assert not tok.has_chat_template


def test_sentencepiece_without_bos_in_model(tmp_path):
    (tmp_path / "tokenizer.model").write_bytes(train_sp("unigram", 50, bos_id=-1, eos_id=1, unk_id=0))
    tok = load_tokenizer(tmp_path)
    assert tok.bos_id is None and tok.eos_id == 1
    assert tok.encode("hello") == tok.encode("hello", add_special_tokens=False)


def test_prefers_tokenizer_json(tmp_path, bpe_json, sp_bytes):
    path = make_hf_dir(tmp_path / "both", bpe_json)
    (path / "tokenizer.model").write_bytes(sp_bytes)
    assert isinstance(load_tokenizer(path), HFTokenizer)


# ----------------------------------------------------------------------------- errors


def test_missing_directory(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match="nope") as info:
        load_tokenizer(missing)
    assert "tokenizer.json" in str(info.value)
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileNotFoundError, match="file"):
        load_tokenizer(tmp_path / "file")


def test_empty_directory(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text("{}")
    with pytest.raises(FileNotFoundError) as info:
        load_tokenizer(tmp_path)
    msg = str(info.value)
    assert str(tmp_path) in msg and "tokenizer.json" in msg and ".model" in msg


def test_corrupt_files(tmp_path, bpe_json):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": ')
    with pytest.raises(ValueError, match="tokenizer.json"):
        load_tokenizer(tmp_path / "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "tokenizer.model").write_bytes(b"\x00not a protobuf\xff" * 8)
    with pytest.raises(ValueError, match="tokenizer.model"):
        load_tokenizer(tmp_path / "b")
    path = make_hf_dir(tmp_path / "c", bpe_json)
    (path / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="tokenizer_config.json"):
        load_tokenizer(path)


def test_ambiguous_sentencepiece_models(tmp_path, sp_bytes):
    (tmp_path / "a.model").write_bytes(sp_bytes)
    (tmp_path / "b.model").write_bytes(sp_bytes)
    with pytest.raises(ValueError, match="a.model"):
        load_tokenizer(tmp_path)


def test_special_token_not_in_vocab(tmp_path, bpe_json, sp_bytes):
    path = make_hf_dir(tmp_path / "hf", bpe_json, {"eos_token": "<|eot_id|>"})
    with pytest.raises(ValueError, match=r"<\|eot_id\|>") as info:
        load_tokenizer(path)
    assert "eos_token" in str(info.value)
    (tmp_path / "sp").mkdir()
    (tmp_path / "sp" / "tokenizer.model").write_bytes(sp_bytes)
    _write_json(tmp_path / "sp" / "special_tokens_map.json", {"pad_token": "[PAD]"})
    with pytest.raises(ValueError, match=r"pad_token '\[PAD\]'"):
        load_tokenizer(tmp_path / "sp")


def test_no_chat_template(tmp_path, bpe_json):
    path = make_hf_dir(tmp_path / "plain", bpe_json, {"chat_template": [{"name": "tool_use", "template": "x"}]})
    tok = load_tokenizer(path)
    assert not tok.has_chat_template
    with pytest.raises(ValueError, match="no chat template") as info:
        tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert str(path) in str(info.value)
