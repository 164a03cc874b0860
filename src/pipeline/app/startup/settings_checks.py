"""Settings that cannot work, refused when the run is planned (docs/out-of-core.md, "Settings").

Chunk sizes, memory budgets and every ``compute`` setting are checked before any stage runs
(by the run plan's :func:`pipeline.app.running.plan.validate`),
each failure one paragraph naming the setting: ``dataset.chunk_rows`` (a positive whole
number), ``dataset.memory_budget`` (a size), ``compute.n_workers`` / ``threads_per_worker``
(>= 1), ``compute.timeout`` (> 0 s), ``compute.retries`` (>= 0), ``compute.memory_limit`` (at
least what a worker process needs to start) and ``compute.address`` (a scheduler answers
there: one TCP connection to that address and no other, within a few seconds).
:func:`worker_count` caps a LocalCluster's workers at what the machine's cores and memory hold,
with a log line. The checks take the resolved config (a plain dict) and touch nothing else.
"""

from __future__ import annotations

import logging
import math
import os
import re
import socket

from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

MIN_WORKER_MEMORY = 256 * 2**20  # a Dask worker process (Python, numpy, distributed) before any chunk
ADDRESS_WAIT = 5.0  # seconds at most for the scheduler's port to accept a connection
DASK_SCHEMES = ("tcp", "tls")  # addresses checked here; others (inproc, ucx, ws) are left to Dask


def _whole(value, key: str, low: int, what: str, hint: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidInputError(f"{key}={value!r}: {what}. {hint}")


def check_dataset_settings(ds: dict) -> None:
    """``dataset.chunk_rows`` and ``dataset.memory_budget``, before anything is read."""
    from pipeline.app.data.budget import machine_memory, parse_bytes

    _whole(ds.get("chunk_rows"), "dataset.chunk_rows", 1, "a chunk holds at least one row",
           "Give a positive number of rows per chunk (e.g. dataset.chunk_rows=65536), or null to size chunks from "
           "dataset.memory_budget.")
    budget = ds.get("memory_budget", "auto")
    if budget in (None, "auto"):
        return
    size = parse_bytes(budget)
    if size > machine_memory():
        log.warning("dataset.memory_budget=%s is more than this machine's memory (%.1f GB): data that large are held "
                    "in memory and the run may be killed; a budget below the machine's memory (or auto) keeps it out "
                    "of core", budget, machine_memory() / 1e9)


def check_compute_settings(spec: dict | None) -> None:
    """Every ``compute`` setting: bounds and types, and that ``compute.address`` answers."""
    from pipeline.app.data.budget import parse_bytes

    from pipeline.app.configuration.instantiate import locate

    spec = dict(spec or {})
    backend = locate(spec["_target_"], "compute") if spec.get("_target_") else None  # a misspelt class is named
    cores = available_cores()
    _whole(spec.get("n_workers"), "compute.n_workers", 1, "a Dask LocalCluster needs at least one worker process",
           f"Give compute.n_workers=1 or more (this machine has {cores} cores), or compute=local.")
    _whole(spec.get("threads_per_worker"), "compute.threads_per_worker", 1, "a worker needs at least one thread",
           "Give compute.threads_per_worker=1 or more.")
    _whole(spec.get("retries"), "compute.retries", 0, "a task is re-run 0 or more times", "Give compute.retries=0 or more.")
    timeout = spec.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not math.isfinite(timeout) or timeout <= 0):
        shown = f"{timeout:g}" if isinstance(timeout, (int, float)) else repr(timeout)
        raise InvalidInputError(f"compute.timeout={shown}: seconds to wait for the scheduler must be a positive "
                                "number (e.g. compute.timeout=10).")
    limit = spec.get("memory_limit")
    if limit not in (None, "auto"):
        size = parse_bytes(limit, "compute.memory_limit")
        if size < MIN_WORKER_MEMORY:
            raise InvalidInputError(
                f"compute.memory_limit={limit!r} ({size} bytes) is below what a Dask worker process needs to start "
                f"(about {MIN_WORKER_MEMORY // 2**20} MB: Python, numpy and distributed, before any chunk); its "
                "workers would be paused or killed at once. Give at least compute.memory_limit=256MB (e.g. 2GB), or "
                "auto.")
    reachable = getattr(backend, "check_reachable", None)  # the backend's own check (Dask: its address answers)
    if reachable is not None:
        reachable(spec)


def check_address(address: str, timeout=None) -> None:
    """One TCP connection to ``address`` (``tcp://host:port``), closed at once; none answering
    within ``min(timeout, ADDRESS_WAIT)`` seconds is one paragraph. Nothing else is contacted."""
    given = re.match(r"([a-z0-9+]+)://", address)
    if given and given.group(1) not in DASK_SCHEMES:
        return  # another transport: Dask says whether it answers
    m = re.fullmatch(r"(?:[a-z0-9+]+://)?(?P<host>\[[^\]]+\]|[^:/\[\]]+):(?P<port>\d{1,5})/?", address)
    if not m or not 0 < int(m.group("port")) < 65536:
        raise InvalidInputError(f"compute.address={address}: not a scheduler address; give tcp://<host>:<port> "
                                "(the address `dask scheduler` prints, e.g. tcp://10.0.0.5:8786), or leave "
                                "compute.address unset to start a LocalCluster.")
    host, port = m.group("host").strip("[]"), int(m.group("port"))
    wait = min(float(timeout), ADDRESS_WAIT) if timeout else ADDRESS_WAIT
    try:
        with socket.create_connection((host, port), timeout=wait):
            pass
    except OSError as exc:
        reason = type(exc).__name__ + (f": {exc.strerror or exc}" if str(exc) else "")
        raise InvalidInputError(
            f"compute.address={address}: no Dask scheduler answers there ({reason}; waited at most {wait:g} s). Start "
            "one (`dask scheduler`, or a dask-jobqueue cluster; docs/out-of-core.md) and give its address, or leave "
            "compute.address unset to start a LocalCluster.") from None


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_count(spec: dict, quiet: bool = False) -> int:
    """The LocalCluster's worker processes: ``compute.n_workers`` (default 2), capped so that their
    threads fit this machine's cores and their memory limits its memory (logged when capped,
    unless ``quiet``: the run's plan said it already)."""
    from pipeline.app.data.budget import machine_memory, parse_bytes

    wanted = int(spec.get("n_workers") or 2)
    threads = int(spec.get("threads_per_worker") or 1)
    limit = spec.get("memory_limit")
    per = MIN_WORKER_MEMORY if limit in (None, "auto") else parse_bytes(limit, "compute.memory_limit")
    cores, memory = available_cores(), machine_memory()
    cap = max(1, min(cores // threads, memory // per))
    if wanted > cap and not quiet:
        log.warning("compute.n_workers=%d is more than this machine holds (%d cores at %d threads per worker, %.1f GB "
                    "of memory at %.2f GB per worker): capped at %d workers", wanted, cores, threads, memory / 1e9,
                    per / 1e9, cap)
    return min(wanted, cap)


__all__ = ["available_cores", "check_address", "check_compute_settings", "check_dataset_settings",
           "worker_count"]
