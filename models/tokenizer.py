"""Tokenizers for local Hugging Face style checkpoint directories.

``load_tokenizer(path)`` returns a :class:`Tokenizer`: one interface, two backends, :class:`HFTokenizer`
(``tokenizers`` on ``tokenizer.json``, preferred) and :class:`SentencePieceTokenizer` (``sentencepiece`` on
``tokenizer.model`` or the directory's single ``*.model``). The side files transformers writes are resolved
the same way for both, aiming at id-for-id agreement with ``transformers.AutoTokenizer`` without importing it:

* bos/eos/pad strings: ``tokenizer_config.json``, then ``special_tokens_map.json``, then the backend (padding
  token of ``tokenizer.json``; the SentencePiece model's pieces); mapped to ids through the vocabulary (missing
  is an error) and, in the HF backend, registered as special added tokens, as transformers does;
* else ids from ``generation_config.json``, then ``config.json``; ``eos_ids`` = primary eos + every
  ``generation_config.json`` ``eos_token_id``;
* chat template: ``chat_template.jinja``, else ``tokenizer_config.json``; rendered in a jinja2 sandbox set up
  as in transformers, seeing only the bos/eos/pad given as strings.

Deliberate deviations: padding/truncation stored in ``tokenizer.json`` is never applied, special tokens
missing from the vocabulary raise instead of being added, ``clean_up_tokenization_spaces`` is ignored.
"""

from __future__ import annotations

import abc
import datetime
import functools
import json
import os
from pathlib import Path
from typing import Any, Sequence

import jinja2
import jinja2.ext
import tokenizers
from jinja2.sandbox import ImmutableSandboxedEnvironment

from models import extras

__all__ = ["Tokenizer", "HFTokenizer", "SentencePieceTokenizer", "ChatTemplateError", "load_tokenizer"]

_SPECIAL_NAMES = ("bos", "eos", "pad")


class ChatTemplateError(jinja2.TemplateError, ValueError):
    """Raised by a chat template's ``raise_exception(...)`` (both a jinja2 TemplateError and a ValueError)."""


def _read_json(path: Path) -> dict[str, Any]:
    """Read a JSON object from ``path``; ``{}`` if the file is absent, ValueError naming it if corrupt."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"corrupt JSON in {path}: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"corrupt {path}: expected a JSON object, got {type(data).__name__}")
    return data


def _token_content(value: Any) -> str | None:
    """A special token given as a string or as an AddedToken-style dict ``{"content": ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _as_ids(value: Any) -> list[int]:
    """An id field that may be an int or a list of ints; negative / malformed entries are dropped."""
    items = value if isinstance(value, (list, tuple)) else [value]
    return [v for v in items if isinstance(v, int) and not isinstance(v, bool) and v >= 0]


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
) -> str:
    """``tojson`` filter as in transformers: no HTML escaping, unicode kept."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(message)


@functools.lru_cache(maxsize=64)
def _compile_template(source: str) -> jinja2.Template:
    """Compile a chat template once, in a sandbox configured like transformers'."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env.from_string(source)


