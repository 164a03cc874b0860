"""Where a run's work runs besides the stage loop: one :class:`Executor` per run, owned by the runner.

* **Chunk passes** (:meth:`Executor.map_rows`): a function over every chunk of rows of an array
  (:func:`pipeline.app.execution.chunk_map.map_rows`), in this process or as Dask tasks (``compute=dask``:
  the backend, :mod:`pipeline.app.execution.compute`, started at the first pass over an array on disk). A
  pass asked for ahead (:meth:`Executor.later_rows`: the concept coordinates ``Z Cᵀ``) rides along
  the next pass over the same array (the cluster stage's assignment of every row), so latents on
  disk are read once for both; a pass nobody shared runs when its result is first read.
* **A stage computed ahead** (:meth:`Executor.call_in_worker`, :meth:`Executor.submit_ahead`): a
  spawned worker process (:mod:`pipeline.app.execution.workers`), started early by
  :meth:`Executor.warm_worker` so that it has imported its libraries by then, and kept for the
  run: the CAV fits of a run out of core, then its completeness baselines while the trees are fitted.
* **Figures** (:meth:`Executor.figure_encoder`): encoded by worker processes
  (:class:`pipeline.app.execution.encoding.Encoder`), started ahead by :meth:`Executor.warm_figures`,
  or by the Dask workers when a pass started them.

How many processes and threads: :mod:`pipeline.threads`, from the plan's ``threads``. Whatever
the executor started, :meth:`Executor.close` stops. A worker or Dask client lost mid-run leaves
its work to this process, with one log line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Together:
    """Several chunk functions over the same chunk (one read for all; picklable: Dask tasks); their
    outputs kept apart as ``"<i>:<name>"``."""

    fns: tuple

    def __call__(self, rows, start: int) -> dict:
        return {f"{i}:{k}": v for i, fn in enumerate(self.fns) for k, v in fn(rows, start).items()}

    def split(self, out: dict) -> list[dict]:
        parts: list[dict] = [{} for _ in self.fns]
        for name, value in out.items():
            i, _, k = name.partition(":")
            parts[int(i)][k] = value
        return parts


class RowsLater:
    """A pass over the rows of ``X`` asked for ahead (:meth:`Executor.later_rows`); :meth:`result`
    is its output (``{name: array}``), from the pass it rode along, else from a pass of its own."""

    def __init__(self, executor: "Executor", make, X, row_bytes: int, resume: Path | None, desc: str) -> None:
        self.executor, self.make, self.X, self.row_bytes, self.resume, self.desc = (executor, make, X, row_bytes,
                                                                                      resume, desc)
        self.value: dict | None = None

    def result(self) -> dict:
        if self.value is None:
            if self in self.executor._riders:
                self.executor._riders.remove(self)
            self.value = self.executor.map_rows(self.make(), self.X, self.row_bytes, self.resume, self.desc)
        return self.value


class Executor:
    """The run's chunk passes, stage workers and figure workers (module docstring).

    Parameters
    ----------
    plan : RunPlan
        The run's plan: its row plan sizes the chunks, its ``compute`` settings name the backend,
        its ``threads`` the workers.
    """

    def __init__(self, plan) -> None:
        self.plan = plan
        self._backend = None
        self._warm = None  # the one-process pool of the stages ahead (started early; kept for the run)
        self._ahead: dict = {}  # tag -> (args, WorkerCall): work handed to it before its stage asked (take_ahead)
        self._handed: list = []  # pools of the workers on their last work (stopping when it is done)
        self._figures = None
        self._riders: list[RowsLater] = []

    # -------------------------------------------------------------- chunk passes
    @property
    def backend(self):
        """The chunk backend of ``compute=`` (:mod:`pipeline.app.execution.compute`), started on first use."""
        if self._backend is None:
            from pipeline.app.execution.compute import make_compute

            self._backend = make_compute(self.plan.config.get("compute"))
        return self._backend

    @property
    def in_process(self) -> bool:
        """Whether chunks are computed in this process (then a task may hold what does not pickle)."""
        return bool(getattr(self.plan.backend, "in_process", True))

    def map(self, fn, items: list, desc: str = "chunks", done=None) -> list:
        """``fn`` over ``items`` on the backend, results in item order (:meth:`LocalCompute.map`)."""
        return self.backend.map(fn, items, desc=desc, done=done)

    def map_rows(self, fn, X, row_bytes: int, resume: Path | None = None, desc: str = "chunks") -> dict:
        """``fn(rows, start) -> {name: array}`` over the chunks of ``X`` (rows of ``row_bytes`` bytes:
        the plan's chunk size), with every pass asked for over the same array riding along."""
        from pipeline.app.execution.chunk_map import map_rows
        from pipeline.app.data.chunked import is_view

        riders = [r for r in self._riders if r.X is X and r.row_bytes == row_bytes]
        together = None
        if riders:
            for r in riders:
                self._riders.remove(r)
            together = Together((fn, *(r.make() for r in riders)))
            fn, desc = together, ", ".join([desc, *(r.desc for r in riders)])
            names = [r.resume.name for r in riders if r.resume is not None]
            resume = None if resume is None or len(names) < len(riders) else resume.with_name(
                "+".join([resume.name, *names]))
        out = map_rows(fn, X, self.plan.rows.chunk(row_bytes), self.backend if is_view(X) else None, resume, desc)
        if together is None:
            return out
        first, *rest = together.split(out)
        for r, part in zip(riders, rest):
            r.value = part
        return first

    def later_rows(self, make, X, row_bytes: int, resume: Path | None = None, desc: str = "chunks") -> RowsLater:
        """A pass of ``make()`` (called when the pass starts: its inputs may still be computed) over
        the rows of ``X``, to ride along the next :meth:`map_rows` over the same array; the pass
        runs on its own when its result is asked for first."""
        later = RowsLater(self, make, X, row_bytes, resume, desc)
        self._riders.append(later)
        return later

    # -------------------------------------------------------------- a stage ahead
    def warm_worker(self, imports: tuple) -> None:
        """Start a worker now and have it import ``imports`` while this process goes on; the next
        :meth:`call_in_worker` uses it (a worker takes ~2-3 s to start and import scikit-learn)."""
        from pipeline.app.execution.workers import import_modules, spawn_pool

        if self._warm is not None:
            return
        pool = spawn_pool(1, "a stage ahead would be computed")
        if pool is not None:
            pool.submit(import_modules, tuple(imports))
            self._warm = pool

    def call_in_worker(self, fn, *args):
        """``fn(*args)`` in the worker of the stages ahead (the warm one, else one started now and
        kept) under the run's thread cap (:class:`pipeline.app.execution.workers.WorkerCall`, waited for:
        :class:`WorkerLost` when none could; a lost worker is not used again)."""
        from pipeline.app.execution.workers import WorkerCall, WorkerLost, kill_pool, spawn_pool

        pool = self._warm = self._warm or spawn_pool(1, "the stage is computed")
        try:
            return WorkerCall(pool, fn, args, self.plan.threads).result()
        except WorkerLost:
            if pool is not None and self._warm is pool:
                self._warm = None
                kill_pool(pool)
            raise

    def release_worker(self) -> None:
        """Stop the worker of the stages ahead, if one is warm (no later stage will use it)."""
        from pipeline.app.execution.workers import kill_pool

        pool, self._warm = self._warm, None
        if pool is not None:
            kill_pool(pool)

    @property
    def has_worker(self) -> bool:
        """Whether a worker of the stages ahead is warm (:meth:`submit_ahead` would use it)."""
        return self._warm is not None

    def submit_ahead(self, fn, *args, last: bool = True, tag: str | None = None, one_thread: bool = False):
        """``fn(*args)`` handed to the warm worker of the stages ahead, the caller going on: a
        :class:`pipeline.app.execution.workers.WorkerCall` (its ``result()`` waited for when needed),
        or None where no worker is warm (the caller computes it itself: a worker started for a few
        seconds of work would cost as much to start). ``last``: no stage ahead comes after it, so the
        worker stops as soon as it is done (its memory, ~0.2 GB of imports, not held to the run's end).
        ``tag``: work started before its stage asks for it, kept for :meth:`take_ahead`. ``one_thread``:
        on one thread, not the run's cap (work beside a stage that keeps a core busy)."""
        import threading

        from pipeline.app.execution.workers import WorkerCall

        pool = self._warm
        if pool is None:
            return None
        call = WorkerCall(pool, fn, args, 1 if one_thread else self.plan.threads)
        if tag is not None:
            self._ahead[tag] = (args, call)
        if last:
            self._warm = None
            self._handed.append(pool)

            def stop() -> None:
                call.wait()
                pool.shutdown(wait=True)

            threading.Thread(target=stop, name="stop-stage-worker", daemon=True).start()
        return call

    def take_ahead(self, tag: str):
        """(args, WorkerCall) of the work :meth:`submit_ahead` started under ``tag``, once; else None.
        The stage compares the arguments with its own before it takes the result."""
        return self._ahead.pop(tag, None)

    # -------------------------------------------------------------- figures
    def figure_encoder(self):
        """The encoder of the run's figures: the Dask workers when a pass started them, else worker
        processes, one per thread of the run (here for one)."""
        if self._figures is None:
            from pipeline.app.execution.encoding import Encoder
            from pipeline.threads import worker_processes

            client = getattr(self._backend, "client", None)
            self._figures = Encoder(client=client) if client is not None else Encoder(
                worker_processes(self.plan.threads))
        return self._figures

    def warm_figures(self) -> None:
        """Start the figure workers now, so that they have imported matplotlib when the figures come
        (not when the backend's own workers encode them: its cluster may start only with a later pass)."""
        if self.plan.display.figures and self._figures is None and not getattr(self.plan.backend, "shares_workers",
                                                                               False):
            self.figure_encoder().start()

    def close_figures(self, wait: bool = True) -> None:
        """Stop the figure workers (``wait=False`` once every figure was received)."""
        encoder, self._figures = self._figures, None
        if encoder is not None:
            encoder.close(wait=wait)

    # -------------------------------------------------------------- the end
    def close(self) -> None:
        """Stop everything started: figure workers (waiting for them), the backend, a warm worker, a
        worker still on its last work (:meth:`submit_ahead`)."""
        from pipeline.app.execution.workers import kill_pool

        self._riders.clear()
        try:
            self.close_figures()
        finally:
            backend, self._backend = self._backend, None
            try:
                if backend is not None:
                    backend.close()
            finally:
                if self._warm is not None:
                    pool, self._warm = self._warm, None
                    kill_pool(pool)  # it holds nothing but imports
                handed, self._handed = self._handed, []
                for pool in handed:  # a last piece of work nobody waits for now (a run that stopped early)
                    kill_pool(pool)


__all__ = ["Executor", "RowsLater", "Together"]
