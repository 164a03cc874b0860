"""The stage framework: a stage is a function from its inputs' artifacts to an artifact.

A :class:`Stage` declares its name, the stages it reads, the part of the config that
determines its output, and ``compute``. :func:`execute` derives the cache key from that
config part and the inputs' keys, and returns the cached artifact or computes and stores it.
The runner (:mod:`pipeline.app.running.runner`) is a loop of :func:`execute` over the run plan's stages
(:func:`pipeline.app.stages.declared_stages`), calling the plan's callbacks
(:class:`RunCallback`) at its events; where work runs besides the loop (chunk passes, a stage
computed ahead, figures) is the run's :class:`pipeline.app.execution.executor.Executor`.
"""

from __future__ import annotations

import functools
import inspect
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pipeline.app.stores.artifacts import Artifact
from pipeline.app.stores.cache import StageCache, make_key, portable
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageOutput:
    """A finished stage: its cache key and typed artifact (:mod:`pipeline.app.stores.artifacts`)."""

    key: str
    artifact: Artifact

    def finished(self) -> "StageOutput":
        return self


class Later:
    """A stage whose artifact comes later: computed by a worker process (:class:`RunAhead`), or by
    a pass over the rows shared with a later stage's (:meth:`pipeline.app.execution.executor.Executor.later_rows`).
    Its key is known at once; :attr:`artifact` waits for it when a stage first reads it."""

    def __init__(self, key: str, finish: Callable[[], StageOutput]) -> None:
        self.key, self._finish, self._out = key, finish, None

    @property
    def artifact(self) -> Artifact:
        return self.finished().artifact

    def finished(self) -> StageOutput:
        if self._out is None:
            self._out = self._finish()
        return self._out


@dataclass
class RunContext:
    """What a run's stages share besides their artifacts (offered to a ``compute`` that names ``ctx``).

    Attributes
    ----------
    cache : StageCache
    out_dir : Path
        The run's output directory (reports are written there).
    plan : RunPlan, optional
        The checked run (:func:`pipeline.app.running.plan.validate`); a stage that reads it needs one.
    executor : Executor, optional
        Where chunk passes, stages ahead and figures run (made from the plan when first asked for).
    keep_going : bool
        Record a failing explainer row as an error row instead of stopping (studies).
    errors : dict
        Explainer row -> error message of the rows that failed with ``keep_going``.
    key : str or None
        The cache key of the stage being computed (it names the stage's chunk folders).
    """

    cache: StageCache
    out_dir: Path
    plan: "RunPlan | None" = None
    executor: "Executor | None" = None
    keep_going: bool = False
    errors: dict = field(default_factory=dict)
    key: str | None = None

    def planned(self, cfg: dict) -> "RunPlan":
        """The run's plan (a stage that reads it needs a context made with one: the runner's)."""
        if self.plan is None:
            raise TypeError("this stage reads the run plan: execute it with RunContext(..., plan=draw_up(cfg)) "
                            "(pipeline.app.running.plan), as the runner does.")
        return self.plan

    def work(self, cfg: dict) -> "Executor":
        """The run's executor (made on first use; the runner closes it)."""
        if self.executor is None:
            from pipeline.app.execution.executor import Executor

            self.executor = Executor(self.planned(cfg))
        return self.executor


@dataclass(frozen=True)
class Stage:
    """One step of the pipeline.

    Attributes
    ----------
    name : str
        The name later stages use for its artifact, and the name used by ``+force=<name>``.
    inputs : tuple of str
        Names of the stages whose artifacts ``compute`` receives as keyword arguments.
    config : callable (cfg: dict) -> JSON-able
        The part of the (resolved, plain-dict) config that determines the output.
    compute : callable (cfg: dict, **inputs: Artifact) -> Artifact
        Returns an instance of ``artifact``. It is also offered the run plan as ``plan`` and the
        :class:`RunContext` as ``ctx`` when its signature names them.
    artifact : type
        Its artifact type (a frozen dataclass of :mod:`pipeline.app.stores.artifacts`); a cached stage
        stores ``to_record()`` and reads back ``artifact.from_record``. An artifact named by its
        product (``keyed_by_product``: a trained encoder, by its checkpoint's sha256) gives the key
        later stages see.
    version : int
        Bump when ``compute`` changes meaning, to invalidate old cache entries.
    cached : bool
        False for stages cheaper to recompute than to read back (a matrix product, metrics,
        report files, an array file opened by row range); their artifacts may hold any Python
        object. The plan decides it per run where it depends on the config
        (:func:`pipeline.app.stages.declared_stages`).
    store : str or None
        Cache sub-directory (default ``name``); stages producing the same kind of artifact share it.
    """

    name: str
    inputs: tuple
    config: Callable[[dict], Any]
    compute: Callable[..., Artifact]
    artifact: type[Artifact] = Artifact
    version: int = 1
    cached: bool = True
    store: str | None = None

    def key(self, cfg: dict, done: dict[str, StageOutput]) -> str:
        # paths under the configured roots enter the key relative to them: moving models/, the data
        # or the cache does not change any key
        config = portable(self.config(cfg), cfg.get("paths") or {})
        return make_key(self.store or self.name, config, [done[i].key for i in self.inputs], self.version)


