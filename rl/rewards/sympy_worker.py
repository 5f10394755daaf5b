"""A persistent, killable sympy process for the `math` verifier's symbolic check.

sympy's `simplify` has no time limit and can run for minutes (or grab
gigabytes) on an innocent-looking input, and a thread cannot be interrupted
inside it. So the check runs in one long-lived child interpreter. The parent
sends already-parsed, size-checked expression trees (`rl.rewards.expression`
tuples, so the child never parses text and nothing is `eval`ed) and waits
`timeout_s` for the answer; on a timeout, or if the child dies, it is killed
and the item scores 0. The next request starts a fresh child lazily.

The child is a fresh interpreter running this file as a script (`python -P
sympy_worker.py FD`), started with `subprocess` (fork+exec, like
multiprocessing's "spawn"; never a bare fork, since the parent may run JAX
threads). This module imports only the standard library (sympy inside the
child), so the child loads neither `rl` nor numpy/JAX. It talks over a socket
pair wrapped in `multiprocessing.connection.Connection`. Unlike a
multiprocessing "spawn" child, it does not re-import the parent's `__main__`
(which would re-run an unguarded training script, and fails outright for
`python - < script`). The parent's `sys.path` is passed on as PYTHONPATH so
the child finds the same sympy.

The child is started on first use only, has an address-space limit of
`MEMORY_LIMIT_BYTES` where the platform allows it, exits when the parent's
end of the socket closes, and is stopped at interpreter exit (atexit).
POSIX only (socket fd inheritance).
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any

STARTUP_TIMEOUT_S = 120.0
MAX_FAILED_STARTS = 3  # consecutive; then the symbolic check is given up for good
MEMORY_LIMIT_BYTES = 4 << 30
_SCRIPT = os.path.abspath(__file__)

_log = logging.getLogger(__name__)

_FUNCTIONS = {  # expression function name -> sympy attribute
    "sqrt": "sqrt", "root": "root", "abs": "Abs", "exp": "exp", "ln": "log", "log": "log",
    "sin": "sin", "cos": "cos", "tan": "tan", "cot": "cot", "sec": "sec", "csc": "csc",
    "arcsin": "asin", "arccos": "acos", "arctan": "atan", "asin": "asin", "acos": "acos",
    "atan": "atan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh",
}
_CONSTANTS = {"pi": "pi", "infty": "oo", "e": "E", "i": "I"}


def _to_sympy(sympy: Any, node: tuple) -> Any:
    """A sympy expression for an `rl.rewards.expression` tree."""
    kind = node[0]
    if kind == "num":
        return sympy.Rational(node[1].numerator, node[1].denominator)
    if kind == "name":
        constant = _CONSTANTS.get(node[1])
        return getattr(sympy, constant) if constant else sympy.Symbol(node[1])
    if kind == "neg":
        return -_to_sympy(sympy, node[1])
    if kind == "sum":
        return sympy.Add(*(sign * _to_sympy(sympy, term) for sign, term in node[1]))
    if kind == "prod":
        return sympy.Mul(*(_to_sympy(sympy, factor) if op == "*"
                           else sympy.Pow(_to_sympy(sympy, factor), -1)
                           for op, factor in node[1]))
    if kind == "pow":
        return sympy.Pow(_to_sympy(sympy, node[1]), _to_sympy(sympy, node[2]))
    if kind == "call":
        function = getattr(sympy, _FUNCTIONS[node[1]])
        return function(*(_to_sympy(sympy, arg) for arg in node[2]))
    raise ValueError(f"unknown node {kind!r}")


def _equal(sympy: Any, a: tuple, b: tuple, approximate: bool) -> bool:
    """simplify(a - b) == 0; with `approximate`, constants within rel tol 1e-6."""
    left, right = _to_sympy(sympy, a), _to_sympy(sympy, b)
    if left == right:
        return True
    if sympy.simplify(left - right) == 0:
        return True
    if approximate and not left.free_symbols and not right.free_symbols:
        x, y = complex(sympy.N(left, 30)), complex(sympy.N(right, 30))
        return abs(x - y) <= 1e-6 * max(abs(x), abs(y))
    return False


def serve(fd: int) -> None:
    """Child main loop on socket `fd`: (pairs, approximate) -> bool, until None or EOF."""
    conn = Connection(fd)
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    except (ImportError, ValueError, OSError):
        pass
    import sympy

    # sympy's first simplify builds its caches (~0.65 s on a 2-core CPU): done here,
    # inside the start-up wait, so it never counts against a request's timeout_s
    x = sympy.Symbol("x")
    sympy.simplify(sympy.sin(x) ** 2 + sympy.cos(x) ** 2 - 1)
    conn.send("ready")
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        pairs, approximate = request
        try:
            result = all(_equal(sympy, a, b, approximate) for a, b in pairs)
        except Exception:  # noqa: BLE001 - any sympy failure means "not shown equal"
            result = False
        conn.send(bool(result))


class SympyWorker:
    """Client side: one child process, used by one caller at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: Any = None
        self._conn: Connection | None = None
        self._owner_pid: int | None = None
        self._failed_starts = 0
        self.starts = 0

    @property
    def running(self) -> bool:
        return self._process is not None and self._owner_pid == os.getpid() \
            and self._process.poll() is None

    def _start(self) -> None:
        parent, child = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)
        try:
            process = subprocess.Popen(
                [sys.executable, "-P", _SCRIPT, str(child.fileno())],
                pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL,
                close_fds=True)
        finally:
            child.close()
        self._process, self._conn, self._owner_pid = process, Connection(parent.detach()), \
            os.getpid()
        self.starts += 1
        try:
            ready = self._conn.poll(STARTUP_TIMEOUT_S) and self._conn.recv() == "ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            self._failed_starts += 1
            self._stop()
            raise RuntimeError(f"sympy worker did not start (attempt {self._failed_starts})")
        self._failed_starts = 0

    def _stop(self, graceful: bool = False) -> None:
        process, conn = self._process, self._conn
        self._process, self._conn, self._owner_pid = None, None, None
        if process is None:
            return
        if graceful and conn is not None:
            try:
                conn.send(None)
                process.wait(1.0)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        if process.poll() is None:
            process.kill()
        try:
            process.wait(5.0)
        except subprocess.TimeoutExpired:
            pass
        if conn is not None:
            conn.close()

    def equal(self, pairs: list[tuple[tuple, tuple]], approximate: bool,
              timeout_s: float) -> bool:
        """True if every pair is shown equal within `timeout_s`; False otherwise."""
        with self._lock:
            if self._owner_pid is not None and self._owner_pid != os.getpid():
                # Inherited through fork: the child belongs to the parent process.
                self._process, self._conn, self._owner_pid = None, None, None
            if self._failed_starts >= MAX_FAILED_STARTS:
                return False
            try:
                if not self.running:
                    self._stop()
                    self._start()
                assert self._conn is not None
                self._conn.send((pairs, approximate))
                if self._conn.poll(timeout_s):
                    return bool(self._conn.recv())
                _log.debug("sympy check timed out after %.3gs; restarting worker", timeout_s)
            except (EOFError, OSError, RuntimeError, ValueError) as err:
                _log.warning("sympy worker failed (%s); restarting it", err)
            self._stop()
            return False

    def close(self) -> None:
        """Stops the child (if this process started it)."""
        with self._lock:
            if self._owner_pid == os.getpid():
                self._stop(graceful=True)
            else:
                self._process, self._conn, self._owner_pid = None, None, None


WORKER = SympyWorker()
atexit.register(WORKER.close)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
