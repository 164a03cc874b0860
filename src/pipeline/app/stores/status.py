"""A run's ``status.json``: running / ok / failed, and *interrupted* for runs that died.

A killed run (SIGKILL, power cut, a cluster job past its time limit) cannot write its own
final status, so "running" used to stay forever. The running status therefore records the
process id, the host and the process's start time; whenever a status is read
(:func:`effective_status`) or a new run starts (:func:`mark_interrupted`), a "running" status
whose process no longer exists on this host is reported, and rewritten, as "interrupted".
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time
from importlib import metadata
from pathlib import Path

#: where run directories live under ``paths.log_dir`` (hydra.run.dir / hydra.sweep.dir + job)
_PATTERNS = ("runs/*/*/status.json", "multiruns/*/*/*/status.json")


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux ``/proc``), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def running_status(started: float | None = None) -> dict:
    """The status a run writes when it starts."""
    pid = os.getpid()
    return {"status": "running", "started": time.time() if started is None else started, "pid": pid,
            "host": socket.gethostname(), "pid_start": _start_ticks(pid)}


#: the packages whose versions decide a run's numbers (floating-point paths, defaults)
NUMERIC_PACKAGES = ("numpy", "scipy", "scikit-learn", "torch", "numba")


def numerics(threads: int | None = None, cpu_code_path: str | None = None, pinned: bool | None = None) -> dict:
    """What decides a run's numbers beyond its config: package versions, the ``threads``
    setting, torch's thread counts (when torch was used), every BLAS / OpenMP library
    loaded with its thread count (threadpoolctl), and the CPU code paths (``cpu_code_path``:
    the setting, whether the process runs it, the variables that pin it and torch's CPU
    capability). Same config and same record on the same machine: same bytes. Never imports torch."""
    versions = {}
    for name in NUMERIC_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    record = {"python": platform.python_version(), "platform": platform.platform(), "cpu_count": os.cpu_count(),
              "threads": threads, "versions": versions}
    from pipeline.threads import PORTABLE_CODE_PATH

    torch = sys.modules.get("torch")
    record["cpu_code_path"] = {"setting": cpu_code_path, "pinned": pinned,
                               "environment": {name: os.environ.get(name) for name in PORTABLE_CODE_PATH},
                               "torch_capability": torch.backends.cpu.get_cpu_capability() if torch is not None else None}
    if torch is not None:
        record["torch_threads"] = {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}
    from threadpoolctl import threadpool_info

    record["thread_pools"] = [{k: lib.get(k) for k in ("user_api", "internal_api", "version", "num_threads",
                                                       "threading_layer", "architecture", "prefix")}
                              for lib in threadpool_info()]
    return record


def process_alive(status: dict) -> bool | None:
    """Whether the process that wrote ``status`` still runs; None when that cannot be told here."""
    pid = status.get("pid")
    if not isinstance(pid, int) or status.get("host") != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    recorded, now = status.get("pid_start"), _start_ticks(pid)
    return not (recorded is not None and now is not None and recorded != now)  # a reused pid is another process


def effective_status(status: dict) -> str:
    """``status["status"]``, except "interrupted" for a "running" run whose process is gone."""
    state = status.get("status", "unknown")
    if state == "running" and process_alive(status) is False:
        return "interrupted"
    return state


def read_status(path: Path) -> dict:
    """A status file with its effective status (an unreadable file counts as "unknown")."""
    try:
        status = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {"status": "unknown"}
    status["status"] = effective_status(status)
    return status


def status_files(log_dir: str | os.PathLike):
    """Every run's ``status.json`` under ``log_dir`` (runs and sweep jobs); none if it is missing."""
    root = Path(log_dir)
    if root.is_dir():
        for pattern in _PATTERNS:
            yield from root.glob(pattern)


def mark_interrupted(log_dir: str | os.PathLike) -> list[Path]:
    """Rewrite every "running" status under ``log_dir`` whose process died as "interrupted"."""
    from pipeline.app.stores.writing import atomic_write

    changed = []
    for path in status_files(log_dir):
        try:
            status = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if status.get("status") == "running" and effective_status(status) == "interrupted":
            status.update(status="interrupted", noticed=time.time(),
                          error="the process ended without reporting (killed, out of memory or time, power cut)")
            atomic_write(path, json.dumps(status, indent=1, default=str))
            changed.append(path)
    return changed


def remove_stale_temporaries(log_dir: str | os.PathLike) -> list[Path]:
    """Delete the temporary files (``.<name>.<hex>.tmp``, see ``atomic_write``) that runs under
    ``log_dir`` which are no longer running left behind (a kill or a crash between write and
    rename); a running run's temporaries are left alone. Returns the removed paths."""
    removed = []
    for status_path in status_files(log_dir):
        if read_status(status_path)["status"] == "running":
            continue
        for tmp in status_path.parent.rglob(".*.tmp"):
            try:
                tmp.unlink()
            except OSError:
                continue
            removed.append(tmp)
    return removed
