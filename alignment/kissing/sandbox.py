"""Running untrusted Python (programs a model writes) in a child process and reading one global back as JSON.

Protections, layered; which ones held is recorded in every result (`SandboxResult.protections`):
- wall-clock deadline (the whole process group is killed), CPU-time, address-space and file-size limits
  (`resource.setrlimit` in the child), and a process-count limit once the user is unprivileged;
- a fresh network namespace with only a down loopback (`unshare(CLONE_NEWNET)`; needs root or user
  namespaces), so no connection can leave the process even through C code;
- an unprivileged user (`nobody`) when running as root and the interpreter is reachable by that user, so the
  kernel refuses writes to the caller's files;
- an audit-hook shim installed before the program runs (it cannot be removed from Python): sockets,
  subprocesses, `ctypes`, and file writes or deletions outside the working folder raise PermissionError;
- a throwaway working folder, an environment with nothing of the caller's (no keys, no tokens), and the
  program's own output cut at a byte bound (what it prints, and what it writes to sys.stdout.buffer as bytes).
"""

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLONE_NEWNET = 0x40000000
NOBODY = 65534
RESULT_MARKER = "@@sandbox-result@@"

# Runs in the child: install the shim, run the program with its prints bounded, report the global as JSON.
_RUNNER = r"""
import codecs, io, json, os, socket, sys, traceback
marker, entries, max_output = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
real_out = sys.stdout
try:
    names = [name for _, name in socket.if_nameindex()]
except OSError:
    names = []
protections = {"network_namespace": names == ["lo"], "unprivileged_user": os.getuid() != 0}
home = os.path.realpath(os.getcwd())
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

def inside(path):
    if isinstance(path, int):
        return True
    real = os.path.realpath(os.fsdecode(path))
    return real == home or real.startswith(home + os.sep)

def shim(event, args):
    if event == "open" and args[0] is not None:
        mode, flags = args[1], args[2]
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool(flags & WRITE_FLAGS)
        if writing and not inside(args[0]):
            raise PermissionError(f"sandbox: writing {args[0]!r} outside the working folder is not allowed")
    elif event in ("os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate", "os.symlink", "os.link",
                   "shutil.rmtree", "os.utime"):
        if not inside(args[0]):
            raise PermissionError(f"sandbox: {event} on {args[0]!r} outside the working folder is not allowed")
    elif event == "os.rename":
        if not (inside(args[0]) and inside(args[1])):
            raise PermissionError("sandbox: renaming across the working folder is not allowed")
    elif event.startswith("socket."):
        raise PermissionError(f"sandbox: network access ({event}) is not allowed")
    elif event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                   "pty.spawn", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata"):
        raise PermissionError(f"sandbox: {event} is not allowed")

class BoundedBytes(io.RawIOBase):  # sys.stdout.buffer: bytes decoded as UTF-8 into the bounded text
    def __init__(self, text):
        self.text, self.decoder = text, codecs.getincrementaldecoder("utf-8")("replace")
    def writable(self):
        return True
    def write(self, data):
        data = bytes(data)
        self.text.write(self.decoder.decode(data))
        return len(data)

class Bounded(io.TextIOBase):
    encoding, errors = "utf-8", "replace"
    def __init__(self):
        self.parts, self.size = [], 0
        self.buffer = BoundedBytes(self)
    def writable(self):
        return True
    def write(self, text):
        if self.size < max_output:
            self.parts.append(text[: max_output - self.size])
        self.size += len(text)
        return len(text)
    def text(self):
        return "".join(self.parts)

def plain(value):  # array-likes as nested lists of Python numbers, numpy scalars inside lists included
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value

try:  # numpy loads its C libraries through ctypes, which the shim forbids afterwards
    import numpy
except ImportError:
    pass
printed = Bounded()
result = {"protections": protections}
sys.addaudithook(shim)
sys.stdout = sys.stderr = printed
try:
    namespace = {"__name__": "__main__", "__file__": "program.py"}
    with open("program.py", encoding="utf-8", errors="strict") as f:
        code = compile(f.read(), "program.py", "exec")
    exec(code, namespace)
    value, found = None, None
    for entry in entries:  # "name": a global; "name()": call it; "name()[0]": call it, first item of a tuple or list
        first = entry.endswith("[0]")
        name = entry[:-3] if first else entry
        if name.endswith("()"):
            if not callable(namespace.get(name[:-2])):
                continue
            value = namespace[name[:-2]]()
            if first and isinstance(value, (list, tuple)) and len(value) >= 1:
                value = value[0]
        elif name in namespace:
            value = namespace[name]
        if value is not None:
            found = entry
            break
    if found is None:
        names = [e.replace("[0]", "") if "(" in e else f"a global `{e}`" for e in entries]
        result["error"] = f"the program defines no global `{entries[0]}`" if len(entries) == 1 else (
            f"the program defines none of {', '.join(names[:-1])} or {names[-1]}")
    else:
        result["entry"] = found
        try:
            text = json.dumps(plain(value))
        except (TypeError, ValueError) as exc:  # e.g. an integer of more than 4300 digits, or an object
            result["error"] = f"`{found}` cannot be sent back as JSON: {exc}"
        else:
            if len(text) > max_output:
                result["error"] = f"`{found}` is {len(text)} bytes as JSON, over the {max_output}-byte limit"
            else:
                result["value"] = json.loads(text)
except MemoryError:
    result["error"] = "MemoryError: the program went over the memory limit"
except SystemExit as exc:
    result["error"] = f"the program called exit({exc.code!r})"
except BaseException as exc:
    lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == "program.py"]
    where = f" (program.py line {lines[-1]})" if lines else ""
    result["error"] = f"{type(exc).__name__}: {exc}"[:2000] + where
result["output"] = printed.text()[-max_output:]
sys.stdout = real_out
real_out.write("\n" + marker + json.dumps(result, ensure_ascii=True) + "\n")
real_out.flush()
"""