class Tokenizer(abc.ABC):
    """Backend-independent tokenizer interface (see module docstring for how side files are resolved)."""

    path: Path

    def _init_common(self, path: Path, vocab_file: Path) -> None:
        """Read the side files and resolve special tokens; subclasses call this once the backend is loaded."""
        self.path, self._vocab_file = path, vocab_file
        self._tok_cfg = _read_json(path / "tokenizer_config.json")
        self._stm = _read_json(path / "special_tokens_map.json")
        self._gen_cfg = _read_json(path / "generation_config.json")
        self._model_cfg = _read_json(path / "config.json")
        self._resolve_special_tokens()
        self._chat_template, self._chat_template_origin = self._find_chat_template()

    def _resolve_special_tokens(self) -> None:
        self._tokens: dict[str, str | None] = {}
        self._ids: dict[str, int | None] = {}
        self._special_ids: set[int] = set()  # ids of tokens named by a string: special for decode()
        self._token_specs: dict[str, Any] = {}  # name -> raw value (str or AddedToken-style dict)
        backend = self._backend_special_tokens()
        for name in _SPECIAL_NAMES:
            key, token, source, tid = f"{name}_token", None, None, None
            for fname, cfg in (("tokenizer_config.json", self._tok_cfg), ("special_tokens_map.json", self._stm)):
                token = _token_content(cfg.get(key))
                if token is not None:
                    source, self._token_specs[name] = self.path / fname, cfg[key]
                    break
            if token is None and backend.get(name) is not None:
                token, source = backend[name], self._vocab_file
                self._token_specs[name] = token
            if token is not None:
                tid = self.token_to_id(token)
                if tid is None:
                    raise ValueError(f"{key} {token!r} (from {source}) is not in the vocabulary of {self._vocab_file}")
                self._special_ids.add(tid)
            else:
                for cfg in (self._gen_cfg, self._model_cfg):
                    ids = _as_ids(cfg.get(f"{name}_token_id"))
                    if ids:
                        tid = ids[0]
                        break
            self._tokens[name], self._ids[name] = token, tid
        eos = [self._ids["eos"]] if self._ids["eos"] is not None else []
        self._eos_ids = tuple(dict.fromkeys(eos + _as_ids(self._gen_cfg.get("eos_token_id"))))

    def _find_chat_template(self) -> tuple[str | None, str]:
        jinja_file = self.path / "chat_template.jinja"
        if jinja_file.is_file():
            return jinja_file.read_text(encoding="utf-8"), str(jinja_file)
        origin = str(self.path / "tokenizer_config.json")
        template = self._tok_cfg.get("chat_template")
        if isinstance(template, list):
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        return (template if isinstance(template, str) else None), origin

    def _backend_special_tokens(self) -> dict[str, str]:
        """Special token strings known to the backend file itself (lowest-priority string source)."""
        return {}

    @abc.abstractmethod
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; ``add_special_tokens`` adds BOS/EOS as transformers would."""

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[list[int]]:
        """``encode`` applied to each text (never pads or truncates)."""
        return [self.encode(t, add_special_tokens=add_special_tokens) for t in texts]

    @abc.abstractmethod
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids``; special tokens are dropped when ``skip_special_tokens``."""

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int:
        """Number of tokens, added tokens included."""

    @abc.abstractmethod
    def token_to_id(self, token: str) -> int | None:
        """Id of a token string, or None if it is not in the vocabulary."""

    @abc.abstractmethod
    def id_to_token(self, i: int) -> str | None:
        """Token string of an id, or None if out of range."""

    @property
    def bos_id(self) -> int | None:
        return self._ids["bos"]

    @property
    def eos_id(self) -> int | None:
        """The primary end-of-sequence id (see ``eos_ids`` for all stop ids)."""
        return self._ids["eos"]

    @property
    def eos_ids(self) -> tuple[int, ...]:
        """All stop ids: the primary eos first, then generation_config.json ``eos_token_id`` entries."""
        return self._eos_ids

    @property
    def pad_id(self) -> int | None:
        return self._ids["pad"]

    @property
    def special_tokens(self) -> tuple[str, ...]:
        """The strings that encode() turns into their own ids wherever they occur in text
        (text from outside, a tool's output say, must not contain them): the added tokens."""
        return tuple(t for n in _SPECIAL_NAMES if (t := self._tokens[n]) is not None)

    @property
    def has_chat_template(self) -> bool:
        return self._chat_template is not None

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tokenize: bool = False,
        **kwargs: Any,
    ) -> str | list[int]:
        """Render ``messages`` with the directory's chat template (as transformers does).

        Template variables: ``messages``, ``add_generation_prompt``, ``bos_token``/``eos_token``/``pad_token``
        (the strings named in the tokenizer files; undefined when unset), ``tools=None``, ``documents=None``,
        all overridable by ``kwargs``.
        Keys whose value is None are dropped from messages (as transformers >= 5 does). With ``tokenize`` the
        rendered string is encoded with ``add_special_tokens=False``.
        """
        if self._chat_template is None:
            raise ValueError(
                f"tokenizer at {self.path} has no chat template (looked for chat_template.jinja and a "
                "'chat_template' string, or a list entry named 'default', in tokenizer_config.json)"
            )
        if not messages or not all(isinstance(m, dict) for m in messages):
            raise ValueError(f"messages must be a non-empty list of dicts, got {messages!r}")
        try:
            template = _compile_template(self._chat_template)
        except jinja2.TemplateSyntaxError as e:
            raise ValueError(f"invalid chat template in {self._chat_template_origin}: {e}") from e
        # Unset tokens stay undefined (not None, which would render as "None"), as in transformers.
        tokens = {f"{n}_token": t for n in _SPECIAL_NAMES if (t := self._tokens[n]) is not None}
        variables: dict[str, Any] = {**tokens, "tools": None, "documents": None, **kwargs}
        messages = [{k: v for k, v in m.items() if v is not None} for m in messages]
        text = template.render(**variables, messages=messages, add_generation_prompt=add_generation_prompt)
        return self.encode(text, add_special_tokens=False) if tokenize else text

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r}, vocab_size={self.vocab_size})"


