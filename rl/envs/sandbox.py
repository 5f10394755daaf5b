"""A Python sandbox: run untrusted code in a fresh, confined interpreter.

    box = Sandbox(Limits(wall_s=10, cpu_s=5, memory_mb=512, output_bytes=4096))
    result = box.run("print(6 * 7)")        # Result(status="ok", stdout="42\\n", error="")
    result.observation()                    # the text the policy sees
    box.run_many([code_a, code_b])          # in parallel, results in order

Each run is a new interpreter (`python -S -s -B rl/envs/sandbox_child.py`, fork+exec
through `subprocess`, never a bare fork of the trainer) in its own session, with a
clean environment (`PYTHONHASHSEED=0`: the same code prints the same text) and a
fresh scratch directory that is deleted afterwards. The child confines itself before
the code runs (`rl/envs/confine.py`): CPU, memory, file-size and open-file limits, no
capabilities, Landlock (reads only of the standard library and shared libraries,
writes only beneath the scratch directory) and seccomp (no sockets, no new
processes, no exec, no signals to others). The parent enforces the wall-clock limit
and the output limit, killing the child's session.

What the code does wrong comes back as a `Result` whose `status` says what stopped it
(`ok`, `error`, `timeout`, `cpu_limit`, `output_limit`, `crash`), for the policy to
read; only a sandbox that cannot confine its child raises (`SandboxError`), when it is
built (`Sandbox` runs a check program once) or on any run after.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Sequence

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_child.py")
READY = b"\0confined\n"  # sandbox_child.READY
STATUSES = ("ok", "error", "timeout", "cpu_limit", "output_limit", "crash")
_LIBRARIES = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib",
              "/etc/ld.so.cache")


class SandboxError(RuntimeError):
    """The sandbox cannot confine its child (this kernel or machine lacks what it needs)."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per run. `wall_s`: seconds of real time; `cpu_s`: seconds of CPU (whole
    seconds, the kernel's limit); `memory_mb`: address space; `output_bytes`: stdout
    plus stderr; `file_mb`: the largest file the code may write; `open_files`."""
    wall_s: float = 10.0
    cpu_s: int = 5
    memory_mb: int = 512
    output_bytes: int = 4096
    file_mb: int = 16
    open_files: int = 64

    def __post_init__(self):
        for name in ("wall_s", "cpu_s", "memory_mb", "output_bytes", "file_mb", "open_files"):
            if not getattr(self, name) > 0:
                raise ValueError(f"sandbox limit {name} must be > 0, got {getattr(self, name)}")
        if self.memory_mb < 64:
            raise ValueError(f"sandbox limit memory_mb must be >= 64 (the interpreter's own "
                             f"address space), got {self.memory_mb}")
        if self.open_files < 16:
            raise ValueError(f"sandbox limit open_files must be >= 16, got {self.open_files}")


@dataclasses.dataclass(frozen=True)
class Result:
    """`stdout` (at most the output limit), `error`: one line on what went wrong ("" for
    `ok`), `status` in `STATUSES`, `seconds` of wall time."""
    status: str
    stdout: str
    error: str
    seconds: float

    def observation(self) -> str:
        """What the policy reads: the output, then the error line, if any."""
        if not self.error:
            return self.stdout
        sep = "" if not self.stdout or self.stdout.endswith("\n") else "\n"
        return f"{self.stdout}{sep}{self.error}"


def _read_paths() -> list[str]:
    paths = {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
    return sorted(paths) + [p for p in _LIBRARIES if os.path.exists(p)]


def _last_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


class Sandbox:
    """Runs code under `limits`; scratch directories go beneath `scratch_root`
    (default: the system's temporary directory). Checks on construction that a child
    can be confined here."""

    def __init__(self, limits: Limits = Limits(), scratch_root: str | None = None):
        self.limits = limits
        self.scratch_root = scratch_root or tempfile.gettempdir()
        if not os.path.isdir(self.scratch_root):
            raise SandboxError(f"sandbox scratch root {self.scratch_root} is not a directory")
        self._read = _read_paths()
        check = self.run("print('ok')")
        if check.status != "ok" or check.stdout != "ok\n":
            raise SandboxError(f"the sandbox's check program failed: {check.status} "
                               f"{check.error or check.stdout!r}")

    def run(self, code: str) -> Result:
        """Runs `code` once. Raises `SandboxError` only if the child could not be confined."""
        limits = self.limits
        scratch = tempfile.mkdtemp(prefix="rlvr-sandbox-", dir=self.scratch_root)
        try:
            spec = {"scratch": scratch, "read": self._read, "cpu_s": int(limits.cpu_s),
                    "memory_bytes": limits.memory_mb << 20, "file_bytes": limits.file_mb << 20,
                    "open_files": limits.open_files}
            env = {"PYTHONHASHSEED": "0", "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8",
                   "HOME": scratch, "TMPDIR": scratch}
            start = time.monotonic()
            proc = subprocess.Popen(
                [sys.executable, "-S", "-s", "-B", CHILD, json.dumps(spec)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=env, cwd=scratch, start_new_session=True, close_fds=True)
            try:
                proc.stdin.write(code.encode("utf-8", "replace"))
                proc.stdin.close()
            except BrokenPipeError:
                pass
            out, err, stopped = self._collect(proc, start)
            return self._result(proc, out, err, stopped, time.monotonic() - start)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def run_many(self, codes: Sequence[str], parallel: int | None = None) -> list[Result]:
        """Runs each code in its own child, up to `parallel` at once (default: the
        CPUs); results in the order of `codes`."""
        if not codes:
            return []
        workers = max(1, min(len(codes), parallel or os.cpu_count() or 1))
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            return list(pool.map(self.run, codes))

    def _collect(self, proc: subprocess.Popen, start: float) -> tuple[bytes, bytes, str]:
        """Reads stdout and stderr until both close, the wall limit passes, or their total
        passes the output limit (plus the ready marker); kills the session then."""
        limit = self.limits.output_bytes + len(READY)
        chunks = {proc.stdout: bytearray(), proc.stderr: bytearray()}
        stopped = ""
        with selectors.DefaultSelector() as sel:
            for pipe in chunks:
                os.set_blocking(pipe.fileno(), False)
                sel.register(pipe, selectors.EVENT_READ)
            while sel.get_map():
                left = self.limits.wall_s - (time.monotonic() - start)
                if left <= 0:
                    stopped = "timeout"
                    break
                for key, _ in sel.select(timeout=left):
                    data = os.read(key.fd, 65536)
                    if not data:
                        sel.unregister(key.fileobj)
                        continue
                    chunks[key.fileobj] += data
                if sum(len(c) for c in chunks.values()) > limit:
                    stopped = "output_limit"
                    break
        if not stopped:  # both pipes closed: the child may still run (a closed stdout)
            try:
                proc.wait(timeout=max(self.limits.wall_s - (time.monotonic() - start), 0.0))
            except subprocess.TimeoutExpired:
                stopped = "timeout"
        if stopped:
            _kill(proc)
        proc.wait()
        for pipe in chunks:
            pipe.close()
        return bytes(chunks[proc.stdout]), bytes(chunks[proc.stderr]), stopped

    def _result(self, proc: subprocess.Popen, out: bytes, err: bytes, stopped: str,
                seconds: float) -> Result:
        if not out.startswith(READY):
            if stopped:  # killed before it confined itself: the machine is overloaded
                raise SandboxError(f"the sandbox's child did not start within "
                                   f"{self.limits.wall_s} s")
            raise SandboxError(_last_line(err.decode("utf-8", "replace")) or
                               f"the sandbox's child exited with {proc.returncode} before "
                               "it was confined")
        cap = self.limits.output_bytes
        stdout = out[len(READY):][:cap].decode("utf-8", "replace")
        stderr = err[:cap].decode("utf-8", "replace")
        code = proc.returncode
        if stopped == "timeout":
            return Result("timeout", stdout, f"TimeoutError: stopped after "
                          f"{self.limits.wall_s:g} s of wall time", seconds)
        if stopped == "output_limit":
            return Result("output_limit", stdout, f"OutputLimit: stopped after "
                          f"{cap} bytes of output", seconds)
        if code in (-signal.SIGXCPU, -signal.SIGKILL):
            return Result("cpu_limit", stdout, f"TimeoutError: stopped after "
                          f"{self.limits.cpu_s} s of CPU time", seconds)
        if code < 0:
            name = signal.Signals(-code).name
            return Result("crash", stdout, f"Crash: the interpreter died ({name})", seconds)
        if code == 0:
            return Result("ok", stdout, "", seconds)
        line = _last_line(stderr) if code == 1 else ""
        return Result("error", stdout, line or f"SystemExit: exit status {code}", seconds)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
