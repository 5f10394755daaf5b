"""Generation engine (paged KV cache, flat group and tree samplers).

Lands with the generation-engine issue; depends only on `models`.
"""
