"""Observation formats from chat templates: appending `render(outputs)` after the
policy's stop token gives the same text as rendering the whole conversation with the
template, for Qwen2.5- and Llama-3.1-style templates (the latter writes outputs as
JSON), and a template that cannot is refused in one line."""

import pytest

from models.tokenizer import load_tokenizer
from rl.envs.observations import ObservationFormat, TemplateError
from tests.models.conftest import bpe_json, chatml_dir  # noqa: F401 - fixtures
from tests.rl.envs.chat_templates import FAMILIES, tokenizer_dir

OUTPUTS = [["56088"], ['a "quoted"\nline', "error: division by zero"], ["", "x", "{\"k\": 1}"]]


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def tokenizer(request, tmp_path_factory):
    return load_tokenizer(tokenizer_dir(tmp_path_factory.mktemp("tok"), request.param))


@pytest.mark.parametrize("outputs", OUTPUTS)
def test_appending_the_observation_equals_rendering_the_conversation(tokenizer, outputs):
    fmt = ObservationFormat.from_template(tokenizer)
    eos = tokenizer.id_to_token(tokenizer.eos_id)
    question, answer = "What is 123 * 456?", '<tool_call>{"name": "calculator"}</tool_call>'
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": question}])
    whole = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        + [{"role": "tool", "content": o} for o in outputs])
    assert prompt + answer + eos + fmt.render(outputs) == whole


def test_the_llama_template_quotes_and_the_qwen_template_does_not(tmp_path):
    quote = {family: ObservationFormat.from_template(
        load_tokenizer(tokenizer_dir(tmp_path, family))).quote for family in FAMILIES}
    assert quote == {"qwen2": False, "llama": True}


def test_plain_format_wraps_each_output():
    assert ObservationFormat.plain().render(["1", "2"]) == (
        "\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response>\n")
    with pytest.raises(ValueError, match="at least one tool output"):
        ObservationFormat.plain().render([])


def test_a_template_without_tool_messages_is_refused(chatml_dir):  # noqa: F811
    # the model tests' ChatML template raises on any role but system, user, assistant
    with pytest.raises(TemplateError, match="cannot render 'tool' messages: Unknown role"):
        ObservationFormat.from_template(load_tokenizer(chatml_dir))
