"""Where chunked stages run: in this process (``compute=local``, the default) or as Dask tasks
(``compute=dask``; docs/out-of-core.md).

A backend maps a picklable function over chunk ranges and returns the results **in chunk
order**, so reductions (mixture moments, contingency tables) are merged in the same order
wherever the chunks ran, and the local and the Dask run give bit-identical results.

``compute=dask`` connects to ``compute.address`` (an existing scheduler, e.g. one started by
dask-jobqueue on SLURM) or starts a ``LocalCluster`` of ``compute.n_workers`` processes. A
scheduler that does not answer is a clear error after ``compute.timeout`` seconds; a worker that
dies mid-stage has its tasks re-run on another worker (Dask retries ``compute.retries`` times),
and a stage that still fails raises before anything of it is written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar

from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)


def _progress(total: int, desc: str):
    from pipeline.progress import tqdm

    return tqdm(total=total, desc=desc, unit="chunk", leave=False, mininterval=1.0)


def _reader(enabled: bool):
    """One read-ahead thread (or nothing)."""
    import contextlib
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(1, thread_name_prefix="read-ahead") if enabled else contextlib.nullcontext()


@dataclass
class LocalCompute:
    """Chunks one after another in this process."""

    name: str = "local"
    chunk_share: ClassVar[int] = 32  # a chunk fills 1/32 of dataset.memory_budget (beside the next, read meanwhile)
    in_process: ClassVar[bool] = True  # a task may hold what does not pickle (a loaded encoder)
    shares_workers: ClassVar[bool] = False  # no workers of its own that could encode the figures

    @classmethod
    def from_settings(cls, settings: dict) -> "LocalCompute":
        """The backend of a ``compute`` config node (``compute=local`` has no settings)."""
        return cls()

    def map(self, fn, items: list, desc: str = "chunks", done=None) -> list:
        """``[fn(item) for item in items]``; with ``done``, ``done(i, result)`` is called as each
        finishes and the results are not kept (an empty list is returned). A task that reads its
        input apart (``fn.read(item)`` then ``fn.compute(rows, item)``, as a chunk of a file does)
        has the next chunk read by a second thread while this one is computed: the disk and the
        CPU work at once (the order of the work, and so every result, is unchanged)."""
        out = []
        split = len(items) > 1 and hasattr(fn, "read") and hasattr(fn, "compute")
        with _progress(len(items), desc) as bar, _reader(split) as pool:
            if split:
                ahead = pool.submit(fn.read, items[0])
            for i, item in enumerate(items):
                if split:
                    rows = ahead.result()
                    if i + 1 < len(items):
                        ahead = pool.submit(fn.read, items[i + 1])
                    result = fn.compute(rows, item)
                    del rows
                else:
                    result = fn(item)
                if done is not None:
                    done(i, result)
                else:
                    out.append(result)
                bar.update()
        return out

    def close(self) -> None:
        pass


class DaskCompute:
    """Chunks as Dask tasks on a ``distributed`` cluster.

    Parameters
    ----------
    address : str, optional
        A running scheduler (``tcp://host:8786``); None starts a LocalCluster.
    n_workers, threads_per_worker : int
        The LocalCluster's size (worker processes x threads).
    timeout : float
        Seconds to wait for the scheduler before giving up.
    retries : int
        Times a task is re-run after an error in it (a worker that dies is handled by the
        scheduler: its tasks move to another worker).
    memory_limit : str
        Per-worker memory limit of the LocalCluster ("auto" or e.g. "2GB").
    """

    name = "dask"
    chunk_share = 8  # the workers read their chunks themselves: fewer, larger tasks (docs/out-of-core.md)
    in_process = False  # tasks are pickled to the workers
    shares_workers = True  # its workers encode the run's figures too (once a pass started them)

    def __init__(self, address: str | None = None, n_workers: int = 2, threads_per_worker: int = 1,
                 timeout: float = 10.0, retries: int = 1, memory_limit: str = "auto"):
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise InvalidInputError("compute=dask needs dask and distributed: pip install "
                                    "'concept-trees-pipeline[dask]' (or use compute=local).") from None
        self.retries = retries
        self.cluster = None
        if address:
            try:
                self.client = Client(address, timeout=f"{timeout}s")
            except Exception as exc:  # noqa: BLE001 - OSError, TimeoutError, ValueError (bad address), garbage replies
                raise InvalidInputError(
                    f"compute.address={address}: no Dask scheduler answered within {timeout:g} s ({type(exc).__name__}: "
                    f"{exc}). Start one (dask scheduler, or a dask-jobqueue cluster; docs/out-of-core.md) and give its "
                    "address, or leave compute.address unset to start a LocalCluster.") from None
        else:
            self.cluster = LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker, processes=True,
                                        memory_limit=memory_limit, dashboard_address=None,
                                        silence_logs=logging.WARNING)
            self.client = Client(self.cluster, timeout=f"{timeout}s")
        log.info("dask: %s (%d workers)", self.client.scheduler.address, len(self.client.scheduler_info()["workers"]))

    @classmethod
    def from_settings(cls, settings: dict) -> "DaskCompute":
        """The backend of a ``compute=dask`` config node (its settings checked first; a LocalCluster
        gets no more workers than the machine holds)."""
        from pipeline.app.startup.settings_checks import check_compute_settings, worker_count

        spec = dict(settings)
        check_compute_settings({"_target_": f"{cls.__module__}.{cls.__qualname__}",
                                **{k: v for k, v in spec.items() if k != "address"}})
        if not spec.get("address"):  # a LocalCluster: no more workers than the machine holds
            spec["n_workers"] = worker_count(spec, quiet=True)  # the run's plan logged a cap
        return cls(**{k: v for k, v in spec.items() if v is not None})

    @staticmethod
    def check_reachable(settings: dict) -> None:
        """When the run is planned: ``compute.address`` answers, or the LocalCluster's workers fit the machine."""
        from pipeline.app.startup.settings_checks import check_address, worker_count

        if settings.get("address"):
            check_address(str(settings["address"]), settings.get("timeout"))
        else:
            worker_count(settings)  # says now, before any stage, when the machine holds fewer workers

    def map(self, fn, items: list, desc: str = "chunks", done=None) -> list:
        """``fn`` over ``items`` as tasks; the results in item order. With ``done``, ``done(i, result)``
        is called in this process as each task finishes (in any order) and the results are not kept
        (the workers release each as soon as it is handed over; an empty list is returned)."""
        from distributed import as_completed

        if not items:
            return []
        futures = self.client.map(fn, items, pure=False, retries=self.retries)
        index = {f.key: i for i, f in enumerate(futures)}
        try:
            with _progress(len(items), desc) as bar:
                for f in as_completed(futures):
                    if done is not None:
                        done(index[f.key], f.result())
                        f.release()
                    bar.update()
            if done is not None:
                futures.clear()
                return []
            return self.client.gather(futures)
        except Exception as exc:
            for f in futures:
                f.cancel()
            if type(exc).__name__ == "KilledWorker":
                raise RuntimeError(f"{desc}: Dask workers died running a chunk ({exc}); nothing of this stage was "
                                   "written. Check the workers' memory limit (compute.memory_limit) and logs.") from exc
            raise

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def backend_class(spec: dict | None):
    """The backend class a ``compute`` config node names in ``_target_`` (None: :class:`LocalCompute`)."""
    from pipeline.app.configuration.instantiate import locate

    target = (spec or {}).get("_target_")
    return LocalCompute if not target else locate(target, "compute")


def make_compute(spec: dict | None):
    """The backend a ``compute`` config node names (``_target_``; None: in-process), built by its
    class's ``from_settings`` from the node's other settings."""
    settings = {k: v for k, v in (spec or {}).items() if k not in ("_target_", "name")}
    return backend_class(spec).from_settings(settings)
