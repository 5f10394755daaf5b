"""HF tokenizer.json backend and chat templates, compared with transformers."""

import datetime

import jinja2
import pytest

from models.tokenizer import HFTokenizer, Tokenizer, load_tokenizer
from tests.models.tokenizer_helpers import (
    CONVERSATIONS,
    SPECIALS,
    TEXTS,
    WORDS,
    ids_of,
    make_hf_dir,
)


def test_hf_backend_basics(chatml_dir, auto_tokenizer):
    tok, ref = load_tokenizer(chatml_dir), auto_tokenizer(chatml_dir)
    assert isinstance(tok, HFTokenizer) and isinstance(tok, Tokenizer)
    assert tok.vocab_size == len(ref) == 300
    assert tok.eos_id == ref.eos_token_id == ref.convert_tokens_to_ids("<|im_end|>")
    assert tok.pad_id == ref.pad_token_id == ref.convert_tokens_to_ids("<|endoftext|>")
    assert tok.bos_id is None and ref.bos_token_id is None
    assert tok.eos_ids == (tok.eos_id, tok.pad_id)  # primary first, then generation_config extras, deduplicated
    assert tok.has_chat_template


@pytest.mark.parametrize("add_special_tokens", [True, False])
def test_hf_encode_matches_transformers(chatml_dir, auto_tokenizer, add_special_tokens):
    tok, ref = load_tokenizer(chatml_dir), auto_tokenizer(chatml_dir)
    for text in TEXTS:
        assert tok.encode(text, add_special_tokens=add_special_tokens) == ref.encode(
            text, add_special_tokens=add_special_tokens
        ), text
    assert tok.encode_batch(TEXTS, add_special_tokens=add_special_tokens) == [
        ref.encode(t, add_special_tokens=add_special_tokens) for t in TEXTS
    ]


@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_hf_decode_matches_transformers(chatml_dir, auto_tokenizer, skip_special_tokens):
    tok, ref = load_tokenizer(chatml_dir), auto_tokenizer(chatml_dir)
    for text in TEXTS:
        ids = ref.encode(text)
        assert tok.decode(ids, skip_special_tokens) == ref.decode(ids, skip_special_tokens=skip_special_tokens)
        if not skip_special_tokens:
            assert tok.decode(ids, skip_special_tokens=False) == text  # byte-level BPE is lossless
    assert "<|im_end|>" not in tok.decode(tok.encode("a<|im_end|>b"))
    assert tok.decode(tok.encode("a<|im_end|>b"), skip_special_tokens=False) == "a<|im_end|>b"


def test_hf_token_lookup(chatml_dir, auto_tokenizer):
    tok, ref = load_tokenizer(chatml_dir), auto_tokenizer(chatml_dir)
    for token in SPECIALS + ["h", "Ġ"]:
        assert tok.token_to_id(token) == ref.convert_tokens_to_ids(token)
        assert tok.id_to_token(tok.token_to_id(token)) == token
    assert tok.token_to_id("definitely-not-a-token") is None
    assert tok.id_to_token(tok.vocab_size) is None and tok.id_to_token(-1) is None


@pytest.mark.parametrize("which", ["chatml_dir", "chatml_jinja_dir"])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_matches_transformers(request, auto_tokenizer, which, add_generation_prompt):
    path = request.getfixturevalue(which)
    tok, ref = load_tokenizer(path), auto_tokenizer(path)
    for messages in CONVERSATIONS:
        text = tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)
        assert text == ref.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False)
        assert "DECOY" not in text and text.startswith("<|im_start|>system\n")
        assert text.endswith("<|im_start|>assistant\n") == add_generation_prompt
        ids = tok.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True)
        assert ids == ref.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=False
        )
        assert ids == tok.encode(text, add_special_tokens=False) and tok.eos_id in ids
    # None-valued keys are dropped (the template tests `is defined`), a real list is kept.
    assert "[tool_calls]" not in tok.apply_chat_template(CONVERSATIONS[2])
    assert "[tool_calls]" in tok.apply_chat_template(CONVERSATIONS[3])


