"""Writes workload W1's initial policy (benchmarks/rl_step.py) as a Hugging Face
directory, with its byte tokenizer, for the peer scripts that load HF models.

    .venv/bin/python benchmarks/peers/export_w1.py /tmp/w1_hf
"""

from __future__ import annotations

import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    from rl_step import w1_config

    from rl.train import build

    run = build.resolve(w1_config(), tempfile.mkdtemp())
    print(build.export(argv[0], run, build.init_params(run)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
