"""A stage computed ahead by a worker process (the runner's :class:`RunAhead` callback, the
executor's worker: :mod:`pipeline.app.execution.workers`): the same artifact and cache entry as in this
process, the worker's log lines logged here, its error raised where the artifact is read, and a
worker that dies replaced by a computation here; callbacks called by event, never by a stage's
name in the loop; the worker kept for a later stage's work (:meth:`Executor.submit_ahead`) and
stopped when done. (``tests/test_out_of_core.py::test_concepts_out_of_core_equal_in_memory`` runs the
concepts stage and the completeness baselines ahead in a real run and compares its results with the
in-memory run's.)"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import pytest

from pipeline.app.stores.artifacts import ConceptsArtifact
from pipeline.app.stores.cache import StageCache
from pipeline.app.execution.executor import Executor
from pipeline.app.running.plan import draw_up
from pipeline.app.stages.framework import Later, RunAhead, RunCallback, RunContext, Stage, StageOutput, execute
from pipeline.app.execution.workers import WorkerLost, call_in_worker
from pipeline.validation import InvalidInputError

log = logging.getLogger("pipeline.test_stage_ahead")


def _names(cfg: dict, load) -> ConceptsArtifact:
    """A toy stage: dies in a worker when asked to, fails when asked to, else names its process."""
    here = os.getpid() == cfg["parent"]
    if cfg["mode"] == "die" and not here:
        os._exit(3)
    if cfg["mode"] == "fail":
        raise InvalidInputError("concepts.path=nowhere.npz does not exist; give an existing file.")
    log.info("computed in %s", "this process" if here else "a worker")
    return ConceptsArtifact(concept_names=["here" if here else "worker"])


TOY = Stage("toy", ("load",), lambda cfg: {"mode": cfg["mode"]}, _names, artifact=ConceptsArtifact)


def _run(tmp_path: Path, mode: str) -> tuple[Later, RunContext]:
    cfg = {"mode": mode, "parent": os.getpid(), "threads": 1}
    plan = draw_up(cfg)
    ctx = RunContext(StageCache(tmp_path / "cache"), tmp_path, plan=plan, executor=Executor(plan))
    out = RunAhead({"toy": lambda plan, done: True}).on_stage_start(TOY, cfg, ctx, {"load": StageOutput("k", None)})
    return out, ctx


def test_a_stage_ahead_is_computed_by_a_worker_and_cached_like_any(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    out, ctx = _run(tmp_path, "ok")
    assert isinstance(out, Later) and isinstance(out.key, str)  # known at once, before the artifact
    assert out.artifact.concept_names == ["worker"]
    ctx.cache.flush()
    assert "computed in a worker" in caplog.text  # the worker's log line, logged here
    assert [(e.stage, e.hit) for e in ctx.cache.events] == [("toy", False)]
    # the entry is the stage's: read back by execute in this process, not computed again
    again = execute(TOY, {"mode": "ok", "parent": os.getpid()}, ctx, {"load": StageOutput("k", None)})
    assert again.artifact.concept_names == ["worker"] and ctx.cache.events[-1].hit


def test_the_workers_error_is_raised_where_the_artifact_is_read(tmp_path):
    out, ctx = _run(tmp_path, "fail")
    with pytest.raises(InvalidInputError, match="concepts.path=nowhere.npz does not exist"):
        out.artifact
    ctx.cache.flush()  # taken by the reader: not raised a second time
    assert not (tmp_path / "cache" / "toy" / out.key).exists()


def test_a_worker_that_dies_leaves_the_stage_to_this_process(tmp_path, caplog):
    out, ctx = _run(tmp_path, "die")
    assert out.artifact.concept_names == ["here"]
    assert "the worker process died" in caplog.text and "computing the stage in this process" in caplog.text


def test_call_in_worker_returns_the_value_and_raises_worker_lost():
    assert call_in_worker(pow, 3, 4) == 81
    with pytest.raises(WorkerLost, match="the worker process died"):
        call_in_worker(os._exit, 5)
    with pytest.raises(WorkerLost, match="no worker process could run it"):  # work that does not pickle
        call_in_worker(lambda: 1)


def test_a_worker_started_early_is_kept_for_the_stages_ahead_and_stopped():
    """Executor.warm_worker: call_in_worker and submit_ahead use the started worker, which stays for
    the run's next stage ahead; a lost one is not used again; the executor's close stops it (killed:
    it holds nothing but imports and finished work)."""
    executor = Executor(draw_up({"threads": 1}))
    assert executor.submit_ahead(pow, 2, 5) is None  # no warm worker: the caller computes it
    executor.warm_worker(("json",))
    pool = executor._warm
    assert pool is not None
    assert executor.call_in_worker(pow, 2, 5) == 32 and executor._warm is pool  # kept for the next stage ahead
    call = executor.submit_ahead(pow, 3, 3, last=False)
    assert call.result() == 27 and executor._warm is pool
    processes = list(pool._processes.values())
    call = executor.submit_ahead(pow, 2, 3)  # the last: the worker stops once it is done
    assert executor._warm is None and call.result() == 8
    for thread in threading.enumerate():  # its pool's shutdown reaps the process: wait for it, never race it
        if thread.name == "stop-stage-worker":
            thread.join(timeout=10)
    assert all(not p.is_alive() for p in processes)
    executor.warm_worker(("json",))
    call = executor.submit_ahead(pow, 2, 4, last=False, tag="early", one_thread=True)  # before its stage asks
    args, taken = executor.take_ahead("early")
    assert args == (2, 4) and taken is call and taken.result() == 16 and executor.take_ahead("early") is None
    with pytest.raises(WorkerLost, match="the worker process died"):
        executor.call_in_worker(os._exit, 5)
    assert executor._warm is None  # a lost worker is not used again
    executor.warm_worker(("json",))
    processes = list(executor._warm._processes.values())
    executor.release_worker()  # no later stage will use it
    assert executor._warm is None and all(not p.is_alive() for p in processes)
    executor.warm_worker(("json",))
    processes = list(executor._warm._processes.values())
    executor.submit_ahead(time.sleep, 30)  # a last piece of work the run no longer waits for
    executor.close()
    assert all(not p.is_alive() for p in processes)  # stopped with the run, not 30 s later
    for _ in range(5):  # the pool's own thread reaps the killed process too: never read as alive after close
        executor = Executor(draw_up({"threads": 1}))
        executor.warm_worker(("json",))
        processes = list(executor._warm._processes.values())
        executor.close()
        assert executor._warm is None and all(not p.is_alive() for p in processes)


def test_callbacks_are_called_by_event_for_the_stages_the_loop_runs(tmp_path):
    """The loop calls each callback at its events (the stages it will run, then each stage it
    computes), never by a stage's name; a stage past ``until`` is not announced."""
    import dataclasses

    from pipeline.app.stores.artifacts import Artifact
    from pipeline.app.running.runner import run_pipeline

    order = []

    class Spy(RunCallback):
        def on_loop_start(self, stages, ctx):
            order.append(f"loop {''.join(s.name for s in stages)}")

        def on_stage_start(self, stage, cfg, ctx, done):
            order.append(f"start {stage.name}")

    def step(name):
        return Stage(name, (), lambda cfg: {}, lambda cfg: order.append(name) or Artifact(), cached=False)

    stages = [step("a"), step("b"), step("c"), step("d")]
    plan = dataclasses.replace(draw_up({}), callbacks=(Spy(),))
    ctx = RunContext(StageCache(tmp_path / "cache"), tmp_path, plan=plan)
    run_pipeline({}, ctx, stages)
    assert order == ["loop abcd", "start a", "a", "start b", "b", "start c", "c", "start d", "d"]
    order.clear()
    run_pipeline({}, ctx, stages, until="d", done={"a": StageOutput("k", None)})
    assert order == ["loop abc", "start b", "b", "start c", "c"]


def test_the_cache_says_which_entries_it_holds(tmp_path):
    """StageCache.holds: an entry there (caching on, the stage not forced) is read, not computed."""
    cache = StageCache(tmp_path / "cache")
    assert not cache.holds("toy", "k1")
    cache.get_or_compute("toy", "k1", lambda: {"concept_names": ["a"]})  # a record, as stages store
    assert cache.holds("toy", "k1") and not cache.holds("toy", "k2")
    assert not StageCache(tmp_path / "cache", force=frozenset({"toy"})).holds("toy", "k1")
    assert not StageCache(tmp_path / "cache", enabled=False).holds("toy", "k1")


def test_the_stages_through_the_trees_leave_out_the_baselines():
    """run_stages (notebooks) stops at the trees: the completeness baselines, placed before the trees
    only to be computed beside them, are not part of it."""
    from pipeline.app.stages import through_trees

    def step(name, store=None):
        return Stage(name, (), lambda cfg: {}, lambda cfg: None, cached=False, store=store)

    stages = [step("project"), step("baselines"), step("fit.a", "fit"), step("fit.b", "fit"), step("report")]
    assert [s.name for s in through_trees(stages)] == ["project", "fit.a", "fit.b"]
