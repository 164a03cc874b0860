"""The one home of thread counts: numba's kernels, the BLAS/OpenMP pools (threadpoolctl) and torch.

Every thread decision of the package is made here; the estimators (``n_jobs``), the CAV
fitter, the runner (``threads=``), the run's executor (its figure workers: :func:`worker_processes`),
the application's file work beside the main thread (:func:`helper_threads`) and the entry point
``python -m pipeline`` (the OpenMP environment) ask this module and set nothing themselves.

``n_jobs`` follows scikit-learn: a positive integer means that many threads, ``-1`` all
cores, ``-2`` all but one, and ``None`` the setting of the enclosing :func:`limit_threads`
block if there is one (so a pipeline's ``threads`` reaches every estimator it fits), else
the cores that other processes leave idle (:func:`idle_cores`), never more than the process
was started with (:func:`process_cap`, ``NUMBA_NUM_THREADS``): a fork-join kernel is only
as fast as its slowest thread, and on a machine whose cores are busy with other work two
threads measured 1.2-1.8x *slower* than one (IMM and SpEx-Clique on 50k x 512, load 2.5-3.5
on 2 cores), because every parallel region waits for a thread the OS has descheduled.

Inside the block numba's thread count (when numba is already imported: the compiled kernels'
modules import it, so fitting MMDT or CART never does), the BLAS/OpenMP pools (threadpoolctl)
and torch's intra-op threads (when torch is already imported) are all capped at the same
number; everything is restored on exit. Kernels that choose a serial path for small inputs
ask :func:`current_threads`. The OpenMP variables a process should start with are
:func:`openmp_environment` (the application layer writes them; this module never touches
``os.environ``).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

_ACTIVE: contextvars.ContextVar[int | None] = contextvars.ContextVar("pipeline_threads", default=None)
_CAPPED: contextvars.ContextVar[bool] = contextvars.ContextVar("pipeline_threads_capped", default=False)  # BLAS too
_CONTROLLER: list = [None, None]  # threadpoolctl controller, the shared objects loaded when it was built


def _loaded_objects():
    """A key that changes whenever a shared library is loaded or unloaded: glibc's counters of
    ``dlopen``/``dlclose`` calls (``dlpi_adds``/``dlpi_subs``, read from the first entry of
    ``dl_iterate_phdr``; under 1 us, no file read). Elsewhere the number of Python modules, an
    over-eager proxy (a pure-Python import rebuilds the controller too)."""
    reader = _PHDR_READER[0]
    if reader is None:
        reader = _PHDR_READER[0] = _phdr_reader()
    return reader() if reader else ("modules", len(sys.modules))


def _phdr_reader():
    import ctypes

    class Info(ctypes.Structure):  # the leading fields of glibc's struct dl_phdr_info
        _fields_ = [("addr", ctypes.c_void_p), ("name", ctypes.c_char_p), ("phdr", ctypes.c_void_p),
                    ("phnum", ctypes.c_uint16), ("adds", ctypes.c_ulonglong), ("subs", ctypes.c_ulonglong)]

    try:
        iterate = ctypes.CDLL(None).dl_iterate_phdr
    except (OSError, AttributeError):  # not glibc/ELF (macOS, Windows)
        return False
    seen: list = [None]

    def first(info, size, _data):
        # older C libraries pass a shorter struct without the counters
        seen[0] = (info.contents.adds, info.contents.subs) if size >= ctypes.sizeof(Info) else None
        return 1  # stop after the first object: the counters are global

    callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Info), ctypes.c_size_t, ctypes.c_void_p)(first)
    iterate(callback, None)
    if seen[0] is None:
        return False

    def read():
        iterate(callback, None)
        return seen[0]
    return read


_PHDR_READER: list = [None]  # the counter reader, built on first use; False where there is none


def _controller():
    """A cached ``ThreadpoolController``: building one scans the process's shared libraries
    (``/proc/self/maps``, ~3 ms, more than a whole small tree fit); rebuilt only when a shared
    library was loaded or unloaded since (:func:`_loaded_objects`), so a fit that imports a
    pure-Python module reads no file."""
    from threadpoolctl import ThreadpoolController

    key = _loaded_objects()
    if _CONTROLLER[0] is None or _CONTROLLER[1] != key:
        _CONTROLLER[0] = ThreadpoolController()
        _CONTROLLER[1] = key
    return _CONTROLLER[0]


#: Below this much work (elements of a kernel's input, multiply-adds of a matrix product) a
#: block runs single-threaded whatever the setting: numba kernels take their serial twins
#: (``PARALLEL_MIN_WORK`` is larger) and OpenBLAS threads a product only above 4 * 65536
#: multiply-adds. Capping the BLAS pools is then pointless.
LIGHT_WORK = 1 << 16


def available_cores() -> int:
    """Cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def worker_processes(threads: int | None) -> int:
    """Worker processes a run with ``threads`` (its ``threads=`` setting) gives work that runs beside
    it in processes of its own (the report's figures): one per thread, every core for None; 1
    means the work is done in the run's own process."""
    return int(threads) if threads is not None else available_cores()


