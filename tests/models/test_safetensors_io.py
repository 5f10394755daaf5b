"""models.safetensors_io.write: exports are readable by others, as any file the process
makes (safetensors itself creates them owner-only)."""

import os
import stat

import numpy as np
import pytest

from models import safetensors_io


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_file_mode_follows_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        path = tmp_path / "model.safetensors"
        safetensors_io.write(path, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == mode
    assert not (tmp_path / "model.safetensors.tmp").exists()