class RowFailed(InvalidInputError):
    """Raised by a stage that is one of several rows of its kind (the stages sharing its store:
    ``fit.<row>``) when its row cannot be computed: the runner records it as an error row and the
    other rows go on (unless every row of that kind failed). ``cause`` is the error saying why."""

    def __init__(self, row: str, kind: str, cause: Exception) -> None:
        super().__init__(str(cause))
        self.row, self.kind, self.cause = row, kind, cause


@functools.lru_cache(maxsize=512)
def _offered(compute) -> frozenset:
    """Which of ``plan`` and ``ctx`` the signature of ``compute`` names."""
    try:
        params = inspect.signature(compute).parameters
    except (TypeError, ValueError):
        return frozenset()
    return frozenset(n for n in ("plan", "ctx") if n in params)


class Deferred:
    """What a ``compute`` returns when its artifact is finished later, when a stage first reads it:
    ``build()`` gives the artifact (the concept coordinates, whose pass over the rows rides along
    the next pass over the same array: :meth:`pipeline.app.execution.executor.Executor.later_rows`)."""

    def __init__(self, build: Callable[[], Artifact]) -> None:
        self.build = build


class _Deferring(Exception):
    def __init__(self, deferred: Deferred) -> None:
        super().__init__("deferred")
        self.deferred = deferred


class _Pending:
    """An input still being computed (a :class:`Later`), handed to a stage as it is: its artifact is
    waited for when one of its fields is first read."""

    __slots__ = ("_later",)

    def __init__(self, later: Later) -> None:
        object.__setattr__(self, "_later", later)

    def __getattr__(self, name: str):
        return getattr(self._later.artifact, name)


def stage_inputs(stage: Stage, cfg: dict, ctx: RunContext, done: dict, key: str, lazy: bool = True) -> dict:
    """The keyword arguments of ``stage.compute``: its inputs' artifacts (one still being computed
    as a :class:`_Pending` stand-in, unless ``lazy`` is False), and the plan and context it names."""
    inputs = {i: (_Pending(done[i]) if lazy and isinstance(done[i], Later) and done[i]._out is None
                  else done[i].artifact) for i in stage.inputs}
    offered = _offered(stage.compute)
    if "plan" in offered:
        inputs["plan"] = ctx.planned(cfg)
    if "ctx" in offered:
        ctx.key = key
        inputs["ctx"] = ctx
    return inputs


def execute(stage: Stage, cfg: dict, cache: StageCache | RunContext, done: dict[str, StageOutput]) -> StageOutput:
    """Run ``stage`` (or fetch it from the cache) given the finished stages ``done``; a :class:`Later`
    when its compute returned :class:`Deferred` (a cached one is stored when it is finished)."""
    ctx = cache if isinstance(cache, RunContext) else RunContext(cache, Path("."))
    key = stage.key(cfg, done)
    if not stage.cached:
        out = stage.compute(cfg, **stage_inputs(stage, cfg, ctx, done, key))
        if isinstance(out, Deferred):
            return Later(key, lambda: StageOutput(key, _checked(stage.name, out.build(), stage.artifact)))
        return StageOutput(out.product_key(key) if stage.artifact.keyed_by_product else key, out)

    def compute() -> dict:
        out = stage.compute(cfg, **stage_inputs(stage, cfg, ctx, done, key))
        if isinstance(out, Deferred):
            raise _Deferring(out)  # nothing stored now: when it is finished
        return _checked(stage.name, out, stage.artifact).to_record()

    store = stage.store or stage.name
    try:
        record = ctx.cache.get_or_compute(store, key, compute)
    except _Deferring as exc:
        deferred = exc.deferred

        def finish() -> StageOutput:
            artifact = _checked(stage.name, deferred.build(), stage.artifact)
            ctx.cache.store_later(store, key, artifact.to_record())  # written by a thread while the run goes on
            return StageOutput(key, artifact)

        return Later(key, finish)
    return StageOutput(key, stage.artifact.from_record(record))


