"""``run(cfg)``: the whole pipeline from a composed config (no Hydra decorator; tests and
notebooks call it with :func:`pipeline.app.config.compose_config`).

One run is a loop over :func:`pipeline.app.stages.declared_stages` (load -> train -> encode ->
concepts -> cluster -> project -> fit.<row> -> evaluate -> [counterfactuals] -> report), after
one capability check (:func:`pipeline.app.capabilities.check_request`); printing the summary is
a separate step after the loop (:func:`print_summary`).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

from pipeline.app.cache import StageCache
from pipeline.app.capabilities import check_request
from pipeline.app.checks import parse_force  # noqa: F401 - part of the runner's interface
from pipeline.app.report.writer import write_final_status, write_status, write_tables
from pipeline.app.stages import declared_stages
from pipeline.app.stages.framework import Ahead, RunContext, StageOutput, execute, execute_ahead, warm_ahead
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)


def to_plain(cfg) -> dict:
    """The resolved config as plain dicts/lists; a clear error if ``paths.output_dir`` is unset."""
    if isinstance(cfg, dict):
        return copy.deepcopy(cfg)
    from omegaconf import OmegaConf

    cfg = copy.deepcopy(cfg)
    OmegaConf.set_struct(cfg, False)
    cfg.pop("hydra", None)
    try:
        str(cfg.paths.output_dir)
    except Exception:
        raise InvalidInputError(
            "paths.output_dir is not set: outside `python -m pipeline` (compose API, notebooks) pass "
            "paths.output_dir=<dir> as an override."
        ) from None
    from pipeline.app.checks import resolve_config

    return resolve_config(cfg)  # a bad value (PIPELINE_THREADS=abc) is one paragraph, not a traceback


def run_pipeline(cfg: dict, ctx: RunContext, stages, until: str | None = None,
                 done: dict[str, StageOutput] | None = None) -> dict[str, StageOutput]:
    """Execute ``stages`` in order (stopping before the stage named ``until``; those in ``done``
    have finished already); returns the finished ones.

    A failing explainer row (``fit.<row>``, an :class:`InvalidInputError`: e.g. Concept-MMDT on
    concept means that no concept separates) never aborts the run: it is recorded in
    ``ctx.errors`` (an error row in the results, saying why and which option fixes it) and the
    other rows are fitted and reported. Only when every row failed does the run stop with the
    first row's error (nothing would be left to report), unless ``ctx.keep_going`` (studies).
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
    fit_rows = [s.name for s in stages if s.name.startswith("fit.")]
    names = [s.name for s in stages]
    warm: dict[str, list] = {}  # stage name -> the later stages (before ``until``) it warms (Stage.warm)
    for s in stages[:names.index(until) if until in names else len(stages)]:
        if s.warm is not None:
            warm.setdefault(s.warm_before, []).append(s)
    for stage in stages:
        if stage.name == until:
            break
        for later in warm.pop(stage.name, ()):
            later.warm(cfg, ctx)
        if stage.name in done:
            continue
        if stage.ahead is not None and stage.is_cached(cfg) and stage.ahead(cfg, done):
            done[stage.name] = execute_ahead(stage, cfg, ctx, done)  # read when a later stage needs it
            continue
        try:
            done[stage.name] = execute(stage, cfg, ctx, done)
        except InvalidInputError as exc:
            if not stage.name.startswith("fit."):
                raise
            row = stage.name[len("fit."):]
            failed = [n for n in fit_rows if n in done and done[n].artifact is None] + [stage.name]
            if not ctx.keep_going and len(failed) == len(fit_rows):
                if len(fit_rows) > 1:
                    raise InvalidInputError(f"every explainer row failed; {row}: {exc}") from None
                raise
            log.error("explainer %s failed (the other rows go on): %s", row, exc)
            ctx.errors[row] = str(exc)
            done[stage.name] = StageOutput("failed", None)
    for name, out in done.items():
        if isinstance(out, Ahead):
            done[name] = out.finished()


def run_stages(cfg: dict, cache: StageCache, keep_going: bool = False):
    """All stages up to the fitted trees (for notebooks and tests).

    Returns (finished stages by name, fit artifacts by explainer row, explainer errors by row).
    """
    ctx = RunContext(cache, Path(cfg["paths"].get("output_dir") or "."), keep_going)
    done = run_pipeline(cfg, ctx, declared_stages(cfg), until="evaluate")
    fits = {name[len("fit."):]: out.artifact for name, out in done.items()
            if name.startswith("fit.") and out.artifact is not None}
    return done, fits, dict(ctx.errors)