@dataclass
class SandboxLimits:
    timeout_s: float = 30.0  # wall clock, start to finish
    memory_bytes: int = 2 * 1024**3  # address space (RLIMIT_AS)
    max_output_bytes: int = 4 * 1024**2  # the program's own prints, and the JSON of the value
    max_file_bytes: int = 16 * 1024**2  # any file it writes (RLIMIT_FSIZE)

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_bytes", "max_output_bytes", "max_file_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")


@dataclass
class SandboxResult:
    value: Any = None  # the global, as JSON gives it back; None when `error` is set
    error: str | None = None  # why no value: the program's exception, a timeout, a crash, unreadable output
    output: str = ""  # what the program printed (bounded, undecodable bytes replaced)
    elapsed_s: float = 0.0
    protections: dict[str, Any] = field(default_factory=dict)
    entry: str | None = None  # which of the entries asked for gave the value

    @property
    def ok(self) -> bool:
        return self.error is None


_drop_user_works: bool | None = None  # learned on the first run: can `nobody` execute this interpreter?
_UNREACHABLE = 126  # the launcher's exit status when `nobody` cannot execute the interpreter

# The child's limits are set by a small launcher that then execs the runner, not by a preexec_fn: Python code
# between fork and exec can deadlock in a process with other threads (an environment's steps run in threads), and
# this way nothing but C runs there. Its arguments: CPU seconds, address space, file size, drop the user (0/1).
_LAUNCHER = f"""
import ctypes, os, resource, sys
cpu, memory, files, drop = map(int, sys.argv[1:5])
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
resource.setrlimit(resource.RLIMIT_FSIZE, (files, files))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
ctypes.CDLL(None, use_errno=True).unshare({CLONE_NEWNET})  # fails quietly without privileges
if drop:
    os.setgroups([])
    os.setgid({NOBODY})
    os.setuid({NOBODY})
    resource.setrlimit(resource.RLIMIT_NPROC, (64, 64))  # counts per user: meaningless for root
try:
    os.execv(sys.argv[5], sys.argv[5:])
except PermissionError:
    os._exit({_UNREACHABLE})
"""


def _scrubbed_env(home: Path) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "TMPDIR": str(home),
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
    }