class RunCallback:
    """Something the runner calls at its events, Lightning's way: the loop knows events, never a
    stage's name. A callback owns what it starts; the run's executor closes the processes.

    Events: :meth:`on_plan` (the plan is drawn up; the request checks, ~2 s of imports, come next),
    :meth:`on_loop_start` (the stages the loop will run), :meth:`on_stage_start` (before a stage the
    loop computes: a callback may take it, returning its output).
    """

    def on_plan(self, plan: "RunPlan", executor: "Executor") -> None:
        pass

    def on_loop_start(self, stages: list, ctx: RunContext) -> None:
        pass

    def on_stage_start(self, stage: Stage, cfg: dict, ctx: RunContext, done: dict) -> StageOutput | Later | None:
        return None


class RunAhead(RunCallback):
    """Stages computed by a worker process of their own while the loop goes on with the stages
    that do not read them (the CAV fits of a run out of core while the clustering is fitted on its
    sample): ``when[name](plan, done)`` says whether (asked with no finished stages once the plan
    is drawn up, it guesses from the config, and a worker starts importing ``imports`` at once).

    A process, not a thread: a thread would take the GIL from the loop on every small call and
    change the process-wide BLAS limits under its computations. The stage's inputs and artifact
    must pickle; its cache entry and status.json event are written as ever
    (:meth:`StageCache.compute_later`); a worker that dies leaves the stage to this process.
    ``keep[name](plan, done, artifact)`` says whether the worker stays, once the stage is read, for
    a later stage's work (:meth:`pipeline.app.execution.executor.Executor.submit_ahead`); without
    it, or when it says no, the worker is stopped then.
    """

    def __init__(self, when: dict[str, Callable], imports: tuple = (), keep: dict[str, Callable] | None = None) -> None:
        self.when, self.imports, self.keep = dict(when), tuple(imports), dict(keep or {})

    def on_plan(self, plan, executor) -> None:
        try:
            if any(ask(plan, {}) for ask in self.when.values()):
                executor.warm_worker(self.imports)
        except Exception:  # noqa: BLE001 - a guess never fails a run; the config is checked next
            return

    def on_stage_start(self, stage, cfg, ctx, done):
        ask = self.when.get(stage.name)
        if ask is None or not stage.cached or not ask(ctx.planned(cfg), done):
            return None
        key = stage.key(cfg, done)
        inputs = stage_inputs(stage, cfg, ctx, done, key, lazy=False)
        inputs.pop("ctx", None)  # a stage run ahead gets the plan, never the context (it does not pickle)
        executor = ctx.work(cfg)
        work = lambda: executor.call_in_worker(_record, stage.name, stage.compute, stage.artifact, cfg,  # noqa: E731
                                               inputs)
        later = ctx.cache.compute_later(stage.store or stage.name, key, work)

        def finish() -> StageOutput:
            from pipeline.app.execution.workers import WorkerLost

            try:
                out = StageOutput(key, stage.artifact.from_record(later.result()))
            except WorkerLost as exc:
                log.warning("%s; computing the stage in this process", exc)
                return execute(stage, cfg, ctx, done)
            keep = self.keep.get(stage.name)
            if keep is None or not keep(ctx.planned(cfg), done, out.artifact):
                executor.release_worker()
            return out

        return Later(key, finish)


def _checked(name: str, out, artifact: type[Artifact]) -> Artifact:
    if not isinstance(out, artifact):
        raise TypeError(f"stage {name!r} returned {type(out).__name__}, not its {artifact.__name__}.")
    return out


def _record(name: str, compute: Callable[..., Artifact], artifact: type[Artifact], cfg: dict, inputs: dict) -> dict:
    """``compute(cfg, **inputs)`` checked to be ``artifact``, as its record (the stage's parts, not
    the Stage: a worker process gets them pickled)."""
    return _checked(name, compute(cfg, **inputs), artifact).to_record()
