"""Tests for models/tokenizer.py.

Every tokenizer is built in the test from generated text (no network, no downloaded files). The HF backend
is checked id-for-id and string-for-string against ``transformers.AutoTokenizer`` on the same directory;
the SentencePiece backend against ``sentencepiece.SentencePieceProcessor`` directly.
"""

from __future__ import annotations

import datetime
import io
import json
import os
import random
import shutil
from pathlib import Path

import jinja2
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from models.tokenizer import HFTokenizer, SentencePieceTokenizer, Tokenizer, load_tokenizer  # noqa: E402

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
WORDS = (
    "the quick brown fox jumps over lazy dog hello world policy reward model token gradient café naïve "
    "東京 数字 ελληνικά 0 1 2 3 42 1234 3.14 !? , ."
).split()

# AddedToken-style dict, as transformers serialises it in tokenizer_config.json.
PAD_ADDED_TOKEN = {"__type": "AddedToken", "content": "<|endoftext|>", "lstrip": False, "normalized": False,
                   "rstrip": False, "single_word": False, "special": True}

CHATML = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}"
    "{{- '\\n\\n# Tools\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools><|im_end|>\\n' }}"
    "{%- elif messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if message.role not in ['system', 'user', 'assistant'] %}"
    "{{- raise_exception('Unknown role: ' + message.role) }}{%- endif %}\n"
    "    {%- if message.role == 'system' and tools %}{%- continue %}{%- endif %}\n"
    "    {{- '<|im_start|>' + message.role + '\\n' + message.content }}\n"
    "    {%- if message.tool_calls is defined %}{{- '\\n[tool_calls]' }}{%- endif %}\n"
    "    {{- '<|im_end|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

TEXTS = [
    "",
    " ",
    "a",
    "hello world",
    "Hello World, HELLO!",
    "  leading spaces",
    "trailing spaces   ",
    "multiple     spaces\tand\ttabs",
    "\n\nnew\nlines\n\n\n",
    "digits 0123456789 and 3.14159",
    "12345678901234567890",
    "café naïve 東京 数字",
    "emoji 🤖🎉 and ελληνικά, русский",
    "combining e\u0301 and zero\u200bwidth",
    "<|endoftext|>",
    "text<|endoftext|>more text",
    "<|im_start|>user\nhi there<|im_end|>\n",
    "unseen words: xylophone quartz",
    "punctuation!? ... ,;: --- ()[]{}",
    "the quick brown fox jumps over the lazy dog",
]

CONVERSATIONS = [
    [{"role": "user", "content": "hello"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
    [
        {"role": "system", "content": "You answer in 東京 style."},
        {"role": "user", "content": "hi  there\n"},
        {"role": "assistant", "content": "hello café", "tool_calls": None},
        {"role": "user", "content": "digits 1234"},
    ],
    [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y", "tool_calls": [{"name": "f"}]}],
]


# ----------------------------------------------------------------------------- fixtures / builders


@pytest.fixture(scope="module")
def bpe_json(tmp_path_factory) -> Path:
    """A tiny byte-level BPE trained on generated sentences, saved as tokenizer.json."""
    from tokenizers import Tokenizer as RawTokenizer, decoders, models, pre_tokenizers, processors, trainers

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


def _write_json(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")


def make_hf_dir(root: Path, tokenizer_json: Path, config: dict | None = None, **files: object) -> Path:
    """Directory with tokenizer.json, a tokenizer_config.json and extra files (dicts -> JSON, str -> text)."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(tokenizer_json, root / "tokenizer.json")
    _write_json(root / "tokenizer_config.json", {"tokenizer_class": "PreTrainedTokenizerFast", **(config or {})})
    for name, content in files.items():
        name = name.replace("__", ".")
        if isinstance(content, str):
            (root / name).write_text(content, encoding="utf-8")
        else:
            _write_json(root / name, content)
    return root


def ids_of(tokenizer_json: Path, *tokens: str) -> list[int]:
    vocab = json.loads(tokenizer_json.read_text(encoding="utf-8"))["model"]["vocab"]
    added = {t["content"]: t["id"] for t in json.loads(tokenizer_json.read_text(encoding="utf-8"))["added_tokens"]}
    return [added.get(t, vocab.get(t)) for t in tokens]


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


def train_sp(model_type: str = "bpe", vocab_size: int = 100, **kwargs: object) -> bytes:
    spm = pytest.importorskip("sentencepiece")
    rng = random.Random(1)
    sentences = [" ".join(rng.choice(WORDS[:20]) for _ in range(rng.randint(3, 9))) for _ in range(200)]
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=buf,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=1.0,
        minloglevel=2,
        **kwargs,
    )
    return buf.getvalue()


@pytest.fixture(scope="module")
def sp_bytes() -> bytes:
    return train_sp("bpe", pad_id=3, control_symbols=["<ctl>"])


# ----------------------------------------------------------------------------- HF backend vs transformers


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
    text = tok.apply_chat_template(msgs, extra=7)
    assert text == ref.apply_chat_template(msgs, tokenize=False, extra=7)
    assert text == f"[|<|im_end|>||False|7]{datetime.datetime.now().year}\nX\nY"


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
    from tokenizers import Tokenizer as RawTokenizer, processors

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