def test_chat_template_tools_tojson_and_loopcontrols(chatml_dir, auto_tokenizer):
    tok, ref = load_tokenizer(chatml_dir), auto_tokenizer(chatml_dir)
    function = {"name": "météo", "description": "<b>東京</b> & co", "parameters": {"x": 1}}
    tools = [{"type": "function", "function": function}]
    messages = CONVERSATIONS[1]
    text = tok.apply_chat_template(messages, tools=tools)
    assert text == ref.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    assert '"name": "météo"' in text and "<b>東京</b> & co" in text  # no ascii / HTML escaping
    assert text.count("Be brief.") == 1  # system message merged into the tools header, then `continue`d


def test_chat_template_raise_exception(chatml_dir, auto_tokenizer):
    tok, ref = load_tokenizer(chatml_dir), auto_tokenizer(chatml_dir)
    bad = [{"role": "wizard", "content": "x"}]
    with pytest.raises(jinja2.TemplateError, match="Unknown role: wizard"):
        ref.apply_chat_template(bad, tokenize=False)
    with pytest.raises(ValueError, match="Unknown role: wizard"):
        tok.apply_chat_template(bad)
    with pytest.raises(jinja2.TemplateError, match="Unknown role: wizard"):
        tok.apply_chat_template(bad)


def test_chat_template_special_token_variables_and_kwargs(tmp_path, bpe_json, auto_tokenizer):
    template = "[{{ bos_token }}|{{ eos_token }}|{{ pad_token }}|{{ bos_token is defined }}|{{ extra }}]"
    template += "{{ strftime_now('%Y') }}\n    {% if true %}\nX\n    {% endif %}\nY"  # trim_blocks + lstrip_blocks
    path = make_hf_dir(tmp_path / "vars", bpe_json, {"eos_token": "<|im_end|>", "chat_template": template})
    tok, ref = load_tokenizer(path), auto_tokenizer(path)
    msgs = [{"role": "user", "content": "x"}]
    before = datetime.datetime.now().year
    text = tok.apply_chat_template(msgs, extra=7)
    ref_text = ref.apply_chat_template(msgs, tokenize=False, extra=7)
    after = datetime.datetime.now().year  # != before only across New Year's midnight
    want = {f"[|<|im_end|>||False|7]{year}\nX\nY" for year in (before, after)}
    assert text in want and ref_text in want
    assert text == ref_text or before != after


def test_chat_template_list_form_uses_default(tmp_path, bpe_json):
    templates = [
        {"name": "tool_use", "template": "TOOLS"},
        {"name": "default", "template": "DEFAULT {{ messages[0].content }}"},
    ]
    path = make_hf_dir(tmp_path / "list", bpe_json, {"chat_template": templates})
    assert load_tokenizer(path).apply_chat_template([{"role": "user", "content": "hi"}]) == "DEFAULT hi"


@pytest.mark.parametrize("as_dict", [False, True])
def test_special_token_from_plain_vocab_matches_transformers(tmp_path, bpe_json, auto_tokenizer, as_dict):
    """A configured special token that is an ordinary BPE merge becomes an added special token (as in transformers):
    it is split out of words when encoding and dropped by decode(skip_special_tokens=True)."""
    from tokenizers import Tokenizer as RawTokenizer

    raw = RawTokenizer.from_file(str(bpe_json))
    vocab = raw.get_vocab()
    # An ordinary merge strictly inside a training word, which plain BPE does not produce for that word.
    token, word = next(
        (w[i:j], w)
        for w in WORDS
        if w.isascii() and w.isalpha()
        for i in range(1, len(w))
        for j in range(i + 3, len(w) + 1)
        if w[i:j] in vocab and vocab[w[i:j]] not in raw.encode(w).ids
    )
    spec = {"__type": "AddedToken", "content": token, "lstrip": True, "normalized": False} if as_dict else token
    path = make_hf_dir(tmp_path / "plain_special", bpe_json, {"eos_token": spec})
    tok, ref = load_tokenizer(path), auto_tokenizer(path)
    assert tok.eos_id == ref.eos_token_id == ids_of(bpe_json, token)[0] and tok.vocab_size == len(ref) == 300
    texts = [word, f"{word} {token}", f"x{token}y", f"a {token} b", *TEXTS]
    for text in texts:
        ids = tok.encode(text)
        assert ids == ref.encode(text), text
        assert tok.decode(ids) == ref.decode(ids, skip_special_tokens=True)
        assert tok.decode(ids, skip_special_tokens=False) == ref.decode(ids, skip_special_tokens=False)
    assert tok.eos_id in tok.encode(word) and token not in tok.decode(tok.encode(word))