def helper_threads(threads: int | None, wanted: int = 2) -> int:
    """Threads a run with ``threads`` may start beside its main one for work that leaves Python's
    GIL (compressing, hashing, writing files, sorting): none on one thread (the work is done in
    line, when it is reached), else ``wanted``."""
    return 0 if threads == 1 else int(wanted)


_POOL: list = []  # the process's pool of kernel threads, made at the first call that wants one
_POOL_LOCK = threading.Lock()
_IN_POOL = threading.local()


def map_blocks(fn, blocks: list) -> list:
    """``[fn(b) for b in blocks]``, the blocks at once on this thread and a kept pool of threads
    (``fn`` is a compiled kernel that releases the GIL; the caller chose ``len(blocks)`` threads).

    The pool is made once per process, like BLAS's and numba's own: starting threads for every
    call took ~30 ms a thread on a busy machine (half a second per million rows of a chunked pass).
    A call from inside the pool runs its blocks one after another (no thread waits on its own pool).
    """
    if len(blocks) <= 1 or getattr(_IN_POOL, "busy", False):
        return [fn(b) for b in blocks]
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max(1, available_cores() - 1), thread_name_prefix="pipeline-kernel",
                                            initializer=_mark_pool_thread))
        pool = _POOL[0]
    futures = [pool.submit(fn, b) for b in blocks[1:]]
    first = fn(blocks[0])
    return [first, *(f.result() for f in futures)]


def _forget_pool_in_child() -> None:
    """A forked child has none of its parent's threads: it makes its own pool (and lock)."""
    global _POOL_LOCK
    _POOL_LOCK = threading.Lock()
    _POOL.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def _mark_pool_thread() -> None:
    _IN_POOL.busy = True


def idle_cores() -> int:
    """Cores not taken by other processes: all cores minus the 1-minute load average of the
    rest of the machine (this process counts as one runnable task), at least 1."""
    n_cpu = available_cores()
    try:
        others = max(0.0, os.getloadavg()[0] - 1.0)
    except (AttributeError, OSError):  # pragma: no cover - platforms without a load average
        return n_cpu
    return max(1, min(n_cpu, int(n_cpu - others + 0.5)))


def process_cap() -> int:
    """The thread count the process was started with for compiled kernels: numba's
    ``NUMBA_NUM_THREADS`` (its reading of the environment; all cores unless the user capped it),
    once numba is loaded.

    ``n_jobs=None`` outside a :func:`limit_threads` block never goes above it: a harness that
    starts a process with ``NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1`` gets one thread everywhere,
    BLAS included (threadpoolctl would otherwise raise the BLAS pools to the idle cores).
    """
    numba = sys.modules.get("numba")  # loaded by every compiled kernel module; not imported here
    return max(1, int(numba.config.NUMBA_NUM_THREADS)) if numba is not None else available_cores()


