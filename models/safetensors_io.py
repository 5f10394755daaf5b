"""Minimal, strict safetensors reader/writer on NumPy (bf16 via ml_dtypes).

The reader memory-maps the file and validates the header completely (dtypes,
shapes, offsets inside the file) before any tensor is touched, so a corrupt
or truncated file fails with one error naming it instead of producing garbage
later. Tensors come back as read-only NumPy views; nothing is copied until the
caller converts them. No torch is involved, so bf16 checkpoints load without
a framework round trip.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Mapping

import ml_dtypes
import numpy as np

DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype(np.float64), "F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16), "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32), "I16": np.dtype(np.int16), "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8), "BOOL": np.dtype(np.bool_),
}
_NAMES = {v: k for k, v in DTYPES.items()}
_MAX_HEADER = 100 * 1024 * 1024


class CheckpointError(ValueError):
    """A checkpoint on disk is missing, malformed or does not match the model."""


class SafetensorsFile:
    """Read-only view of one `.safetensors` file.

    Attributes:
      path: the file. metadata: the `__metadata__` dict (may be empty).
      tensors: name -> (dtype string, shape tuple), in file order.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        try:
            size = os.path.getsize(self.path)
            with open(self.path, "rb") as f:
                raw = f.read(8)
                if len(raw) != 8:
                    raise CheckpointError("file shorter than the 8-byte header length")
                (n,) = struct.unpack("<Q", raw)
                if n > _MAX_HEADER or 8 + n > size:
                    raise CheckpointError(f"header length {n} is impossible for a {size}-byte file")
                header = json.loads(f.read(n))
        except CheckpointError as e:
            raise CheckpointError(f"{self.path}: {e}") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CheckpointError(f"{self.path}: not a readable safetensors file ({e})") from None
        if not isinstance(header, dict):
            raise CheckpointError(f"{self.path}: header is not a JSON object")
        self._data_start = 8 + n
        self.metadata = header.pop("__metadata__", None) or {}
        self.tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
        self._offsets: dict[str, tuple[int, int]] = {}
        for name, info in header.items():
            try:
                dtype, shape, (start, end) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
            except (KeyError, TypeError, ValueError):
                raise CheckpointError(f"{self.path}: malformed header entry for {name!r}") from None
            if dtype not in DTYPES:
                raise CheckpointError(f"{self.path}: tensor {name!r} has unsupported dtype {dtype}")
            nbytes = math.prod(shape) * DTYPES[dtype].itemsize
            if end - start != nbytes or start < 0 or self._data_start + end > size:
                raise CheckpointError(
                    f"{self.path}: tensor {name!r} offsets {start}..{end} do not fit its shape "
                    f"{shape} {dtype} or the file size {size} (truncated file?)")
            self.tensors[name] = (dtype, shape)
            self._offsets[name] = (start, end)
        self._mmap: np.memmap | None = None

    def get(self, name: str) -> np.ndarray:
        """The tensor `name` as a read-only NumPy view of the mapped file."""
        if name not in self.tensors:
            raise CheckpointError(f"{self.path}: no tensor named {name!r}")
        if self._mmap is None:
            self._mmap = np.memmap(self.path, dtype=np.uint8, mode="r")
        dtype, shape = self.tensors[name]
        start, end = self._offsets[name]
        buf = self._mmap[self._data_start + start:self._data_start + end]
        return buf.view(DTYPES[dtype]).reshape(shape)


def write(path: str | os.PathLike, tensors: Mapping[str, np.ndarray],
          metadata: Mapping[str, str] | None = None) -> None:
    """Writes `tensors` (name -> array) as one safetensors file, atomically."""
    header: dict = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    arrays = []
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        if arr.dtype not in _NAMES:
            raise ValueError(f"tensor {name!r}: dtype {arr.dtype} cannot be stored in safetensors")
        header[name] = {"dtype": _NAMES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
        arrays.append(arr)
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data section starts 8-byte aligned
    tmp = os.fspath(path) + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for arr in arrays:
            f.write(arr.tobytes())
    os.replace(tmp, path)
