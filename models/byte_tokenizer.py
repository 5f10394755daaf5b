"""A byte-level tokenizer for the embedded default: no downloads, no training.

`save_byte_tokenizer(path)` writes a Hugging Face tokenizer directory
(`tokenizer.json` + `tokenizer_config.json`) whose vocabulary is the 256
bytes (ids 0-255, GPT-2's byte-to-unicode alphabet, no merges) followed by
`<pad>`, `<bos>` and `<eos>` (ids 256, 257, 258). It loads with
`models.load_tokenizer` like any checkpoint's tokenizer, and with
`transformers.AutoTokenizer`. Any text round-trips exactly, and every id
fits the `tiny` preset's 512-entry vocabulary.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

SPECIALS = ("<pad>", "<bos>", "<eos>")
PAD_ID, BOS_ID, EOS_ID = 256, 257, 258


def byte_alphabet() -> list[str]:
    """The printable character standing for each byte 0..255 (GPT-2's mapping).

    Printable Latin-1 bytes stand for themselves; the other bytes are mapped,
    in order, to code points from 256 up.
    """
    keep = (set(range(ord("!"), ord("~") + 1)) | set(range(ord("¡"), ord("¬") + 1))
            | set(range(ord("®"), ord("ÿ") + 1)))
    chars, shift = [], 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + shift))
            shift += 1
    return chars


def save_byte_tokenizer(path: str | os.PathLike) -> Path:
    """Writes the byte tokenizer into directory `path` (created) and returns it."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    vocab = {char: i for i, char in enumerate(byte_alphabet())}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIALS))
    tokenizer.save(str(out / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>",
              "bos_token": "<bos>", "eos_token": "<eos>", "add_bos_token": False,
              "model_max_length": 1 << 20}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return out
