"""``run(cfg)``: the whole pipeline from a composed config (no Hydra decorator; tests and
notebooks call it with :func:`pipeline.app.configuration.config.compose_config`).

One run: the config checked once and planned (:func:`pipeline.app.running.plan.validate`: a
:class:`~pipeline.app.running.plan.RunPlan` with the stage list and the callbacks), then a loop over the
plan's stages (:func:`run_pipeline`) that calls the callbacks at its events
(:class:`~pipeline.app.stages.framework.RunCallback`) and knows no stage by name; where work runs
besides the loop is the run's :class:`~pipeline.app.execution.executor.Executor`, closed when the run ends.
Printing the summary is a separate step after the loop (:mod:`pipeline.app.running.run_summary`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

from pipeline.app.stores.artifacts import ReportArtifact
from pipeline.app.stores.cache import StageCache
from pipeline.app.startup.checks import parse_force  # noqa: F401 - part of the runner's interface
from pipeline.app.execution.executor import Executor
from pipeline.app.running.plan import RunPlan, draw_up, to_plain, validate  # noqa: F401 - to_plain: the runner's interface
from pipeline.app.report.writer import write_final_status, write_status, write_tables
from pipeline.app.running.run_summary import print_summary, save_explainer, show_summary
from pipeline.app.stages.framework import Later, RowFailed, RunContext, StageOutput, execute
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)


def run_pipeline(cfg: dict, ctx: RunContext, stages, until: str | None = None,
                 done: dict[str, StageOutput] | None = None) -> dict[str, StageOutput]:
    """Execute ``stages`` in order (stopping before the stage named ``until``; those in ``done``
    have finished already); returns the finished ones.

    A stage that is one row of several of its kind and cannot be computed (``RowFailed``: e.g.
    Concept-MMDT on concept means that no concept separates) never aborts the run: it is recorded
    in ``ctx.errors`` (an error row in the results, saying why and which option fixes it) and the
    other rows go on. Only when every row of its kind failed does the run stop with the first
    row's error (nothing would be left to report), unless ``ctx.keep_going`` (studies).
    """
    done = dict(done or {})
    try:
        _run_stages(cfg, ctx, stages, until, done)
    except BaseException:
        ctx.cache.flush(raise_errors=False)  # the cache entries written meanwhile are finished, not lost
        raise
    ctx.cache.flush()
    return done


def _run_stages(cfg: dict, ctx: RunContext, stages, until, done: dict) -> None:
    names = [s.name for s in stages]
    loop = list(stages[:names.index(until)] if until in names else stages)
    callbacks = ctx.plan.callbacks if ctx.plan is not None else ()
    for callback in callbacks:
        callback.on_loop_start(loop, ctx)
    for stage in loop:
        if stage.name in done:
            continue
        taken = None
        for callback in callbacks:
            taken = taken or callback.on_stage_start(stage, cfg, ctx, done)
        if taken is not None:  # computed elsewhere (a worker process); read when a later stage needs it
            done[stage.name] = taken
            continue
        try:
            done[stage.name] = execute(stage, cfg, ctx, done)
        except RowFailed as exc:
            kind = [s.name for s in stages if (s.store or s.name) == (stage.store or stage.name)]
            failed = [n for n in kind if n in done and done[n].artifact is None] + [stage.name]
            if not ctx.keep_going and len(failed) == len(kind):
                if len(kind) > 1:
                    raise InvalidInputError(f"every {exc.kind} row failed; {exc.row}: {exc}") from None
                raise exc.cause from None
            log.error("%s %s failed (the other rows go on): %s", exc.kind, exc.row, exc)
            ctx.errors[exc.row] = str(exc)
            done[stage.name] = StageOutput("failed", None)
    for name, out in done.items():
        if isinstance(out, Later):
            done[name] = out.finished()


def run_stages(cfg: dict, cache: StageCache, keep_going: bool = False):
    """All stages up to the fitted trees (for notebooks and tests).

    Returns (finished stages by name, fit artifacts by explainer row, explainer errors by row).
    """
    from pipeline.app.stores.artifacts import FitArtifact
    from pipeline.app.stages import through_trees

    plan = draw_up(cfg)
    ctx = RunContext(cache, Path(cfg["paths"].get("output_dir") or "."), plan=plan, executor=Executor(plan),
                     keep_going=keep_going)
    try:
        done = run_pipeline(plan.cfg, ctx, through_trees(list(plan.stages)))
    finally:
        ctx.executor.close()
    fits = {out.artifact.row: out.artifact for out in done.values() if isinstance(out.artifact, FitArtifact)}
    return done, fits, dict(ctx.errors)


def run_single(plan: RunPlan | dict, cache: StageCache, out_dir: Path, keep_going: bool = False,
               summary: bool = True, reuse_files: bool = False, executor: Executor | None = None):
    """One dataset: the stage loop, then the summary. Returns the results DataFrame.

    ``plan``: the run's plan (a resolved config is checked and planned first). The same stages at
    every size: latents larger than ``dataset.memory_budget`` are handled out of core by those
    stages (docs/out-of-core.md); ``compute=dask`` runs their chunk passes as Dask tasks (the
    executor is closed after the loop). ``reuse_files``: a run whose every stage key equals an
    earlier run's restores that run's files and summary from the cache (:mod:`pipeline.app.stores.run_outputs`)
    instead of reading every artifact and writing them again.
    """
    from pipeline.app.stores import run_outputs

    if not isinstance(plan, RunPlan):
        plan = validate(plan)
    if executor is None:
        executor = Executor(plan)
        for callback in plan.callbacks:
            callback.on_plan(plan, executor)
    before = run_outputs.snapshot(Path(out_dir)) if reuse_files else {}
    ctx = RunContext(cache, Path(out_dir), plan=plan, executor=executor, keep_going=keep_going)
    try:
        done, keys = stage_keys(plan, ctx)
        files_key = None
        if reuse_files:
            files_key = run_outputs.outputs_key(plan.config, keys)
            kept = run_outputs.restore(cache, files_key, Path(out_dir))
            if kept is not None:
                log.info("every stage unchanged: the files and summary of an earlier run restored (%s [%s]); "
                         "+force=report writes them again", run_outputs.STORE, files_key)
                show_summary(kept, Path(out_dir))
                import pandas as pd

                return pd.read_csv(Path(out_dir) / kept["csv"])
        done = run_pipeline(plan.cfg, ctx, plan.stages, done=done)
    finally:
        executor.close()  # figure workers, the Dask cluster, a worker nobody took
    save_explainer(plan.config, done, Path(out_dir))
    record = print_summary(plan, done, show=summary)
    if files_key is not None and not ctx.errors:
        run_outputs.store(cache, files_key, Path(out_dir), run_outputs.run_files(Path(out_dir), before), record)
    return next(out.artifact.df for out in done.values() if isinstance(out.artifact, ReportArtifact))


def stage_keys(plan: RunPlan, ctx: RunContext) -> tuple[dict[str, StageOutput], dict[str, str]]:
    """Every stage's cache key before any stage runs. A stage named by its product (its artifact
    is ``keyed_by_product``: a trained encoder by its checkpoint's sha256) runs, with the stages
    before it; returns those finished stages and the keys of all."""
    stages = list(plan.stages)
    last = max((i for i, s in enumerate(stages) if s.artifact.keyed_by_product), default=-1)
    done = run_pipeline(plan.cfg, ctx, stages[:last + 1])
    keys = {name: out.key for name, out in done.items()}
    for stage in stages[last + 1:]:
        keys[stage.name] = stage.key(plan.cfg, {name: StageOutput(key, None) for name, key in keys.items()})
    return done, keys


def run_study(plan: RunPlan, cache: StageCache, out_dir: Path):
    """An experiment over several datasets (``study.runs``); writes results + the published comparison."""
    import pandas as pd

    from pipeline.study import compare_with_published

    cfg = plan.config
    frames = []
    for name, sub in plan.studies.items():
        log.info("study %s: run %s", cfg["study"]["name"], name)
        df = run_single(sub, cache, out_dir / name, keep_going=True, summary=False)
        df.insert(0, "run", name)
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    csv, _ = write_tables(out_dir, df)
    comparison = compare_with_published(df, cfg["study"]["published"])
    path, _ = write_tables(out_dir, comparison, "comparison")
    print(f"{cfg['study']['name']}: ours beside published ({cfg['study'].get('source', '')})")
    print(comparison.to_string(index=False, na_rep="", float_format=lambda v: f"{v:.3f}"))
    print(f"comparison written to {path}")
    print(f"results written to {csv}")
    return df


@contextmanager
def thread_limit(n: int | None):
    """A run capped at ``n`` threads (None: no cap): :func:`pipeline.threads.run_threads`, with
    the OpenMP variables of :func:`pipeline.threads.openmp_environment` set first (a user's
    value wins) for torch, which the encode stage imports later."""
    from pipeline.threads import openmp_environment, run_threads

    if n is not None and "torch" not in sys.modules:
        for name, value in openmp_environment(n).items():
            os.environ.setdefault(name, value)
    with run_threads(n):
        yield


def pin_code_path(setting: str) -> bool:
    """Write the ``cpu_code_path`` variables (:func:`pipeline.threads.cpu_code_path_environment`;
    a user's value wins) while torch, which loads MKL, is not yet imported (``python -m pipeline``
    has set them already, before anything loaded). Returns whether the process runs the setting's
    paths; a notebook that imported torch first keeps the paths it started with (warned)."""
    from pipeline.threads import cpu_code_path_environment

    wanted = cpu_code_path_environment(setting)
    if "torch" not in sys.modules:
        for name, value in wanted.items():
            os.environ.setdefault(name, value)
    differ = {name: os.environ.get(name) for name, value in wanted.items() if os.environ.get(name) != value}
    if differ:
        log.warning("cpu_code_path=%s: %s already set (or torch was imported before the run), so this run's "
                    "numbers may differ on another machine; status.json records the paths", setting,
                    ", ".join(f"{k}={v}" for k, v in differ.items()))
    return not differ


def run(cfg):
    """Run the configured pipeline (a DictConfig or plain dict); returns the results table
    (a pandas DataFrame, also written to ``results.csv``).

    The config is checked and planned first (:func:`pipeline.app.running.plan.validate`); once its values
    are checked the run starts (its status.json, the thread cap, a worker a stage ahead will want)
    while the request checks import the run's libraries; a config checked before with the same code
    is not checked again (:func:`pipeline.app.stores.run_outputs.checked_before`)."""
    from pipeline.app.stores import run_outputs
    from pipeline.app.stores.status import mark_interrupted, numerics, remove_stale_temporaries, running_status

    plain = to_plain(cfg)
    paths = plain.get("paths") or {}
    probe = StageCache(Path(paths.get("cache_dir") or "."), enabled=bool((plain.get("cache") or {}).get("enabled")))
    reuse = bool((plain.get("cache") or {}).get("reuse_files", True)) and not (plain.get("study") or {}).get("runs")
    checked = reuse and run_outputs.checked_before(probe, {k: v for k, v in plain.items() if k != "force"})
    code_path = plain.get("cpu_code_path", "native")
    started: dict = {}
    env = {"threads": plain.get("threads")}
    with contextlib.ExitStack() as stack:

        def start(plan: RunPlan) -> None:  # the values are checked: the run starts
            if paths.get("model_cache_dir") is not None or plain.get("offline") is not None:
                from pipeline.app.configuration.environment import configure_model_caches

                configure_model_caches(paths.get("model_cache_dir"), offline=plain.get("offline"))
            started["at"] = time.time()
            if paths.get("log_dir"):
                for path in mark_interrupted(paths["log_dir"]):  # runs that died without a word
                    log.warning("run %s was interrupted (its process is gone); status.json now says so", path.parent)
                for path in remove_stale_temporaries(paths["log_dir"]):
                    log.info("removed %s, a temporary file an earlier run left behind", path)
            write_status(Path(paths["output_dir"]), running_status(started["at"]))
            started["pinned"] = pin_code_path(code_path)
            stack.enter_context(thread_limit(plan.threads))
            if not plan.studies:
                started["executor"] = executor = Executor(plan)
                if not checked:  # a worker for a stage ahead imports while the request is checked
                    for callback in plan.callbacks:
                        callback.on_plan(plan, executor)

        try:
            plan = validate(plain, checked=lambda config: checked, drawn=start)
            if reuse:
                run_outputs.mark_checked(probe, plan.config)
            out_dir = Path(plan.config["paths"]["output_dir"])
            cache = StageCache(Path(paths["cache_dir"]), enabled=plain["cache"]["enabled"], force=plan.force)
            if plan.studies:
                df = run_study(plan, cache, out_dir)
            else:
                df = run_single(plan, cache, out_dir, reuse_files=reuse, executor=started["executor"])
            env = numerics(plan.threads, code_path, started["pinned"])  # inside the limit: the threads the run used
        except BaseException as exc:
            if "executor" in started:
                started["executor"].close()  # a run that ends early: its worker is not left to finish its imports
            if "at" in started:
                _failed(Path(paths["output_dir"]), exc, started["at"], env)
            raise
    write_status(out_dir, {"status": "ok", "seconds": time.time() - started["at"],
                           "results": str(out_dir / "results.csv"), "cache": [vars(e) for e in cache.events],
                           "numerics": env})
    return df


def _failed(out_dir: Path, exc: BaseException, start: float, env: dict) -> None:
    state = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
    write_final_status(out_dir, {"status": state, "error": f"{type(exc).__name__}: {exc}",
                                 "traceback": traceback.format_exc(), "seconds": time.time() - start, "numerics": env})
