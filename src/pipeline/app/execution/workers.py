"""Work handed to spawned processes, with its log lines brought back: the one place worker
processes are started (:func:`spawn_pool`), for the run's executor (:mod:`pipeline.app.execution.executor`).

A stage that runs ahead (:class:`pipeline.app.stages.framework.RunAhead`: the CAV fits while
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
    finally:
        _release_memory()


def _release_memory() -> None:
    """In the worker, after each call: hand the freed heap back to the system (glibc keeps it for
    the process otherwise), so a worker kept for the run's next stage ahead holds its imports,
    not the last call's garbage."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def spawn_pool(workers: int, what: str) -> ProcessPoolExecutor | None:
    """A pool of ``workers`` spawned processes for ``what``, or None (logged, with why) where none can
    start: a program started as a script (``python script.py``) whose workers would run it again,
    or a sandbox without processes. The one place worker processes are started (stages computed
    ahead, figures encoded): the caller then does the work in this process."""
    if not main_is_importable():
        log.info("%s in this process: a worker process would run this program's script again (%s)", what,
                 getattr(sys.modules.get("__main__"), "__file__", "?"))
        return None
    try:
        return ProcessPoolExecutor(int(workers), mp_context=multiprocessing.get_context("spawn"))
    except (OSError, ValueError) as exc:  # no processes here (a sandbox)
        log.info("%s in this process: no worker process could start (%s)", what, exc)
        return None


def import_modules(modules: tuple[str, ...]) -> None:
    """In a worker: import ``modules`` before the work arrives."""
    import importlib

    for name in modules:
        importlib.import_module(name)


def pool_processes(pool: ProcessPoolExecutor) -> list:
    """The worker processes of a process pool (its own table, copied at once: the pool's thread
    may change it meanwhile)."""
    return list((getattr(pool, "_processes", None) or {}).values())


def kill_pool(pool: ProcessPoolExecutor) -> None:
    """Stop a process pool now: its processes killed and reaped, its queued work cancelled (for
    workers that hold nothing to keep, or a pool one of whose workers died)."""
    processes = pool_processes(pool)
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.kill()
    # The pool's own thread reaps its processes too: wait for it, or a process it reaped but has not
    # yet marked would still read as alive here (waitpid answers "no such child").
    if manager is not None:
        manager.join(timeout=10)
    for process in processes:
        process.join(timeout=10)


class WorkerCall:
    """``fn(*args)`` handed to the worker of ``pool`` under the run's thread cap, at once: the caller
    goes on, and :meth:`result` waits for it, logs the worker's records here (in order) and returns
    the value, raises what ``fn`` raised, or :class:`WorkerLost` when no worker could do it (the
    process died, or ``fn`` or its arguments do not pickle)."""

    def __init__(self, pool: ProcessPoolExecutor | None, fn, args: tuple, threads: int | None = None) -> None:
        self._future, self._lost = None, None
        if pool is None:  # none could start (spawn_pool said why)
            self._lost = WorkerLost("no worker process could run it (OSError: no worker process)")
            return
        try:
            self._future = pool.submit(_call, fn, args, threads, logging.getLogger().getEffectiveLevel())
        except Exception as exc:  # noqa: BLE001 - a pool broken or shut down: the caller computes it
            self._lost = WorkerLost(f"no worker process could run it ({type(exc).__name__}: {exc})")

    def wait(self) -> None:
        """Wait until the worker is done with it (its result or its loss: :meth:`result` says which)."""
        if self._future is not None:
            try:
                self._future.exception()
            except BaseException:  # noqa: BLE001 - cancelled: result() says so
                pass

    def result(self):
        if self._lost is not None:
            raise self._lost
        try:
            ok, value, records = self._future.result()
        except BrokenProcessPool as exc:
            raise WorkerLost(f"the worker process died ({exc})") from None
        except Exception as exc:  # noqa: BLE001 - fn's own errors come back as values: this is the hand-over
            raise WorkerLost(f"no worker process could run it ({type(exc).__name__}: {exc})") from None
        for record in records:
            logging.getLogger(record.name).handle(record)
        if not ok:
            raise value
        return value


def call_in_worker(fn, *args, threads: int | None = None, pool: ProcessPoolExecutor | None = None):
    """``fn(*args)`` in a spawned process of its own (``pool``, a one-process pool started earlier,
    if given; it is shut down after): :meth:`WorkerCall.result`, waited for."""
    pool = pool or spawn_pool(1, "the stage is computed")
    try:
        return WorkerCall(pool, fn, args, threads).result()
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
