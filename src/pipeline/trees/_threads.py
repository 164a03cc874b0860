"""One thread setting for every compiled kernel, BLAS call and torch op an estimator runs.

``n_jobs`` follows scikit-learn: ``None`` means the library default (all cores the process
may use), a positive integer that many threads, ``-1`` all cores.
"""

from __future__ import annotations

import contextlib
import os


def resolve_n_jobs(n_jobs) -> int:
    """The number of threads ``n_jobs`` stands for (at least 1)."""
    n_cpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if n_jobs is None or n_jobs == -1:
        return n_cpu
    n_jobs = int(n_jobs)
    if n_jobs < 0:
        return max(1, n_cpu + 1 + n_jobs)
    return max(1, min(n_jobs, n_cpu))


@contextlib.contextmanager
def limit_threads(n_jobs):
    """Run the body with numba kernels and BLAS/OpenMP pools capped at ``resolve_n_jobs(n_jobs)``."""
    from threadpoolctl import threadpool_limits

    n = resolve_n_jobs(n_jobs)
    previous = None
    try:
        import numba

        previous = numba.get_num_threads()
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    except ImportError:  # pragma: no cover - numba is a declared dependency
        pass
    try:
        with threadpool_limits(limits=n):
            yield n
    finally:
        if previous is not None:
            import numba

            numba.set_num_threads(previous)