def print_summary(cfg: dict, done: dict[str, StageOutput], show: bool = True) -> dict:
    """Print the terminal summary of one finished run (the step after the stage loop); ``show=False``
    prints only where the files went. Returns what was printed as :func:`show_summary` takes it
    (the text, and where the files are relative to the run folder), for the run's kept files."""
    report, load, ref = done["report"].artifact, done["load"].artifact, done["cluster"].artifact
    parts = []
    if show and cfg["report"]["summary"]:
        from pipeline.app.report.summary import summary_text

        title = (f"{load.name} ({len(ref.labels)} samples) | encoder={cfg['encoder']['name']} | "
                 f"reference={ref.method}" + (" [chosen using labels]" if ref.uses_labels else ""))
        from pipeline.app.report.run_report import tree_data

        data = report.data if report.data is not None else tree_data(load, ref, done["project"].artifact)
        parts.append(summary_text(title, report.df, report.fits, cfg["report"]["max_rules"], data,
                                  stability=(ref.scores or {}).get("stability") if isinstance(ref.scores, dict) else None))
        # a table's own columns as latents (the identity encoder) name the trees' cuts already
        own_columns = load.kind == "tabular" and list(done["encode"].artifact.latent_names) == list(load.feature_names or [])
        if (cfg["concepts"].get("name") or "none") == "none" and not own_columns:
            from pipeline.app.concept_sets.definitions import concept_hint

            parts.append(concept_hint(load.name, load.kind))
        if report.table2 is not None:
            from pipeline.app.report.concept_run import concept_summary_text

            concepts = done["concepts"].artifact
            project = done["project"].artifact
            from pipeline.app.stages.completeness import completeness_text

            parts.append(concept_summary_text(report.table2, concepts.cav_summary or [], concepts.cav_dropped or {},
                                              project.selection, concepts.discovery, concepts.cav_test,
                                              concepts.provenance, concepts.concept_notes,
                                              completeness=completeness_text(done["completeness"].artifact
                                                                             if "completeness" in done else None),
                                              tests=done["concept_tests"].artifact if "concept_tests" in done else None,
                                              used=project.concept_names, measures=concepts.measures))
    out_dir = Path(report.csv).parent

    def rel(path):
        return None if path is None else Path(path).relative_to(out_dir).as_posix()

    record = {"text": "\n".join(parts), "csv": rel(report.csv), "html": rel(report.html),
              "counterfactuals_csv": rel(report.counterfactuals_csv),
              "counterfactual_space": done["counterfactuals"].artifact.space if report.counterfactuals_csv else None}
    show_summary(record, out_dir)
    return record


def show_summary(record: dict, out_dir: Path) -> None:
    """Print a summary :func:`print_summary` returned, with the paths of the run folder ``out_dir``."""
    if record["text"]:
        print(record["text"])
    if record.get("counterfactuals_csv"):
        print(f"counterfactual explanations ({record['counterfactual_space']} space) written to "
              f"{Path(out_dir) / record['counterfactuals_csv']}")
    print(f"results written to {Path(out_dir) / record['csv']}")
    if record.get("html"):
        print(f"report: {Path(out_dir) / record['html']}")


def save_explainer(cfg: dict, done: dict[str, StageOutput], out_dir: Path) -> None:
    """``<run>/explainer/``, the run applied to new data (docs/explain.md). The run's results stand
    without it: a bundle that cannot be written is a warning naming why, not a failed run."""
    from pipeline.app.explainer_bundle import write_run_bundle
    from pipeline.app.write_errors import WriteFailedError

    try:
        write_run_bundle(cfg, done, out_dir)
    except (InvalidInputError, WriteFailedError, OSError, ValueError, KeyError) as exc:
        log.warning("the run's explainer (%s) was not saved: %s: %s; python -m pipeline.explain cannot use this "
                    "run", out_dir / "explainer", type(exc).__name__, exc)


def run_single(cfg: dict, cache: StageCache, out_dir: Path, keep_going: bool = False, summary: bool = True,
               reuse_files: bool = False):
    """One dataset: the stage loop, then the summary. Returns the results DataFrame.

    The same stages at every size: latents larger than ``dataset.memory_budget`` are handled out
    of core by those stages (docs/out-of-core.md); ``compute=dask`` runs their chunk passes as
    Dask tasks (the backend is closed after the loop). ``reuse_files``: a run whose every stage
    key equals an earlier run's restores that run's files and summary from the cache
    (:mod:`pipeline.app.run_outputs`) instead of reading every artifact and writing them again.
    """
    from pipeline.app import run_outputs
    from pipeline.app.compute import close_backend
    from pipeline.app.stages.report import close_figures
    from pipeline.app.workers import release_workers

    stages = None
    if not (reuse_files and run_outputs.checked_before(cache, cfg)):
        with contextlib.suppress(Exception):  # a bad config is said by check_request, next
            stages = declared_stages(cfg)
            warm_ahead(cfg, stages)  # a worker for a stage ahead imports while the request is checked
        try:
            check_request(cfg)
        except BaseException:
            release_workers()  # the run ends here: the worker is not left to finish its imports
            raise
        if reuse_files:
            run_outputs.mark_checked(cache, cfg)
    before = run_outputs.snapshot(Path(out_dir)) if reuse_files else {}
    ctx = RunContext(cache, Path(out_dir), keep_going)
    stages = stages or declared_stages(cfg)
    try:
        done, keys = stage_keys(cfg, ctx, stages)
        files_key = None
        if reuse_files:
            files_key = run_outputs.outputs_key(cfg, keys)
            kept = run_outputs.restore(cache, files_key, Path(out_dir))
            if kept is not None:
                log.info("every stage unchanged: the files and summary of an earlier run restored (%s [%s]); "
                         "+force=report writes them again", run_outputs.STORE, files_key)
                show_summary(kept, Path(out_dir))
                import pandas as pd

                return pd.read_csv(Path(out_dir) / kept["csv"])
        done = run_pipeline(cfg, ctx, stages, done=done)
    finally:
        close_figures(ctx)  # a run that stopped before its report: its figure workers
        close_backend(ctx)
        release_workers()
    save_explainer(cfg, done, Path(out_dir))
    record = print_summary(cfg, done, show=summary)
    if files_key is not None and not ctx.errors:
        run_outputs.store(cache, files_key, Path(out_dir), run_outputs.run_files(Path(out_dir), before), record)
    return done["report"].artifact.df


