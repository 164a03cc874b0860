"""Work handed to a spawned process of its own, with its log lines brought back.

A stage that runs ahead (:attr:`pipeline.app.stages.framework.Stage.ahead`: the CAV fits while
the clustering is fitted) computes in a worker process rather than a thread: a thread would take
Python's GIL from the stage loop on every small call, and it would change the process-wide
BLAS/OpenMP limits (threadpoolctl) under the loop's own computations, whose results could then
depend on the timing. The worker runs the same code under the run's thread cap; its log records
are handed back and logged here, in order, as if the work had run in this process.

Spawned, not forked: a fork would copy the page tables of a run holding gigabytes, and the
children's resident sets would count those pages again; a forked child of a process whose
OpenMP threads have run can also hang.
"""

from __future__ import annotations

import logging
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

log = logging.getLogger(__name__)


class WorkerLost(RuntimeError):
    """No worker process returned: it died (killed, out of memory), could not start, or the work
    did not pickle. The caller computes it itself."""


def main_is_importable() -> bool:
    """Whether a spawned process can start without running the program again: a spawned child
    imports the main script (``python script.py``) unless it is a package's ``__main__``
    (``python -m pipeline``, ``python -m pytest``) or there is none (a notebook, a REPL); a script
    without an ``if __name__ == "__main__":`` guard would run its whole work again in each worker."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return getattr(main, "__file__", None) is None or (spec is not None and spec.name.endswith("__main__"))


class _Records(logging.Handler):
    """Keeps the worker's log records, their messages formatted (arguments need not pickle)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        record.msg, record.args = record.getMessage(), None
        if record.exc_info:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        self.records.append(record)


def _call(fn, args: tuple, threads: int | None, level: int):
    """In the worker: ``fn(*args)`` under the run's thread cap; (ok, value or exception, records)."""
    from pipeline.threads import run_threads

    handler = _Records()
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
    try:
        with run_threads(threads):
            return True, fn(*args), handler.records
    except Exception as exc:  # noqa: BLE001 - raised again in the caller, with the worker's records logged first
        try:
            import pickle

            pickle.dumps(exc)
        except Exception:  # noqa: BLE001 - an exception that cannot travel: its type and message do
            exc = RuntimeError(f"{type(exc).__name__}: {exc}")
        return False, exc, handler.records


_warm: list[ProcessPoolExecutor] = []  # a worker started early (warm_worker), for the next call_in_worker


def _import(modules: tuple[str, ...]) -> None:
    import importlib

    for name in modules:
        importlib.import_module(name)


def warm_worker(modules: tuple[str, ...]) -> None:
    """Start a worker now and have it import ``modules`` while this process goes on; the next
    :func:`call_in_worker` uses it (a worker takes ~2-3 s to start and import scikit-learn).
    :func:`release_workers` stops one that no call took."""
    if _warm or not main_is_importable():
        return
    try:
        pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        pool.submit(_import, tuple(modules))
    except (OSError, ValueError) as exc:  # no processes here (a sandbox): call_in_worker will say so
        log.debug("no worker started early: %s", exc)
        return
    _warm.append(pool)


def pool_processes(pool: ProcessPoolExecutor) -> list:
    """The worker processes of a process pool (its own table, copied at once: the pool's thread
    may change it meanwhile)."""
    return list((getattr(pool, "_processes", None) or {}).values())


def kill_pool(pool: ProcessPoolExecutor) -> None:
    """Stop a process pool now: its processes killed and reaped, its queued work cancelled (for
    workers that hold nothing to keep, or a pool one of whose workers died)."""
    processes = pool_processes(pool)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.kill()
        process.join(timeout=10)


def release_workers() -> None:
    """Stop a worker :func:`warm_worker` started that no call took (killed: it holds nothing but
    imports, and the exit would otherwise wait for them)."""
    while _warm:
        kill_pool(_warm.pop())


def call_in_worker(fn, *args, threads: int | None = None):
    """``fn(*args)`` in a spawned process of its own (the one :func:`warm_worker` started, if any);
    its log records are logged here. Raises what ``fn`` raised, or :class:`WorkerLost` when no
    worker could do it (the process died, or could not start, or ``fn`` or its arguments do not
    pickle)."""
    level = logging.getLogger().getEffectiveLevel()
    try:
        pool = _warm.pop() if _warm else ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        with pool:
            ok, value, records = pool.submit(_call, fn, args, threads, level).result()
    except BrokenProcessPool as exc:
        raise WorkerLost(f"the worker process died ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - fn's own errors come back as values: this is the hand-over
        raise WorkerLost(f"no worker process could run it ({type(exc).__name__}: {exc})") from None
    for record in records:
        logging.getLogger(record.name).handle(record)
    if not ok:
        raise value
    return value
