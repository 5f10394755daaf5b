"""Tokenizers with Qwen2.5- and Llama-3.1-style chat templates that declare tools, built
from the embedded byte tokenizer plus each family's special tokens (ids from 259, so
they fit the `tiny` preset's vocabulary). The templates follow the published ones where
tools are concerned: Qwen2.5 lists the tools in the system turn and groups consecutive
tool messages in one user turn, each in `<tool_response>` tags; Llama 3.1 gives each
tool message an `ipython` turn and writes its content as JSON."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer

from models.byte_tokenizer import save_byte_tokenizer

QWEN25 = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content }}"
    "{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}"
    "{{- '\\n\\n# Tools\\n\\nYou are provided with function signatures within <tools></tools>"
    " XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and"
    " arguments within <tool_call></tool_call> XML tags.<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or message.role == 'assistant' "
    "or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}"
    "{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

LLAMA31 = (
    "{{- bos_token }}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{%- if tools %}{{- 'Environment: ipython\\n\\n' }}{%- endif %}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content | trim }}{%- endif %}"
    "{%- if tools %}{{- '\\nYou have access to the following functions:\\n' }}"
    "{%- for tool in tools %}{{- tool | tojson(indent=4) }}{{- '\\n\\n' }}{%- endfor %}"
    "{%- endif %}{{- '<|eot_id|>' }}"
    "{%- for message in messages %}"
    "{%- if message.role == 'tool' or message.role == 'ipython' %}"
    "{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' }}"
    "{%- if message.content is mapping or message.content is iterable %}"
    "{{- message.content | tojson }}{%- else %}{{- message.content }}{%- endif %}"
    "{{- '<|eot_id|>' }}"
    "{%- elif message.role != 'system' %}"
    "{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim"
    " + '<|eot_id|>' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

FAMILIES = {
    "qwen2": (QWEN25, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
              {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None}),
    "llama": (LLAMA31, ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                        "<|eot_id|>", "<|finetune_right_pad_id|>"],
              {"eos_token": "<|eot_id|>", "pad_token": "<|finetune_right_pad_id|>",
               "bos_token": "<|begin_of_text|>"}),
}


def tokenizer_dir(root: Path, family: str) -> Path:
    """A tokenizer directory for `family` (`qwen2` or `llama`) under `root`."""
    template, specials, tokens = FAMILIES[family]
    path = save_byte_tokenizer(root / family)
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    tok.add_special_tokens(specials)
    tok.save(str(path / "tokenizer.json"))
    config = json.loads((path / "tokenizer_config.json").read_text())
    config.update({k: v for k, v in tokens.items() if v is not None})
    config.pop("bos_token") if tokens["bos_token"] is None else None
    config["chat_template"] = template
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return path
