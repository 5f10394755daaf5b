"""Confine the current process: resource limits, no privileges, Landlock, seccomp.

Standard library only: the sandbox's child interpreter (`rl/envs/sandbox_child.py`)
imports this file by path, before anything of the project is readable to it, and
calls `confine` once, then runs the untrusted code. Nothing here can be undone by
the process afterwards:

1. **Resource limits** (`setrlimit`): CPU seconds (SIGXCPU at the limit, SIGKILL a
   second later), address space, file size, open files, no core dumps.
2. **No privileges.** `PR_SET_NO_NEW_PRIVS`, and every capability dropped (`capset`):
   run by root, the process keeps user id 0, the owner of the interpreter's files
   (which may lie under a home directory that only root can enter), but no override
   of file permissions, no CAP_KILL, no CAP_SYS_ADMIN. Since it cannot exec, it never
   gets them back.
3. **Landlock** (Linux >= 5.13): the file system is denied except read access to the
   directories in `read` (the interpreter's standard library, the shared libraries)
   and read/write access beneath `scratch`. A kernel without Landlock is an error.
4. **seccomp** through libseccomp (`libseccomp.so.2`, the C library every Linux
   distribution ships; bound with ctypes): no sockets (no network), no new processes
   (fork, vfork, clone without CLONE_THREAD, exec), no signals to other processes,
   no ptrace, mounts, namespaces, io_uring, BPF, kernel modules, clock changes,
   raised resource limits, no System V IPC, no priority or scheduling changes of other
   processes, and no chmod/chown/xattr/utime/file-flag changes (Landlock governs
   opening a file, not its metadata, and the process may own the interpreter's
   files). A denied call fails with EPERM (clone3 with ENOSYS, so threads fall back
   to clone): Python raises `PermissionError` and the code's own error handling sees
   it.

Written here rather than taken from a package: the maintained Python bindings for
Landlock are pre-releases, and libseccomp's own Python bindings are not on PyPI; the
two ctypes bindings below are the few calls needed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import resource

# -- Landlock (include/uapi/linux/landlock.h); the syscall numbers are the same on
# every architecture (allocated after the tables were unified).
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_ALL_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1,
                  5: (1 << 16) - 1}
_FS_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | (1 << 14) | (1 << 15)
_NET_ALL = (1 << 0) | (1 << 1)  # bind and connect TCP, ABI >= 4
_SCOPE_ALL = (1 << 0) | (1 << 1)  # abstract unix sockets, signals, ABI >= 6

# -- seccomp through libseccomp (include/seccomp.h)
_ACT_ALLOW = 0x7FFF0000
_CMP_NE, _CMP_EQ, _CMP_MASKED_EQ = 1, 4, 7
_CLONE_THREAD = 0x00010000

DENIED = (
    # network
    "socket", "socketpair",
    # new processes and programs
    "fork", "vfork", "execve", "execveat",
    # other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_open", "pidfd_getfd",
    "pidfd_send_signal", "tkill", "kcmp",
    # the system
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "bpf",
    "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "keyctl", "add_key", "request_key", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon",
    "swapoff", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "syslog",
    "iopl", "ioperm", "acct", "quotactl", "setrlimit", "mknod", "mknodat",
    # file metadata by path (Landlock governs opening, not these)
    "setpriority", "shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl",
    "semget", "semop", "semtimedop", "semctl",
    # file metadata (Landlock governs opening, not these)
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
    "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
    "utime", "utimes", "utimensat", "futimesat",
)
_IOCTL_DENIED = (0x40086602, 0x401C5820)  # FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR
_CAP_VERSION_3 = 0x20080522


class ConfineError(RuntimeError):
    """The process could not be confined (no Landlock, no libseccomp, a failed call)."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise ConfineError(f"{what} failed: {os.strerror(code) if code else result}")
    return result


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where Landlock is absent or disabled."""
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(ctypes.c_long(_SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                           ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64),
                ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _landlock(read: list[str], scratch: str) -> None:
    abi = landlock_abi()
    if abi < 1:
        raise ConfineError("Landlock is not available in this kernel (Linux >= 5.13 with "
                           "the landlock LSM enabled): the sandbox cannot confine files")
    handled = _FS_ALL_BY_ABI[min(abi, 5)]
    attr = _RulesetAttr(handled, _NET_ALL if abi >= 4 else 0, _SCOPE_ALL if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    fd = _check(libc.syscall(ctypes.c_long(_SYS_CREATE_RULESET), ctypes.byref(attr),
                             ctypes.c_size_t(size), ctypes.c_uint32(0)), "landlock ruleset")
    try:
        reading = _FS_READ_FILE | _FS_READ_DIR
        rules = [(path, reading) for path in read] + [(scratch, handled & ~_FS_EXECUTE)]
        for path, access in rules:
            if not os.path.exists(path):
                continue
            path_fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                if not os.path.isdir(path):
                    access &= _FS_FILE_RIGHTS
                rule = _PathBeneath(access & handled, path_fd)
                _check(libc.syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(fd),
                                    ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                                    ctypes.c_uint32(0)), f"landlock rule for {path}")
            finally:
                os.close(path_fd)
        _check(libc.syscall(ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(fd),
                            ctypes.c_uint32(0)), "landlock_restrict_self")
    finally:
        os.close(fd)


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def _libseccomp() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as e:
        raise ConfineError(f"libseccomp is not installed ({e}): the sandbox cannot "
                           "confine system calls") from e
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    return lib


def _seccomp(lib: ctypes.CDLL) -> None:
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(_ArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(_ACT_ALLOW)
    if not ctx:
        raise ConfineError("seccomp_init failed")

    def deny(syscall: str, code: int = errno.EPERM, *cmps: tuple[int, int, int, int]) -> None:
        number = lib.seccomp_syscall_resolve_name(syscall.encode())
        if number < 0:
            return  # not a system call of this architecture (fork on arm64, say)
        array = (_ArgCmp * max(len(cmps), 1))(*[_ArgCmp(*c) for c in cmps])
        result = lib.seccomp_rule_add_array(ctx, 0x00050000 | code, number, len(cmps), array)
        if result < 0:
            raise ConfineError(f"seccomp rule for {syscall} failed: {os.strerror(-result)}")

    try:
        for syscall in DENIED:
            deny(syscall)
        me = os.getpid()
        deny("clone", errno.EPERM, (0, _CMP_MASKED_EQ, _CLONE_THREAD, 0))  # a process
        deny("clone3", errno.ENOSYS)  # glibc then creates threads with clone
        # one comparison per argument and rule (libseccomp): kill only itself by its pid,
        # change only its own scheduling by pid 0
        deny("kill", errno.EPERM, (0, _CMP_NE, me, 0))
        deny("tgkill", errno.EPERM, (0, _CMP_NE, me, 0))
        deny("rt_sigqueueinfo", errno.EPERM, (0, _CMP_NE, me, 0))
        deny("rt_tgsigqueueinfo", errno.EPERM, (0, _CMP_NE, me, 0))
        deny("prlimit64", errno.EPERM, (2, _CMP_NE, 0, 0))  # setting; reading is allowed
        for syscall in ("sched_setaffinity", "sched_setscheduler", "sched_setparam"):
            deny(syscall, errno.EPERM, (0, _CMP_NE, 0, 0))
        for request in _IOCTL_DENIED:
            deny("ioctl", errno.EPERM, (1, _CMP_EQ, request, 0))
        result = lib.seccomp_load(ctx)
        if result < 0:
            raise ConfineError(f"seccomp_load failed: {os.strerror(-result)}")
    finally:
        lib.seccomp_release(ctx)


def _limit(cpu_s: int, memory_bytes: int, file_bytes: int, open_files: int) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _drop_capabilities(lib: ctypes.CDLL) -> None:
    """Empty effective, permitted and inheritable sets (capset, numbered by libseccomp
    for this architecture: glibc has no wrapper)."""
    number = lib.seccomp_syscall_resolve_name(b"capset")
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    header, data = _CapHeader(_CAP_VERSION_3, 0), (_CapData * 2)()
    _check(libc.syscall(ctypes.c_long(number), ctypes.byref(header), data), "capset")


def confine(*, read: list[str], scratch: str, cpu_s: int, memory_bytes: int,
            file_bytes: int, open_files: int) -> None:
    """Apply every restriction above to this process, for good. Raises `ConfineError`."""
    lib = _libseccomp()
    _limit(cpu_s, memory_bytes, file_bytes, open_files)
    _check(_libc().prctl(38, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _drop_capabilities(lib)
    _landlock(read, scratch)
    _seccomp(lib)
