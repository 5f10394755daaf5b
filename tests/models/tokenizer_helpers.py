"""Tokenizers trained on the fly for the tokenizer tests (fixtures: conftest.py).

Every tokenizer is built in the test from generated text (no network, no downloaded files). The HF backend
is checked id-for-id and string-for-string against ``transformers.AutoTokenizer`` on the same directory;
the SentencePiece backend against ``sentencepiece.SentencePieceProcessor`` directly.
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


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