def stage_keys(cfg: dict, ctx: RunContext, stages) -> tuple[dict[str, StageOutput], dict[str, str]]:
    """Every stage's cache key before any stage runs. A stage named by its product
    (``Stage.output_key``: a trained encoder is keyed by its checkpoint's sha256) runs, with the
    stages before it; returns those finished stages and the keys of all."""
    last = max((i for i, s in enumerate(stages) if s.output_key is not None), default=-1)
    done = run_pipeline(cfg, ctx, stages[:last + 1])
    keys = {name: out.key for name, out in done.items()}
    for stage in stages[last + 1:]:
        keys[stage.name] = stage.key(cfg, {name: StageOutput(key, None) for name, key in keys.items()})
    return done, keys


def run_study(cfg: dict, cache: StageCache, out_dir: Path):
    """An experiment over several datasets (``study.runs``); writes results + the published comparison."""
    import pandas as pd

    from pipeline.study import compare_with_published

    frames = []
    for name, spec in cfg["study"]["runs"].items():
        sub = copy.deepcopy(cfg)
        sub["dataset"] = spec["dataset"]
        if spec.get("clustering"):
            sub["clustering"] = spec["clustering"]
        if spec.get("explainers") is not None:
            unknown = sorted(set(spec["explainers"]) - set(cfg["explainer"]))
            if unknown:
                raise InvalidInputError(f"study run {name!r} lists explainers {unknown} that are not in the explainer "
                                        f"config {sorted(cfg['explainer'])}.")
            sub["explainer"] = {row: cfg["explainer"][row] for row in spec["explainers"]}
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
    (a pandas DataFrame, also written to ``results.csv``)."""
    from pipeline.app.checks import check_values
    from pipeline.app.status import mark_interrupted, numerics, remove_stale_temporaries, running_status

    plain = to_plain(cfg)
    stages = [s.store or s.name for s in declared_stages(plain)] + ["counterfactuals"]
    force = check_values(plain, stages)  # +force names, threads, sizes, directories: before any stage
    plain.pop("force", None)
    out_dir = Path(plain["paths"]["output_dir"])
    cache = StageCache(Path(plain["paths"]["cache_dir"]), enabled=plain["cache"]["enabled"], force=force)
    if plain["paths"].get("model_cache_dir") is not None or plain.get("offline") is not None:
        from pipeline.app.environment import configure_model_caches

        configure_model_caches(plain["paths"].get("model_cache_dir"), offline=plain.get("offline"))
    start = time.time()
    if plain["paths"].get("log_dir"):
        for path in mark_interrupted(plain["paths"]["log_dir"]):  # runs that died without a word
            log.warning("run %s was interrupted (its process is gone); status.json now says so", path.parent)
        for path in remove_stale_temporaries(plain["paths"]["log_dir"]):
            log.info("removed %s, a temporary file an earlier run left behind", path)
    write_status(out_dir, running_status(start))
    env = {"threads": plain.get("threads")}
    code_path = plain.get("cpu_code_path", "native")
    pinned = pin_code_path(code_path)
    try:
        with thread_limit(plain.get("threads")):
            if plain["study"]["runs"]:
                df = run_study(plain, cache, out_dir)
            else:
                df = run_single(plain, cache, out_dir, reuse_files=plain["cache"].get("reuse_files", True))
            env = numerics(plain.get("threads"), code_path, pinned)  # inside the limit: the thread counts the run used
        write_status(out_dir, {"status": "ok", "seconds": time.time() - start,
                               "results": str(out_dir / "results.csv"), "cache": [vars(e) for e in cache.events],
                               "numerics": env})
    except BaseException as exc:
        state = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        write_final_status(out_dir, {"status": state, "error": f"{type(exc).__name__}: {exc}",
                                     "traceback": traceback.format_exc(), "seconds": time.time() - start,
                                     "numerics": env})
        raise
    return df
