"""The stage framework: a stage is a function from its inputs' artifacts to an artifact.

A :class:`Stage` declares its name, the stages it reads, the part of the config that
determines its output, and ``compute``. :func:`execute` derives the cache key from that
config part and the inputs' keys, and returns the cached artifact or computes and stores it.
The runner (:mod:`pipeline.app.runner`) is a loop of :func:`execute` over the list that
:func:`pipeline.app.stages.declared_stages` returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pipeline.app.artifacts import Artifact
from pipeline.app.cache import StageCache, make_key, portable


@dataclass(frozen=True)
class StageOutput:
    """A finished stage: its cache key and typed artifact (:mod:`pipeline.app.artifacts`)."""

    key: str
    artifact: Artifact


@dataclass
class RunContext:
    """What a run shares with the stages that ask for it (``Stage.context=True``).

    Attributes
    ----------
    cache : StageCache
    out_dir : Path
        The run's output directory (reports are written there).
    keep_going : bool
        Record a failing explainer row as an error row instead of stopping (studies).
    errors : dict
        Explainer row -> error message of the rows that failed with ``keep_going``.
    resources : dict
        What stages share beyond artifacts: ``key`` (the cache key of the stage being computed,
        which names its chunked outputs) and ``compute`` (a chunked run's backend).
    """

    cache: StageCache
    out_dir: Path
    keep_going: bool = False
    errors: dict = field(default_factory=dict)
    resources: dict = field(default_factory=dict)  # shared by a run's stages (the compute backend, the stage key)


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
        Returns an instance of ``artifact``. With ``context=True`` it also receives ``ctx=RunContext``.
    version : int
        Bump when ``compute`` changes meaning, to invalidate old cache entries.
    cached : bool or callable (cfg: dict) -> bool
        False for stages cheaper to recompute than to read back (a matrix product, metrics,
        report files, an array file opened by row range); their artifacts may hold any Python object.
    store : str or None
        Cache sub-directory (default ``name``); stages producing the same kind of artifact share it.
    context : bool
        Pass the :class:`RunContext` as ``ctx``.
    output_key : callable (key: str, artifact) -> str, optional
        For uncached stages whose identity is their product (a checkpoint's sha256): the key
        later stages see.
    artifact : type
        Its artifact type (a frozen dataclass of :mod:`pipeline.app.artifacts`); a cached stage
        stores ``to_record()`` and reads back ``artifact.from_record``.
    verify : callable (artifact) -> None, optional
        Checks what a cached artifact refers to outside its entry (a chunked stage's shards);
        raises :class:`pipeline.app.cache.CorruptArtifactError` to have the entry recomputed.
    side_inputs : tuple of str
        Finished stages whose artifacts ``compute`` may use for a by-product kept in the cache
        under its own key, never for its own artifact (so they are not part of its key):
        ``ctx.resources["side"]`` (with ``context=True``). The cluster stage's pass over latents on
        disk also projects them on the CAVs, for the project stage (one read of the file, not two).
        A side input still computed ahead is waited for when the stage first reads it.
    ahead : callable (cfg: dict, done: dict) -> bool, optional
        True where the stage should be computed by a worker process of its own
        (:mod:`pipeline.app.workers`) while the loop goes on with the stages that do not read it
        (:func:`execute_ahead`); its inputs and artifact must pickle. A stage reading it waits.
        Asked with no finished stages before the run starts, it may guess (from the config) to
        have a worker started early (:func:`warm_ahead`), which imports ``ahead_imports``.
    ahead_imports : tuple of str
        The modules that worker imports while it waits.
    warm : callable (cfg: dict, ctx: RunContext) -> None, optional
        Prepares the stage ahead of its turn (starts its worker processes, say) when the loop
        reaches the stage named ``warm_before``, so the preparation overlaps the stages between;
        only for a stage the loop will reach.
    warm_before : str, optional
        The stage whose turn calls ``warm``.
    """

    name: str
    inputs: tuple
    config: Callable[[dict], Any]
    compute: Callable[..., Artifact]
    version: int = 1
    cached: bool | Callable[[dict], bool] = True
    store: str | None = None
    context: bool = False
    output_key: Callable[[str, Artifact], str] | None = None
    artifact: type[Artifact] = Artifact
    verify: Callable[[Artifact], None] | None = None
    side_inputs: tuple = ()
    ahead: Callable[[dict, dict], bool] | None = None
    ahead_imports: tuple = ()
    warm: Callable[[dict, "RunContext"], None] | None = None
    warm_before: str | None = None

    def is_cached(self, cfg: dict) -> bool:
        return bool(self.cached(cfg) if callable(self.cached) else self.cached)

    def key(self, cfg: dict, done: dict[str, StageOutput]) -> str:
        # paths under the configured roots enter the key relative to them: moving models/, the data
        # or the cache does not change any key
        config = portable(self.config(cfg), cfg.get("paths") or {})
        return make_key(self.store or self.name, config, [done[i].key for i in self.inputs], self.version)


def execute(stage: Stage, cfg: dict, cache: StageCache | RunContext, done: dict[str, StageOutput]) -> StageOutput:
    """Run ``stage`` (or fetch it from the cache) given the finished stages ``done``."""
    ctx = cache if isinstance(cache, RunContext) else RunContext(cache, Path("."))
    key = stage.key(cfg, done)
    inputs = {i: done[i].artifact for i in stage.inputs}
    if stage.context:
        inputs["ctx"] = ctx
        ctx.resources["key"] = key
        ctx.resources["input_keys"] = {i: done[i].key for i in stage.inputs}
        ctx.resources["side"] = _Side({i: done[i] for i in stage.side_inputs if i in done})
    if not stage.is_cached(cfg):
        out = stage.compute(cfg, **inputs)
        return StageOutput(stage.output_key(key, out) if stage.output_key else key, out)
    check = None if stage.verify is None else (lambda record: stage.verify(stage.artifact.from_record(record)))
    compute = lambda: _record(stage.name, stage.compute, stage.artifact, cfg, inputs)  # noqa: E731
    record = ctx.cache.get_or_compute(stage.store or stage.name, key, compute, check)
    return StageOutput(key, stage.artifact.from_record(record))


class Ahead:
    """A stage being computed by a worker process (:func:`execute_ahead`): its key at once, its
    artifact when :attr:`artifact` is first read (waiting for it). A worker that died is not
    fatal: the stage is then computed in this process."""

    def __init__(self, key: str, later, artifact: type[Artifact], here: Callable[[], StageOutput]) -> None:
        self.key, self._later, self._type, self._here, self._out = key, later, artifact, here, None

    @property
    def artifact(self) -> Artifact:
        return self.finished().artifact

    def finished(self) -> StageOutput:
        if self._out is None:
            from pipeline.app.workers import WorkerLost

            try:
                self._out = StageOutput(self.key, self._type.from_record(self._later.result()))
            except WorkerLost as exc:
                import logging

                logging.getLogger(__name__).warning("%s; computing the stage in this process", exc)
                self._out = self._here()
        return self._out


def execute_ahead(stage: Stage, cfg: dict, ctx: RunContext, done: dict[str, StageOutput]) -> Ahead:
    """:func:`execute` by a worker process, while the caller goes on (``Stage.ahead``); a cached
    artifact is read by a thread, without a worker."""
    from pipeline.app.workers import call_in_worker

    key = stage.key(cfg, done)
    inputs = {i: done[i].artifact for i in stage.inputs}
    check = None if stage.verify is None else (lambda record: stage.verify(stage.artifact.from_record(record)))
    work = lambda: call_in_worker(_record, stage.name, stage.compute, stage.artifact, cfg, inputs,  # noqa: E731
                                  threads=cfg.get("threads"))
    later = ctx.cache.compute_later(stage.store or stage.name, key, work, check)
    return Ahead(key, later, stage.artifact, lambda: execute(stage, cfg, ctx, done))


def warm_ahead(cfg: dict, stages) -> None:
    """Start a worker early for the first stage that guesses (``Stage.ahead`` asked with no
    finished stages) it will run ahead: it imports while the run checks its config and reads the
    data's header. A guess never fails a run."""
    from pipeline.app.workers import warm_worker

    for stage in stages:
        try:
            if stage.ahead is not None and stage.ahead(cfg, {}):
                warm_worker(stage.ahead_imports)
                return
        except Exception:  # noqa: BLE001 - the config is checked next, and said plainly there
            return


class _Side(dict):
    """Side inputs by name; one computed ahead is waited for when first read."""

    def __getitem__(self, name: str) -> Artifact:
        return super().__getitem__(name).artifact

    def get(self, name: str, default=None):
        return self[name] if name in self else default


def _record(name: str, compute: Callable[..., Artifact], artifact: type[Artifact], cfg: dict, inputs: dict) -> dict:
    """``compute(cfg, **inputs)`` checked to be ``artifact``, as its record (the stage's parts, not
    the Stage: a worker process gets them pickled)."""
    out = compute(cfg, **inputs)
    if not isinstance(out, artifact):
        raise TypeError(f"stage {name!r} returned {type(out).__name__}, not its {artifact.__name__}.")
    return out.to_record()
