"""One path layer for every file the project reads or writes: a local path keeps the
behaviour of `open` / `os` / `shutil`, a `gs://` or `s3://` URI goes through etils
`epath` and fsspec (gcsfs, s3fs), the clients Orbax itself uses for its metadata.

    paths.write_text(paths.join(workdir, "config.json"), text, atomic=True)
    with paths.staged(paths.join(workdir, "final")) as local:   # a local folder,
        save_files(local)                                        # uploaded on exit
    with paths.staged_file(paths.join(workdir, "a.png")) as local: fig.savefig(local)
    with paths.local_copy(uri) as local: read_files(local)       # downloaded first
    paths.download(uri, "/tmp/x")                                # kept
    paths.cached(uri)   # a local copy in ~/.cache/rlvr-jax, reused while the bucket's unchanged

Object storage has no directories, no appends and no rename: `makedirs` of a URI
creates nothing (a "directory" exists once an object is under it); an object appears
whole when its upload completes, so `atomic=True` is a plain write there; `replace`
copies then deletes; `open(uri, "a")` is refused (gcsfs would silently overwrite),
and files that grow (metrics.jsonl, TensorBoard events) are written locally and
uploaded whole (`rl.train.logs`). Free space is not a question there
(`rl.checkpoint.storage.free_bytes` returns None).

`STORAGE_EMULATOR_HOST` (a local GCS server such as `gcp-storage-emulator`, for
tests) sends every gs:// client to it without credentials: gcsfs (anonymous; its
storage-layout probe over gRPC, which emulators do not serve and which would hang
60 s per bucket, off) and TensorStore, which writes Orbax's arrays with its own
HTTP client (`TENSORSTORE_GCS_HTTP_URL`, a placeholder token). Each variable is only
set when the user has not set it, at the first gs:// access of the process, which
comes before Orbax's (the checkpoint code asks this layer first).
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import logging
import os
import posixpath
import shutil
import tempfile
from collections.abc import Iterator

import fsspec
from etils import epath

from models import extras

REMOTE = {"gs://": ("gcsfs", "gcs"), "s3://": ("s3fs", "s3")}  # scheme -> (package, extra)
# fsspec logs every remote file it opens at INFO, which absl prints: its warnings pass
if logging.getLogger("fsspec").level == logging.NOTSET:
    logging.getLogger("fsspec").setLevel(logging.WARNING)


def _emulator_settings() -> None:
    host = os.environ.get("STORAGE_EMULATOR_HOST", "")
    if not host:
        return
    url = host if host.startswith(("http://", "https://")) else f"http://{host}"
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")  # read at import
    os.environ.setdefault("TENSORSTORE_GCS_HTTP_URL", url)
    os.environ.setdefault("GOOGLE_AUTH_TOKEN_FOR_TESTING", "emulator")
    fsspec.config.conf.setdefault("gcs", {}).setdefault("token", "anon")


def is_remote(path: str) -> bool:
    """Whether `path` is an object-storage URI (gs://, s3://)."""
    return str(path).startswith(tuple(REMOTE))


def _remote(path: str) -> epath.Path:
    """The epath of a URI, after checking its client package is installed."""
    _emulator_settings()  # before gcsfs is imported (it reads its variable then)
    package, extra = REMOTE[str(path)[:5]]
    extras.require(package, extra, f"{str(path)[:5]} paths")
    return epath.Path(path)


def _fs(path: str):
    """(fsspec file system, path without the scheme) of a URI."""
    _remote(path)
    return fsspec.core.url_to_fs(str(path))


# -- names ------------------------------------------------------------------------------------
def join(first: str, *rest: str) -> str:
    return posixpath.join(first, *rest) if is_remote(first) else os.path.join(first, *rest)


def absolute(path: str) -> str:
    """`os.path.abspath` of a local path; a URI unchanged (without a trailing /)."""
    if is_remote(path):
        return path.rstrip("/") if len(path.rstrip("/")) > 5 else path
    return os.path.abspath(path)


def dirname(path: str) -> str:
    return posixpath.dirname(path.rstrip("/")) if is_remote(path) else os.path.dirname(path)


def basename(path: str) -> str:
    return posixpath.basename(path.rstrip("/")) if is_remote(path) else os.path.basename(path)


# -- queries ----------------------------------------------------------------------------------
def exists(path: str) -> bool:
    return _remote(path).exists() if is_remote(path) else os.path.exists(path)


def isdir(path: str) -> bool:
    """A local directory, or a URI with objects under it."""
    return _remote(path).is_dir() if is_remote(path) else os.path.isdir(path)


def isfile(path: str) -> bool:
    return _remote(path).is_file() if is_remote(path) else os.path.isfile(path)


def listdir(path: str) -> list[str]:
    """The names in a directory (`os.listdir`); FileNotFoundError when there is none."""
    if not is_remote(path):
        return os.listdir(path)
    if not isdir(path):
        raise FileNotFoundError(f"no such directory: {path}")
    return [p.name for p in _remote(path).iterdir()]


# -- changes ----------------------------------------------------------------------------------
def makedirs(path: str) -> None:
    """`os.makedirs(path, exist_ok=True)`; nothing to create on object storage."""
    if is_remote(path):
        _remote(path)
    else:
        os.makedirs(path, exist_ok=True)


def remove(path: str) -> None:
    if is_remote(path):
        _remote(path).unlink()
    else:
        os.remove(path)


def rmtree(path: str) -> None:
    """Deletes a directory and everything under it (nothing when it does not exist)."""
    if is_remote(path):
        if isdir(path):
            _remote(path).rmtree()
    else:
        shutil.rmtree(path, ignore_errors=True)


def replace(src: str, dst: str) -> None:
    """`os.replace` of a file; on object storage a copy then a delete (no rename there:
    gcsfs's own move retries an API that emulators lack for half a minute)."""
    if not is_remote(dst) and not is_remote(src):
        os.replace(src, dst)
        return
    copy_file(src, dst)
    remove(src)


def copy_file(src: str, dst: str) -> None:
    """Copies one file between any two places (local or remote)."""
    if is_remote(src) and is_remote(dst):
        fs, _ = _fs(src)
        fs.copy(str(src), str(dst))
    elif is_remote(dst):
        fs, _ = _fs(dst)
        fs.put_file(str(src), str(dst))
    elif is_remote(src):
        fs, _ = _fs(src)
        fs.get_file(str(src), str(dst))
    else:
        shutil.copyfile(src, dst)


# -- contents ---------------------------------------------------------------------------------
def open(path: str, mode: str = "r", **kwargs):  # noqa: A001 - the layer's `open`
    """`open` of a local path; a URI opens an object for reading or (re)writing whole."""
    if not is_remote(path):
        return builtins.open(path, mode, **kwargs)
    if "a" in mode or "+" in mode:
        raise ValueError(f"cannot open {path} in mode {mode!r}: object storage has no appends")
    return _remote(path).open(mode, **kwargs)


def read_text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def write_text(path: str, text: str, *, atomic: bool = False) -> None:
    write_bytes(path, text.encode("utf-8"), atomic=atomic)


def write_bytes(path: str, data: bytes, *, atomic: bool = False) -> None:
    """Writes a whole file; `atomic`: readers see the old or the new contents, never part
    (locally a temporary file renamed over it; an object store's upload already is)."""
    if is_remote(path) or not atomic:
        with open(path, "wb") as f:
            f.write(data)
        return
    tmp = f"{path}.tmp.{os.getpid()}"
    with builtins.open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


# -- whole directories ------------------------------------------------------------------------
def upload(local: str, path: str) -> None:
    """Copies the files under the local directory `local` to `path` (a URI or a local
    directory), keeping their relative names; files already at `path` are overwritten."""
    for root, _, names in os.walk(local):
        rel = os.path.relpath(root, local)
        target = path if rel == "." else join(path, *rel.split(os.sep))
        makedirs(target)
        for name in names:
            copy_file(os.path.join(root, name), join(target, name))


@contextlib.contextmanager
def staged(path: str) -> Iterator[str]:
    """A local directory to write `path`'s files in: `path` itself when it is local
    (created), else a temporary one uploaded to `path` when the block ends without error."""
    if not is_remote(path):
        os.makedirs(path, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="stage.") as tmp:
        yield tmp
        upload(tmp, path)


@contextlib.contextmanager
def staged_file(path: str) -> Iterator[str]:
    """A local file name to write `path` through (for writers that take local names only,
    such as matplotlib's savefig): `path` itself when it is local, else a temporary file
    uploaded to `path` when the block ends without error."""
    if not is_remote(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="stage.") as tmp:
        local = os.path.join(tmp, basename(path))
        yield local
        copy_file(local, path)


@contextlib.contextmanager
def local_copy(path: str) -> Iterator[str]:
    """`path` as a local directory to read: itself when it is local, else a temporary
    download of everything under it (deleted when the block ends)."""
    if not is_remote(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="copy.") as tmp:
        yield download(path, tmp)


def download(path: str, local: str) -> str:
    """Copies every object under the URI `path` into the local directory `local` (made),
    keeping their relative names; returns `local`."""
    fs, bare = _fs(path)
    os.makedirs(local, exist_ok=True)
    for found in fs.find(bare):
        rel = posixpath.relpath(found, bare.rstrip("/"))
        target = os.path.join(local, *rel.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fs.get_file(found, target)
    return local


def cache_dir() -> str:
    """Where `cached` keeps its downloads: $RLVR_CACHE, else ~/.cache/rlvr-jax."""
    return os.environ.get("RLVR_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                         "rlvr-jax")


def cached(path: str) -> str:
    """A local directory holding the files under `path`: `path` itself when it is local,
    else a download kept in `cache_dir()`/objects/ under a name made of the URI and its
    listing (each object's name, size and checksum), so a later call reuses it and a
    changed bucket is downloaded anew (old copies stay until the cache is deleted).
    Processes racing for one copy each download into their own folder; the first
    rename wins. FileNotFoundError when nothing is under `path`."""
    if not is_remote(path):
        return path
    fs, bare = _fs(path)
    found = fs.find(bare, detail=True)
    if not found:
        raise FileNotFoundError(f"no files under {path}")
    listing = sorted((posixpath.relpath(k, bare.rstrip("/")), v.get("size"),
                      v.get("md5Hash") or v.get("crc32c") or v.get("ETag") or v.get("etag"))
                     for k, v in found.items())
    key = hashlib.sha256(json.dumps([path.rstrip("/"), listing]).encode()).hexdigest()[:20]
    local = os.path.join(cache_dir(), "objects", key)
    if os.path.isdir(local):
        return local
    os.makedirs(os.path.dirname(local), exist_ok=True)
    partial = tempfile.mkdtemp(prefix=f".{key}.", dir=os.path.dirname(local))
    try:
        download(path, partial)
    except BaseException:  # a failed download leaves no partial copy behind, and raises
        shutil.rmtree(partial, ignore_errors=True)
        raise
    try:
        os.rename(partial, local)
    except OSError:  # another process renamed its copy first
        shutil.rmtree(partial, ignore_errors=True)
        if not os.path.isdir(local):
            raise
    return local