def test_template_processing_bos(tmp_path, bpe_json, auto_tokenizer):
    from tokenizers import Tokenizer as RawTokenizer
    from tokenizers import processors

    raw = RawTokenizer.from_file(str(bpe_json))
    bos = raw.token_to_id("<|endoftext|>")
    raw.post_processor = processors.TemplateProcessing(
        single="<|endoftext|> $A", pair="<|endoftext|> $A $B", special_tokens=[("<|endoftext|>", bos)]
    )
    raw.save(str(tmp_path / "bos.json"))
    config = {"bos_token": "<|endoftext|>", "chat_template": "{{ bos_token }}{{ messages[0].content }}"}
    path = make_hf_dir(tmp_path / "bos", tmp_path / "bos.json", config)
    tok, ref = load_tokenizer(path), auto_tokenizer(path)
    assert tok.bos_id == ref.bos_token_id == bos
    msgs = [{"role": "user", "content": "hello"}]
    chat_ids = tok.apply_chat_template(msgs, tokenize=True)  # the template's BOS only, not a second one
    assert chat_ids == ref.apply_chat_template(msgs, tokenize=True, return_dict=False) == tok.encode("hello")
    for text in TEXTS:
        with_bos, without = tok.encode(text), tok.encode(text, add_special_tokens=False)
        assert with_bos == ref.encode(text) and with_bos[0] == bos and with_bos[1:] == without
        assert without == ref.encode(text, add_special_tokens=False)
    assert tok.decode(tok.encode("hello")) == "hello"


def test_tokenizer_json_padding_not_applied_but_names_pad(tmp_path, bpe_json):
    from tokenizers import Tokenizer as RawTokenizer

    raw = RawTokenizer.from_file(str(bpe_json))
    raw.enable_padding(pad_id=raw.token_to_id("<|endoftext|>"), pad_token="<|endoftext|>", length=64)
    raw.enable_truncation(max_length=3)
    raw.save(str(tmp_path / "pad.json"))
    path = make_hf_dir(tmp_path / "pad", tmp_path / "pad.json")
    tok = load_tokenizer(path)
    assert tok.pad_id == raw.token_to_id("<|endoftext|>")
    batch = tok.encode_batch(["hello world quick brown", "a"])
    assert [len(b) for b in batch] == [len(tok.encode("hello world quick brown")), 1] and len(batch[0]) > 3


def test_special_token_sources_and_fallbacks(tmp_path, bpe_json):
    eot, im_start, im_end = ids_of(bpe_json, *SPECIALS)
    # special_tokens_map.json (dict form) when tokenizer_config has nothing; config.json ids as last resort.
    path = make_hf_dir(
        tmp_path / "stm",
        bpe_json,
        special_tokens_map__json={"eos_token": {"content": "<|im_end|>", "lstrip": False}},
        config__json={"bos_token_id": im_start, "eos_token_id": eot, "pad_token_id": -1},
        generation_config__json={"eos_token_id": eot},
    )
    tok = load_tokenizer(path)
    assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.eos_ids) == (im_start, im_end, None, (im_end, eot))
    # tokenizer_config wins over special_tokens_map; generation_config ids win over config.json.
    path = make_hf_dir(
        tmp_path / "prec",
        bpe_json,
        {"eos_token": "<|endoftext|>"},
        special_tokens_map__json={"eos_token": "<|im_end|>"},
        generation_config__json={"eos_token_id": im_end, "pad_token_id": im_start},
        config__json={"pad_token_id": eot},
    )
    tok = load_tokenizer(path)
    assert (tok.eos_id, tok.pad_id, tok.eos_ids) == (eot, im_start, (eot, im_end))


# ----------------------------------------------------------------------------- SentencePiece backend