def resolve_n_jobs(n_jobs) -> int:
    """The number of threads ``n_jobs`` stands for (at least 1)."""
    n_cpu = available_cores()
    if n_jobs is None:
        active = _ACTIVE.get()
        return min(idle_cores(), process_cap()) if active is None else active
    if n_jobs == -1:
        return n_cpu
    n_jobs = int(n_jobs)
    if n_jobs < 0:
        return max(1, n_cpu + 1 + n_jobs)
    return max(1, min(n_jobs, n_cpu))


def current_threads() -> int:
    """Threads the compiled kernels may use right now (the active limit, else the idle cores)."""
    return resolve_n_jobs(None)


def map_shared(fn, items: list):
    """``fn`` of each item, in order, the items shared among the run's threads
    (:func:`current_threads`); one thread: here, one after another. Each item carries its own
    random draws, so any count of threads gives the same results."""
    n = min(current_threads(), len(items))
    if n <= 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(max_workers=n) as pool:
        yield from pool.map(fn, items)


@contextlib.contextmanager
def thread_setting(n_jobs):
    """Make ``resolve_n_jobs(n_jobs)`` the setting that every estimator fitted inside the block
    with ``n_jobs=None`` takes (a pipeline run's ``threads``). No pool is touched here, and
    numba is not imported: each fit caps numba, BLAS and torch when it starts
    (:func:`limit_threads`)."""
    token = _ACTIVE.set(resolve_n_jobs(n_jobs))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def _set_numba(numba, n: int | None) -> int | None:
    """Set numba's thread count (capped at its pool size) and return the previous one; no-op
    when numba is not loaded or ``n`` is None."""
    if numba is None or n is None:
        return None
    previous = numba.get_num_threads()
    wanted = min(n, numba.config.NUMBA_NUM_THREADS)
    if wanted != previous:  # setting it costs ~15 us, as much as a small fit's sweep
        numba.set_num_threads(wanted)
    return previous


@contextlib.contextmanager
def limit_threads(n_jobs, *, work: int | None = None):
    """Run the body with numba kernels, BLAS/OpenMP pools and torch capped at ``resolve_n_jobs(n_jobs)``.

    Capping the BLAS pools costs ~20 us (threadpoolctl), as much as fitting a tree to iris, so
    it is skipped when nothing would change: inside an enclosing block with the same number,
    and when the body's ``work`` (its largest kernel input in elements, or matrix product in
    multiply-adds) is below :data:`LIGHT_WORK`, where everything runs on one thread anyway;
    then only numba's count and the active setting are set.
    """
    n = resolve_n_jobs(n_jobs)
    small = work is not None and work < LIGHT_WORK
    if n == _ACTIVE.get() and (small or _CAPPED.get()):
        yield n
        return
    token = _ACTIVE.set(n)
    numba = sys.modules.get("numba")  # only if a kernel module imported it already
    torch = sys.modules.get("torch")  # only if already imported: importing torch costs seconds
    # read before numba's first call: numba's OpenMP layer may share torch's runtime and raise its
    # count to all cores, which left torch on 2 threads after every tree fit of a threads=1 run (issue 26)
    torch_previous = torch.get_num_threads() if torch is not None else None
    if small:
        previous = _set_numba(numba, n)
        capped = _CAPPED.set(False)  # an enclosing cap on BLAS is for another number
        try:
            yield n
        finally:
            _CAPPED.reset(capped)
            _ACTIVE.reset(token)
            _set_numba(numba, previous)
            if torch is not None and torch.get_num_threads() != torch_previous:
                torch.set_num_threads(torch_previous)
        return
    previous = _set_numba(numba, n)
    try:
        if torch is not None:
            torch.set_num_threads(n)
        with _controller().limit(limits=n):
            capped = _CAPPED.set(True)
            try:
                yield n
            finally:
                _CAPPED.reset(capped)
    finally:
        _ACTIVE.reset(token)
        _set_numba(numba, previous)
        if torch is not None and torch_previous is not None:
            torch.set_num_threads(torch_previous)  # last, for the same reason