class HFTokenizer(Tokenizer):
    """Backend for ``tokenizer.json`` via the Rust ``tokenizers`` library."""

    def __init__(self, path: Path, tokenizer_file: Path) -> None:
        try:
            self._tok = tokenizers.Tokenizer.from_file(str(tokenizer_file))
        except Exception as e:  # tokenizers raises a bare Exception on parse errors
            raise ValueError(f"could not load {tokenizer_file}: {e}") from e
        padding = self._tok.padding
        self._json_pad_token = padding.get("pad_token") if padding else None
        self._tok.no_padding()
        self._tok.no_truncation()
        self._init_common(path, tokenizer_file)
        # Like transformers, register the named special tokens as special added tokens: they are then matched
        # whole in raw text and dropped by decode(skip_special_tokens) even if they were plain vocab entries.
        added = []
        for name, spec in self._token_specs.items():
            flags = {"normalized": False}
            if isinstance(spec, dict):
                flags.update({k: spec[k] for k in ("lstrip", "rstrip", "single_word", "normalized") if k in spec})
            added.append(tokenizers.AddedToken(self._tokens[name], **flags, special=True))
        self._tok.add_special_tokens(added)

    def _backend_special_tokens(self) -> dict[str, str]:
        return {"pad": self._json_pad_token} if self._json_pad_token else {}

    @property
    def special_tokens(self) -> tuple[str, ...]:
        added = self._tok.get_added_tokens_decoder()  # special or not, each is matched whole
        return tuple(dict.fromkeys(added[i].content for i in sorted(added)))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=add_special_tokens)]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, i: int) -> str | None:
        return self._tok.id_to_token(int(i)) if int(i) >= 0 else None


class SentencePieceTokenizer(Tokenizer):
    """Backend for a SentencePiece ``.model`` file; BOS/EOS follow tokenizer_config ``add_bos/eos_token``."""

    def __init__(self, path: Path, model_file: Path) -> None:
        sentencepiece = extras.require("sentencepiece", "sentencepiece",
                                       "a SentencePiece tokenizer (tokenizer.model)")
        self._sp = sentencepiece.SentencePieceProcessor()
        try:
            self._sp.Load(str(model_file))
        except Exception as e:  # OSError / RuntimeError on a corrupt protobuf
            raise ValueError(f"could not load SentencePiece model {model_file}: {e}") from e
        self._init_common(path, model_file)
        self._add_bos = bool(self._tok_cfg.get("add_bos_token", True))
        self._add_eos = bool(self._tok_cfg.get("add_eos_token", False))

    def _backend_special_tokens(self) -> dict[str, str]:
        ids = {"bos": self._sp.bos_id(), "eos": self._sp.eos_id(), "pad": self._sp.pad_id()}
        return {name: self._sp.id_to_piece(i) for name, i in ids.items() if i >= 0}

    def _is_special(self, i: int) -> bool:
        return i in self._special_ids or (0 <= i < self.vocab_size and self._sp.is_control(i))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids: list[int] = self._sp.encode(text, out_type=int)
        if add_special_tokens:
            if self._add_bos and self.bos_id is not None:
                ids.insert(0, self.bos_id)
            if self._add_eos and self.eos_id is not None:
                ids.append(self.eos_id)
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        ids = [int(i) for i in ids]
        if skip_special_tokens:
            return self._sp.decode([i for i in ids if not self._is_special(i)])
        parts: list[str] = []
        run: list[int] = []
        for i in ids:  # special pieces are rendered literally, runs of ordinary ids are decoded normally
            if self._is_special(i):
                parts += [self._sp.decode(run)] if run else []
                parts.append(self._sp.id_to_piece(i))
                run = []
            else:
                run.append(i)
        parts += [self._sp.decode(run)] if run else []
        return "".join(parts)

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def token_to_id(self, token: str) -> int | None:
        i = self._sp.piece_to_id(token)
        if i == self._sp.unk_id() and self._sp.id_to_piece(i) != token:
            return None
        return i

    def id_to_token(self, i: int) -> str | None:
        return self._sp.id_to_piece(int(i)) if 0 <= int(i) < self.vocab_size else None


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """Load the tokenizer of a local HF-style directory (``tokenizer.json`` preferred over ``*.model``)."""
    p = Path(path)
    looked_for = "tokenizer.json, tokenizer.model or a single *.model SentencePiece file"
    if not p.is_dir():
        raise FileNotFoundError(f"tokenizer directory {p} does not exist or is not a directory (expected {looked_for})")
    if (p / "tokenizer.json").is_file():
        return HFTokenizer(p, p / "tokenizer.json")
    if (p / "tokenizer.model").is_file():
        return SentencePieceTokenizer(p, p / "tokenizer.model")
    models = sorted(f for f in p.glob("*.model") if f.is_file())
    if len(models) == 1:
        return SentencePieceTokenizer(p, models[0])
    if len(models) > 1:
        raise ValueError(f"ambiguous tokenizer in {p}: several *.model files {[m.name for m in models]}")
    raise FileNotFoundError(f"no tokenizer found in {p}: looked for {looked_for}")
