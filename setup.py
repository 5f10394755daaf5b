"""Installs the packages models, sampling, rl, launch and configs."""

from setuptools import find_packages, setup

setup(
    name="rlvr-jax",
    version="0.1.0",
    description="JAX-native RL post-training of language models with verifiable rewards",
    python_requires=">=3.11",
    packages=find_packages(include=["models*", "sampling*", "rl*", "launch*", "configs*"]),
    install_requires=[
        "jax>=0.9",
        "flax>=0.12",
        "optax>=0.2.5",
        "orbax-checkpoint>=0.11",
        "chex>=0.1.90",
        "grain>=0.2.12",
        "tensorflow-datasets>=4.9.9",
        "ml-collections>=1.1",
        "sentencepiece>=0.2",
        "tensorboard>=2.19",
        "safetensors>=0.5",
        "tokenizers>=0.21",
        "ml_dtypes>=0.5",
        "numpy>=2.0",
        "absl-py>=2.1",
        "jinja2>=3.1",
        "sympy>=1.12",
        "pyarrow>=14",
        "matplotlib>=3.8",
    ],
    extras_require={
        # torch is the CPU build, installed from a local wheel or the CPU index;
        # the Makefile installs it first so nothing can pull a CUDA build.
        "test": ["pytest>=8", "pytest-xdist>=3.6", "torch==2.13.0", "transformers>=5.0"],
        "tpu": ["jax[tpu]"],
        "cuda": ["jax[cuda13]"],
    },
)