def openmp_environment(n_threads: int | None = None) -> dict[str, str]:
    """The OpenMP variables a process should start with (the caller writes them, keeping values
    the user set): idle OpenMP threads sleep instead of spinning (on a shared machine spinning
    threads steal the core the other thread needs: 2-thread SpEx-Clique 0.62 -> 0.48 s wall,
    1.08 -> 0.85 s CPU; torch with 2 spinning threads took 20-30 s per VaDE epoch on 5,000 MNIST
    digits, 2-4 s passive), and with ``n_threads`` the pool size torch reads when it is imported."""
    out = {"OMP_WAIT_POLICY": "PASSIVE"}
    if n_threads is not None:
        out["OMP_NUM_THREADS"] = str(int(n_threads))
    return out


#: ``cpu_code_path`` settings: ``portable`` pins the CPU code paths that decide a run's numbers
#: (issue 36: a forced path changed VaDE's latents and the base ARI; see :func:`cpu_code_path_environment`),
#: ``native`` lets every library take the fastest path of the machine it runs on.
CPU_CODE_PATHS = ("portable", "native")

#: the variables the portable setting writes (each library reads its own when it loads)
PORTABLE_CODE_PATH = {
    # ATen's vectorised kernels (element-wise ops, reductions, Adam): AVX2 on every x86-64 machine with
    # AVX2, instead of AVX-512 where the CPU has it
    "ATEN_CPU_CAPABILITY": "avx2",
    # MKL (torch's BLAS): conditional numerical reproducibility, the one branch MKL documents as giving
    # the same results on Intel and non-Intel (AMD) processors; MKL_CBWR=AVX2 is only promised for Intel
    "MKL_CBWR": "COMPATIBLE",
}


def cpu_code_path_environment(setting: str = "portable") -> dict[str, str]:
    """The environment variables a process should start with for the ``cpu_code_path`` ``setting``
    (the caller writes them before torch loads, keeping values the user set; this module never
    touches ``os.environ``).

    ``portable`` pins the two code paths that changed the default run's numbers when forced on
    one machine (``benchmarks/code_paths.py``: ATen's CPU capability and MKL's instruction set;
    oneDNN's ISA, disabling mkldnn, OpenBLAS's core type and numba's target CPU changed no bit);
    ``native`` writes nothing (each library's fastest path: MKL's COMPATIBLE branch made a VaDE
    training step ~2.5x slower). Raises ``ValueError`` for another setting.
    """
    if setting not in CPU_CODE_PATHS:
        raise ValueError(f"cpu_code_path must be one of {list(CPU_CODE_PATHS)}, got {setting!r}.")
    return dict(PORTABLE_CODE_PATH) if setting == "portable" else {}


@contextlib.contextmanager
def run_threads(n: int | None):
    """A whole run capped at ``n`` threads (None: no cap): the BLAS/OpenMP pools loaded now,
    torch's intra-op threads if torch is loaded (restored afterwards), and the setting every
    estimator fitted inside takes (:func:`thread_setting`; each fit caps numba when it starts).
    threadpoolctl only reaches libraries already loaded: torch, imported later by the encode
    stage, reads ``OMP_NUM_THREADS`` from :func:`openmp_environment` instead. On a loaded
    2-core machine an uncapped torch ran VaDE ~15x slower than with one thread."""
    if n is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    torch = sys.modules.get("torch")
    previous = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(n)
    try:
        with threadpool_limits(limits=n), thread_setting(n):
            yield
    finally:
        if previous is not None:
            torch.set_num_threads(previous)


@contextlib.contextmanager
def blas_threads(n: int):
    """Only the BLAS/OpenMP pools capped at ``n`` (many tiny fits: threads only add overhead); the
    cached controller (:func:`_controller`) is reused, so the process's libraries are not
    rescanned (``/proc/self/maps``) on every call."""
    with _controller().limit(limits=n):
        yield
