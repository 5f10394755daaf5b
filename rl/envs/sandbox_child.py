"""The sandbox's child interpreter (run by `rl.envs.sandbox`, never imported).

    python -S -s -B sandbox_child.py SPEC_JSON  < code

It reads the code from stdin, changes to the scratch directory, confines itself
(`confine.py`, beside this file: the standard library only), then runs the code as
`__main__`. Once confined, and before the code runs, it writes `READY` to stdout: the
parent strips it, and a run without it failed to confine (one line on stderr that
begins with `sandbox:`), which the parent raises instead of handing it to the policy.
The code cannot fake that: it runs after the marker is written. An uncaught
exception prints its traceback to stderr and exits with 1.
"""

import importlib.util
import json
import os
import sys
import traceback

# confine.py by path: the project is not importable in the child (no site, no path)
_SPEC = importlib.util.spec_from_file_location(
    "confine", os.path.join(os.path.dirname(os.path.abspath(__file__)), "confine.py"))
confine = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(confine)

CONFINE_FAILED = 71  # EX_OSERR
READY = "\0confined\n"


def main() -> None:
    spec = json.loads(sys.argv[1])
    code = sys.stdin.read()
    sys.stdin.close()
    os.chdir(spec["scratch"])
    try:
        confine.confine(read=spec["read"], scratch=spec["scratch"], cpu_s=spec["cpu_s"],
                        memory_bytes=spec["memory_bytes"], file_bytes=spec["file_bytes"],
                        open_files=spec["open_files"])
    except (confine.ConfineError, OSError) as e:
        sys.stderr.write(f"sandbox: {e}\n")
        sys.exit(CONFINE_FAILED)
    sys.stdout.write(READY)
    sys.stdout.flush()
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        exec(compile(code, "<code>", "exec"), namespace)  # noqa: S102 - confined above
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001 - reported to the policy as its error
        sys.stdout.flush()
        traceback.print_exc()
        sys.exit(1)


if __name__ == "__main__":
    main()
