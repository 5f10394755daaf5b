"""Decoder-only policy models: configs, pure forward, sharding, HF interop.

Stable public API (other packages and external checks call these):

    models.init(config, rng) -> params
    models.apply(config, params, tokens[B, T], positions=None) -> logits[B, T, V]
    models.load_pretrained(path, dtype=jnp.float32) -> (config, params)
    models.save_pretrained(path, config, params)
    models.load_tokenizer(path) -> Tokenizer
    models.get_preset(name, **overrides) -> ModelConfig
    models.shared_prefix_hidden_states(config, params, prompts[P, Tp], prompt_lens[P],
                                       continuations[P, G, S]) -> ([P, Tp, D], [P, G, S, D])
    models.run_layers(config, params, tokens, positions, attend, cache) -> (hidden, cache)
        the one decoder stack with its attention as a parameter (the sampler's
        page attention: models.paged_attention)
"""

from models.config import PRESETS, ModelConfig, RopeScaling, get_preset
from models.from_config import from_config_section
from models.hf_io import load_pretrained, read_config, save_pretrained
from models.params import init, param_axes, param_shapes, param_specs
from models.safetensors_io import CheckpointError
from models.shared_prefix import shared_prefix_hidden_states
from models.tokenizer import load_tokenizer
from models.transformer import (
    apply,
    fuse_layers,
    hidden_states,
    layer_list,
    logits_from_hidden,
    output_matrix,
    run_layers,
)

__all__ = [
    "CheckpointError", "ModelConfig", "PRESETS", "RopeScaling", "apply", "from_config_section",
    "fuse_layers", "get_preset", "hidden_states", "init", "layer_list", "load_pretrained",
    "load_tokenizer", "logits_from_hidden",
    "output_matrix", "param_axes", "param_shapes", "param_specs", "read_config", "run_layers",
    "save_pretrained",
    "shared_prefix_hidden_states",
]
