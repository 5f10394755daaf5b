"""Safetensors files on NumPy (bf16 via ml_dtypes), through the `safetensors` library.

`SafetensorsFile` opens one file with `safetensors.safe_open(framework="numpy")`,
which memory-maps it and validates the whole header (dtypes, shapes, offsets
inside the file) before any tensor is touched; a corrupt or truncated file
fails with one `CheckpointError` naming it instead of producing garbage later.
Each tensor is read only when `get` asks for it. No torch is involved, so bf16
checkpoints load without a framework round trip. `write` saves with
`safetensors.numpy.save_file` and the `{"format": "pt"}` metadata that
transformers expects.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# ml_dtypes must be imported before safetensors reads a BF16 tensor with
# framework="numpy": the library looks up np.dtype("bfloat16"), a name that
# only exists once ml_dtypes has registered it.
import ml_dtypes
import numpy as np
import safetensors
import safetensors.numpy

DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype(np.float64), "F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16), "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32), "I16": np.dtype(np.int16), "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8), "BOOL": np.dtype(np.bool_),
}
_NAMES = {v: k for k, v in DTYPES.items()}


class CheckpointError(ValueError):
    """A checkpoint on disk is missing, malformed or does not match the model."""


class SafetensorsFile:
    """Read-only access to one `.safetensors` file.

    Attributes:
      path: the file. metadata: the `__metadata__` dict (may be empty).
      tensors: name -> (dtype string, shape tuple), in file order.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        try:
            self._file = safetensors.safe_open(self.path, framework="numpy")
            self.metadata = dict(self._file.metadata() or {})
            self.tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
            for name in self._file.offset_keys():
                info = self._file.get_slice(name)
                self.tensors[name] = (info.get_dtype(), tuple(info.get_shape()))
        except (safetensors.SafetensorError, OSError) as e:
            raise CheckpointError(f"{self.path}: not a readable safetensors file, truncated or "
                                  f"corrupt ({e})") from None
        for name, (dtype, _) in self.tensors.items():
            if dtype not in DTYPES:
                raise CheckpointError(f"{self.path}: tensor {name!r} has unsupported dtype {dtype}")

    def get(self, name: str) -> np.ndarray:
        """The tensor `name`, read from the file now (only this tensor's bytes)."""
        if name not in self.tensors:
            raise CheckpointError(f"{self.path}: no tensor named {name!r}")
        try:
            return self._file.get_tensor(name)
        except (safetensors.SafetensorError, OSError) as e:
            raise CheckpointError(f"{self.path}: cannot read tensor {name!r} ({e})") from None


def write(path: str | os.PathLike, tensors: Mapping[str, np.ndarray],
          metadata: Mapping[str, str] | None = None) -> None:
    """Writes `tensors` (name -> array) as one safetensors file, atomically.

    The metadata always carries `"format": "pt"` (transformers refuses a file
    without it) unless `metadata` sets another format.
    """
    arrays = {}
    for name, arr in tensors.items():
        # save_file reads each array's raw buffer: it must be C-contiguous.
        arr = np.ascontiguousarray(arr)
        if arr.dtype not in _NAMES:
            raise ValueError(f"tensor {name!r}: dtype {arr.dtype} cannot be stored in safetensors")
        arrays[name] = arr
    tmp = os.fspath(path) + ".tmp"
    safetensors.numpy.save_file(arrays, tmp, metadata={"format": "pt", **(metadata or {})})
    # safetensors creates the file owner-only (0600); an export is read by others too: the
    # mode of any file this process creates (0666 less the umask)
    os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, path)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
