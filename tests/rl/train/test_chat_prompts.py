"""`data.chat_template`: prompts rendered through the tokenizer's own chat template, token
for token as transformers' `apply_chat_template(..., add_generation_prompt=True,
tokenize=True)` renders them, on a Qwen2.5-style (ChatML) template written by the test."""

import pytest

from rl.train import build
from tests.models.conftest import auto_tokenizer, bpe_json, chatml_dir  # noqa: F401 - fixtures
from tests.rl.train.test_trainer import small_config

PROMPTS = ["What is 2+2?", "hello world  café 東京", "digits 1234\nand a new line"]


def _run(tokenizer_dir, **overrides):
    return build.resolve(small_config(**{"data.tokenizer": str(tokenizer_dir),
                                         "model.vocab_size": 512, **overrides}))


@pytest.mark.parametrize("system", ["", "Be brief."])
def test_chat_template_prompts_match_transformers(chatml_dir, auto_tokenizer, system):  # noqa: F811
    run = _run(chatml_dir, **{"data.chat_template": True, "data.system_prompt": system})
    reference = auto_tokenizer(chatml_dir)
    for text in PROMPTS:
        messages = ([{"role": "system", "content": system}] if system else [])
        messages.append({"role": "user", "content": text})
        expected = reference.apply_chat_template(messages, add_generation_prompt=True,
                                                 tokenize=True)
        if isinstance(expected, dict) or hasattr(expected, "input_ids"):
            expected = expected["input_ids"]
        assert run.encode_prompt(text) == list(expected), text
    rendered = run.tokenizer.decode(run.encode_prompt("hi"), skip_special_tokens=False)
    assert rendered.endswith("<|im_start|>assistant\n")
    assert (system or "You are a helpful assistant.") in rendered


def test_without_chat_template_the_prompt_is_the_raw_text(chatml_dir, auto_tokenizer):  # noqa: F811
    run = _run(chatml_dir)
    reference = auto_tokenizer(chatml_dir)
    for text in PROMPTS:
        assert run.encode_prompt(text) == reference(text, add_special_tokens=False)["input_ids"]
