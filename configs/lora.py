"""The `lora` section: low-rank adapters on a frozen base (LoRA), the base optionally
in 8 or 4 bits (QLoRA). Off while `rank` is 0 (docs/lora.md)."""

import ml_collections
from ml_collections import config_dict


def lora_section() -> ml_collections.ConfigDict:
    lo = ml_collections.ConfigDict()
    lo.rank = 0             # adapter rank r; 0 = full fine-tuning (no adapters)
    # the update is scaled by alpha / rank (PEFT's); None = 2 * rank
    lo.alpha = config_dict.placeholder(float)
    # comma-separated decoder weights that get an adapter: q,k,v,o (attention) and
    # gate,up,down (MLP); every linear layer by default
    lo.targets = "q,k,v,o,gate,up,down"
    # the frozen base's decoder weights: none (model.param_dtype) | int8 | nf4 (QLoRA),
    # in blocks of `block` along each weight's input dim, one fp32 scale per block;
    # embeddings, norms and the output head stay in model.param_dtype
    lo.quantize = "none"
    lo.block = 64
    # how the sampler runs the adapter: merge (W + (alpha/r) A B into its own copy once
    # per update) | factored (x W + (alpha/r) (x A) B in every decode step) | auto (merge
    # for a plain base, factored for a quantized one, whose dense copy would undo it)
    lo.sampler = "auto"
    return lo
