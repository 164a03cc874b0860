"""One thread setting (n_jobs / limit_threads) for numba kernels and BLAS pools."""

import contextlib

import numba
import numpy as np
import pytest
from sklearn.datasets import make_blobs
from threadpoolctl import threadpool_info

from pipeline import threads as _threads
from pipeline.trees import IMM, ExKMC, SpExClique
from pipeline.threads import available_cores, current_threads, idle_cores, limit_threads, resolve_n_jobs


def test_resolve_n_jobs():
    n = available_cores()
    assert resolve_n_jobs(1) == 1
    assert resolve_n_jobs(-1) == n
    assert resolve_n_jobs(None) == idle_cores()
    assert resolve_n_jobs(10 ** 6) == n
    assert resolve_n_jobs(-(10 ** 6)) == 1
    assert resolve_n_jobs(-2) == max(1, n - 1)


def test_limit_threads_caps_numba_and_blas_and_restores():
    before = numba.get_num_threads()
    with limit_threads(1) as n:
        assert n == 1
        assert numba.get_num_threads() == 1
        assert current_threads() == 1
        assert all(pool["num_threads"] == 1 for pool in threadpool_info())
        with limit_threads(None) as inner:  # None inherits the enclosing setting
            assert inner == 1
            assert numba.get_num_threads() == 1
    assert numba.get_num_threads() == before
    assert current_threads() == idle_cores()


@pytest.mark.parametrize("load,expected", [(0.0, 4), (1.0, 4), (1.4, 4), (2.0, 3), (3.6, 1), (9.0, 1)])
def test_default_threads_leave_busy_cores_alone(monkeypatch, load, expected):
    """n_jobs=None outside any limit: the cores the rest of the machine leaves idle (this
    process counts as one runnable task in the load average), never fewer than one."""
    monkeypatch.setattr(_threads, "available_cores", lambda: 4)
    monkeypatch.setattr(_threads, "process_cap", lambda: 4)
    monkeypatch.setattr(_threads.os, "getloadavg", lambda: (load, load, load))
    assert idle_cores() == expected
    assert resolve_n_jobs(None) == expected
    assert resolve_n_jobs(-1) == 4  # an explicit "all cores" is taken at its word
    with limit_threads(2):
        assert resolve_n_jobs(None) == 2  # an enclosing limit wins


def test_default_threads_respect_the_process_cap(monkeypatch):
    """A process started with NUMBA_NUM_THREADS=1 (a fair one-thread harness) runs every
    kernel and BLAS call of an n_jobs=None fit on one thread, however idle the machine."""
    monkeypatch.setattr(_threads, "available_cores", lambda: 4)
    monkeypatch.setattr(_threads.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", 1)
    assert resolve_n_jobs(None) == 1
    assert resolve_n_jobs(2) == 2  # an explicit number is taken at its word
    with limit_threads(None) as n:
        assert n == 1


def test_limit_threads_restores_after_error():
    before = numba.get_num_threads()
    with pytest.raises(RuntimeError):
        with limit_threads(1):
            raise RuntimeError("boom")
    assert numba.get_num_threads() == before


def test_limit_threads_enters_threadpoolctl_only_when_it_changes_something(monkeypatch):
    entered = []

    class Controller:
        def limit(self, limits):
            entered.append(limits)
            return contextlib.nullcontext()

    from pipeline.trees._kernels import PARALLEL_MIN_WORK

    assert _threads.LIGHT_WORK <= PARALLEL_MIN_WORK  # light blocks only where every kernel is serial
    monkeypatch.setattr(_threads, "_controller", Controller)
    with limit_threads(1):
        with limit_threads(1), limit_threads(None), limit_threads(None, work=10 ** 9):
            assert numba.get_num_threads() == 1
    assert entered == [1]
    with limit_threads(1, work=100) as n:  # a small input: serial kernels, only numba's count is set
        assert n == 1 and numba.get_num_threads() == 1 and current_threads() == 1
        with limit_threads(None, work=10 ** 9):  # a large one inside still caps the BLAS pools
            pass
    assert entered == [1, 1]


@pytest.mark.slow
@pytest.mark.parametrize("parallel_min_work", [0, None])  # 0: every kernel call takes the prange path
@pytest.mark.parametrize("make", [lambda: IMM(), lambda: ExKMC(n_leaves=8), lambda: SpExClique(n_leaves=6)])
def test_trees_do_not_depend_on_thread_count(make, parallel_min_work):
    from pipeline.trees import _kernels

    X, y = make_blobs(n_samples=3000, n_features=40, centers=4, cluster_std=8.0, random_state=1)  # overlapping
    trees = []
    setting = contextlib.nullcontext() if parallel_min_work is None else _kernels.serial_below(parallel_min_work)
    with setting:  # 0: no small-input IMM path either
        for threads in (1, available_cores()):
            with limit_threads(threads):
                trees.append(make().fit(X, y).tree_)
    np.testing.assert_array_equal(trees[0].apply(X), trees[1].apply(X))
    np.testing.assert_array_equal(trees[0].threshold, trees[1].threshold)


def test_pipeline_threads_reach_every_estimator(monkeypatch):
    """A run's ``threads`` is the setting of every tree it fits (their n_jobs=None), numba
    kernels included, without importing numba up front."""
    from pipeline.app.running.runner import thread_limit

    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # thread_limit only sets these when absent
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)  # the fit must bring it down (an equal count is left alone)
    before = numba.get_num_threads()
    with thread_limit(1):
        assert current_threads() == 1
        X, y = make_blobs(n_samples=3000, n_features=40, centers=4, random_state=1)  # above LIGHT_WORK
        seen = []
        original = numba.set_num_threads
        monkeypatch.setattr(numba, "set_num_threads", lambda k: (seen.append(k), original(k)))
        IMM().fit(X, y)
        assert (seen and seen[0] == 1) or before == 1
    assert numba.get_num_threads() == before
    assert current_threads() == idle_cores()


def test_the_cached_controller_is_rebuilt_only_when_a_shared_library_is_loaded():
    """threadpoolctl reads /proc/self/maps to build its controller; a pure-Python import inside a
    fit must not rebuild it (the library-I/O guard caught that), a newly loaded library must."""
    import subprocess
    import sys

    code = """
import sys, types
from pipeline import threads
first = threads._controller()
sys.modules['pipeline_probe_pure'] = types.ModuleType('pipeline_probe_pure')  # a pure-Python import
assert threads._controller() is first, 'rebuilt after a pure-Python import'
import _ctypes_test  # a compiled extension: a new shared object in the process
second = threads._controller()
assert second is not first, 'not rebuilt after a shared library was loaded'
assert threads._controller() is second
print('ok')
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
