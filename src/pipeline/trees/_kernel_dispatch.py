"""What every compiled tree kernel shares: whether numba is there, and the choice per call between a
``prange`` kernel and its serial twin (:class:`SizeDispatch`, :func:`parallel_min_work`,
:func:`serial_below`).

The kernels themselves live by what they do: :mod:`pipeline.trees._clique_kernels` (clique-graph
sweeps), :mod:`pipeline.trees._graph_kernels` (sweeps on any graph), :mod:`pipeline.trees._row_kernels`
(a node's sorted orders split, filtered, grouped; sort keys) and :mod:`pipeline.trees._apply_kernels`
(a fitted tree applied to rows); :mod:`pipeline.trees._kernels` imports them all.
"""

from __future__ import annotations

import contextlib
import contextvars

try:  # pragma: no cover - exercised implicitly
    import numba

    AVAILABLE = True
except ImportError:  # pragma: no cover
    AVAILABLE = False

_SLACK = 1.0 + 1e-9  # prefilter margin of the sweeps, far above float rounding; exact scores decide

PARALLEL_MIN_WORK = 1 << 17  # below this many elements a kernel runs serially: waking threads costs more
_MIN_WORK: contextvars.ContextVar[int] = contextvars.ContextVar("parallel_min_work", default=PARALLEL_MIN_WORK)


def parallel_min_work() -> int:
    """The input size (elements) below which kernels take their serial twins and the centre
    trees their small-input path: :data:`PARALLEL_MIN_WORK` unless a :func:`serial_below`
    block says otherwise."""
    return _MIN_WORK.get()


@contextlib.contextmanager
def serial_below(min_work: int):
    """Run the body with ``min_work`` as :func:`parallel_min_work` (0: every kernel call takes
    its ``prange`` path and no estimator its small-input path; the results are the same)."""
    token = _MIN_WORK.set(int(min_work))
    try:
        yield
    finally:
        _MIN_WORK.reset(token)


class SizeDispatch:
    """A ``prange`` kernel and its serial twin, chosen per call.

    The serial twin (the same Python source compiled without ``parallel``) runs when the
    current thread setting is 1 or the call is small (``args[work_arg].size`` below
    :func:`parallel_min_work`): a parallel launch wakes the thread pool, which costs
    microseconds on an idle machine and milliseconds on a busy one, more than a small node's
    whole sweep. Both compile to the same arithmetic, so results do not depend on the choice.
    """

    def __init__(self, kernel, work_arg: int = 0):
        import types

        f = kernel.py_func
        twin = types.FunctionType(f.__code__, f.__globals__, f.__name__ + "_serial", f.__defaults__, f.__closure__)
        twin.__qualname__ = f.__qualname__ + "_serial"  # its own on-disk cache entry
        twin.__doc__ = f.__doc__
        self.parallel = kernel
        fastmath = kernel.targetoptions.get("fastmath", False)  # the twin keeps the kernel's float flags
        self.serial = numba.njit(cache=True, nogil=True, fastmath=fastmath)(twin)
        self.work_arg = work_arg
        self.__doc__ = f.__doc__
        self.__name__ = f.__name__

    def __call__(self, *args):
        if args[self.work_arg].size < _MIN_WORK.get() or numba.get_num_threads() == 1:
            return self.serial(*args)
        return self.parallel(*args)