def _read_bounded(proc: subprocess.Popen[bytes], deadline: float, max_bytes: int) -> tuple[bytes, str | None]:
    """Read the child's stdout until it closes, the deadline passes or it says too much; kill it in the last two."""
    assert proc.stdout is not None
    chunks: list[bytes] = []
    size = 0
    problem = None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                problem = "timeout"
                break
            if not selector.select(timeout=left):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                problem = f"the program wrote more than {max_bytes} bytes of output"
                break
    if problem:
        _kill_group(proc)
    return b"".join(chunks), problem


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _start(command: list[str], cwd: Path, limits: SandboxLimits, drop_user: bool) -> subprocess.Popen[bytes]:
    sizes = [int(limits.timeout_s) + 1, limits.memory_bytes, limits.max_file_bytes, int(drop_user)]
    return subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _LAUNCHER, *map(str, sizes), *command],
        cwd=cwd,
        env=_scrubbed_env(cwd),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _run(command: list[str], cwd: Path, limits: SandboxLimits, drop_user: bool) -> tuple[bytes, str | None, int]:
    """The child's output, what cut it short (None, "timeout", too much output) and its exit status."""
    start = time.monotonic()
    proc = _start(command, cwd, limits, drop_user)
    try:
        raw, problem = _read_bounded(proc, start + limits.timeout_s, 3 * limits.max_output_bytes + 65536)
    finally:
        _kill_group(proc)  # nothing it started outlives the run
        returncode = proc.wait()
    return raw, problem, returncode


def run_untrusted(source: str, variable: str | Sequence[str], limits: SandboxLimits | None = None) -> SandboxResult:
    """Run `source` as program.py in a throwaway folder and return its global `variable` (JSON-converted;
    numpy arrays and scalars through `.tolist()`). `variable` may be a list of entries tried in order, the first
    that gives something other than None wins: "name" a global, "name()" a function's result, "name()[0]" the
    first item of a function's tuple or list (SandboxResult.entry says which). A bad program is a result with
    `error` set, never an exception here."""
    entries = [variable] if isinstance(variable, str) else list(variable)
    if not entries:
        raise ValueError("run_untrusted needs at least one entry to read back")
    global _drop_user_works
    limits = limits or SandboxLimits()
    with tempfile.TemporaryDirectory(prefix="sandbox-") as tmp:
        folder = Path(tmp)
        (folder / "program.py").write_text(source, encoding="utf-8", errors="surrogateescape")
        command = [
            sys.executable,
            "-I",
            "-c",
            _RUNNER,
            RESULT_MARKER,
            json.dumps(entries),
            str(limits.max_output_bytes),
        ]
        drop_user = os.getuid() == 0 and _drop_user_works is not False
        if drop_user:
            shutil.chown(folder, NOBODY, NOBODY)
            (folder / "program.py").chmod(0o644)
        start = time.monotonic()
        raw, problem, returncode = _run(command, folder, limits, drop_user)
        if drop_user and returncode == _UNREACHABLE and not raw:  # `nobody` cannot reach the interpreter (e.g. it
            _drop_user_works = False  # lives in the root user's home): run as this user, the other layers hold
            raw, problem, returncode = _run(command, folder, limits, drop_user=False)
        elif drop_user:
            _drop_user_works = True
        elapsed = time.monotonic() - start
    protections = {
        "wall_clock_s": limits.timeout_s,
        "memory_bytes": limits.memory_bytes,
        "file_bytes": limits.max_file_bytes,
        "output_bytes": limits.max_output_bytes,
        "audit_hook": True,
        "scrubbed_env": True,
        "temp_folder": True,
    }
    text = raw.decode("utf-8", errors="replace")
    if problem == "timeout":
        return SandboxResult(
            error=f"timed out after {limits.timeout_s:g} s (wall clock)",
            output=text[-2000:],
            elapsed_s=elapsed,
            protections=protections,
        )
    if problem:
        return SandboxResult(error=problem, output=text[-2000:], elapsed_s=elapsed, protections=protections)
    head, marker, tail = text.rpartition(RESULT_MARKER)
    if not marker:
        return SandboxResult(
            error=_death_message(returncode), output=text[-2000:], elapsed_s=elapsed, protections=protections
        )
    try:
        report = json.loads(tail)
    except json.JSONDecodeError:
        return SandboxResult(
            error="the program's result could not be read (its output was interleaved)",
            output=text[-2000:],
            elapsed_s=elapsed,
            protections=protections,
        )
    protections |= report.get("protections", {})
    return SandboxResult(
        value=report.get("value"),
        error=report.get("error"),
        output=report.get("output", ""),
        elapsed_s=elapsed,
        protections=protections,
        entry=report.get("entry"),
    )


def _death_message(returncode: int) -> str:
    if returncode == -signal.SIGXCPU or returncode == -signal.SIGKILL:
        return f"the program was killed (signal {-returncode}): CPU-time limit or out of memory"
    if returncode < 0:
        return f"the program was killed by signal {-returncode}"
    return f"the program exited with status {returncode} before reporting a result"
