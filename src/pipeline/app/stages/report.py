"""Stage ``report``: a run's files (results table, trees, concept and counterfactual files).

Not cached: it writes into the run's own output directory. Its artifact (the results
DataFrame and what was written) is what the runner prints a summary of after the loop.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from pipeline.app.stores.artifacts import (
    ClusterArtifact, CompletenessArtifact, ConceptsArtifact, ConceptTestsArtifact, CounterfactualsArtifact,
    EvaluateArtifact, FiguresArtifact,
    LoadArtifact, ProjectArtifact, FitArtifact, ReportArtifact,
)
from pipeline.app.report.render_cache import RenderCache
from pipeline.app.report.run_report import read_tree, render_key, rules_json, rules_text, tree_data, tree_figure
from pipeline.app.report.tables import results_frame
from pipeline.app.report.writer import write_tables
from pipeline.app.stores.writing import atomic_write
from pipeline.app.stages.framework import RunCallback, RunContext, Stage


def figures_stage(rows) -> Stage:
    """Stage ``figures`` (not cached): the trees' figures handed to the executor's figure workers as
    soon as the trees are evaluated (the ARIs are in their titles), so that they are drawn while the
    completeness probes and the report's other files are computed; the report stage writes them
    (the executor stops the workers when a run stops early)."""
    fit_names = tuple(f"fit.{row}" for row in rows)

    def compute(cfg: dict, load: LoadArtifact, cluster: ClusterArtifact, project: ProjectArtifact,
                evaluate: EvaluateArtifact, plan, ctx: RunContext, **fits) -> FiguresArtifact:
        fits = {name[len("fit."):]: fits[name] for name in fit_names if fits.get(name) is not None}
        df = results_frame(evaluate.rows, {"dataset": load.name, "clustering": cfg["clustering"]["name"]})
        data = tree_data(load, cluster, project)  # leaf annotations: size, purity, majority class
        ari = dict(zip(df["explainer"], df["ari"])) if "ari" in df.columns else {}
        renders = render_cache(cfg, ctx)
        if not plan.display.figures:
            return FiguresArtifact(data=data, ari=ari, renders=renders, finish=list)
        encoder = ctx.work(cfg).figure_encoder()
        finish = tree_figures(Path(ctx.out_dir), fits, data, load.name, ari, renders, encoder)
        return FiguresArtifact(data=data, ari=ari, renders=renders, finish=finish, encoder=encoder)

    return Stage("figures", ("load", "cluster", "project", "evaluate", *fit_names), lambda cfg: {}, compute,
                 cached=False, artifact=FiguresArtifact)


class WarmFigures(RunCallback):
    """Starts the figure workers (:meth:`pipeline.app.execution.executor.Executor.warm_figures`) when the loop
    reaches the stage ``at`` (the first tree's fit), if it will run the figures stage: their imports
    then take the core the tree fits leave idle."""

    def __init__(self, at: str) -> None:
        self.at, self.armed = at, False

    def on_loop_start(self, stages: list, ctx: RunContext) -> None:
        self.armed = any(s.name == "figures" for s in stages)

    def on_stage_start(self, stage, cfg, ctx, done):
        if self.armed and stage.name == self.at:
            ctx.work(cfg).warm_figures()
        return None


def report_stage(rows, counterfactuals: bool = False, completeness: bool = False) -> Stage:
    """The report stage over explainer rows ``rows`` (and the counterfactuals and completeness
    stages, if they run); the trees' figures come from the ``figures`` stage."""
    fit_names = tuple(f"fit.{row}" for row in rows)
    inputs = ("load", "cluster", "concepts", "concept_tests", "project", "evaluate", "figures", *fit_names)
    inputs += ("completeness",) if completeness else ()
    inputs += ("counterfactuals",) if counterfactuals else ()

    def compute(cfg: dict, load: LoadArtifact, cluster: ClusterArtifact, concepts: ConceptsArtifact,
                concept_tests: ConceptTestsArtifact, project: ProjectArtifact, evaluate: EvaluateArtifact,
                figures: FiguresArtifact, plan, ctx: RunContext,
                completeness: CompletenessArtifact | None = None, counterfactuals: CounterfactualsArtifact | None = None,
                **fits) -> ReportArtifact:
        out_dir = Path(ctx.out_dir)
        fits = {name[len("fit."):]: fits[name] for name in fit_names if fits.get(name) is not None}
        df = results_frame(evaluate.rows, {"dataset": load.name, "clustering": cfg["clustering"]["name"]})
        executor = ctx.work(cfg)
        try:  # the figures are encoded while the other files are written
            out = _write_files(cfg, plan, out_dir, df, figures.data, figures.ari, figures.renders, load, cluster,
                               concepts, project, fits, completeness, counterfactuals, concept_tests)
            figures.finish()
        except BaseException:
            executor.close_figures()
            raise
        executor.close_figures(wait=False)
        return ReportArtifact(**out)

    return Stage("report", inputs, lambda cfg: {}, compute, cached=False, artifact=ReportArtifact)


def _write_files(cfg, plan, out_dir, df, data, ari, renders, load, cluster, concepts, project, fits, completeness,
                 counterfactuals, tests=None) -> dict:
    """Every file of the report but the tree figures; the fields of its artifact. With more than one
    thread, ``assignments.parquet`` and the notebook's ``concepts/run.npz`` are written by threads of
    their own meanwhile (Arrow compresses, and zlib sums, without the GIL: 3.7 s at 10M rows for the
    one, 1 s at 1M for the other)."""
    from concurrent.futures import ThreadPoolExecutor

    from pipeline.threads import helper_threads

    helpers = helper_threads(plan.threads)

    def aside(fn, *args):  # fn(*args) by a background thread (threads=1: here, now)
        if not helpers:
            fn(*args)
            return None
        return background.submit(fn, *args)

    with ThreadPoolExecutor(max_workers=max(helpers, 1)) as background:
        waits = [aside(write_assignments, out_dir, cfg, load, cluster, fits)]
        write_trees(out_dir, fits, False, data, load.name, ari, cache=renders)
        csv, _ = write_tables(out_dir, df)
        out = {"df": df, "csv": csv, "fits": fits, "table2": None, "counterfactuals_csv": None, "html": None,
               "data": data}
        if concepts.enabled:  # Table-2 row, CAV table, files for the notebook (issue 6)
            from pipeline.app.report.concept_run import cav_table, table2_for_run, write_cav_table, write_concept_run

            out["table2"] = table2_for_run(cfg, load, cluster, project, df, concepts, tests)
            waits.append(aside(write_concept_run, out_dir, load, cluster, concepts, project, out["table2"],
                               completeness, tests))
            if concepts.cav_summary:
                write_cav_table(out_dir, cav_table(concepts.cav_summary, tests, project.units, project.units_kind,
                                                   project.concept_names, project.X),
                                " ".join(t for t in (concepts.cav_test, tests.test_line if tests else None) if t))
            atomic_write(out_dir / "concepts" / "table2.csv", out["table2"].to_csv(index=False))
            if concepts.measurements is not None:  # every row's measured values (issue 47)
                from pipeline.app.report.concept_run import write_measurements

                write_measurements(out_dir, concepts, row_ids(cfg, load))
            if completeness is not None and completeness.completeness:
                atomic_write(out_dir / "concepts" / "completeness.json",
                             json.dumps(completeness.to_record(), indent=1, default=float))
        if counterfactuals is not None:  # issue 8: TGT / DBM between clusters
            from pipeline.app.report.counterfactual_plots import write_counterfactuals

            out["counterfactuals_csv"] = write_counterfactuals(out_dir, counterfactuals, plan.display.figures)[0]
        if plan.display.html:  # one self-contained page (issue 14)
            from pipeline.app.report.run_report import run_report_html

            page = run_report_html(cfg, load, cluster, project, df, fits, concepts if concepts.enabled else None,
                                   counterfactuals, cache=renders, completeness=completeness, data=data, tests=tests)
            out["html"] = atomic_write(out_dir / "report.html", page.encode("utf-8"))
        for wait in waits:
            if wait is not None:
                wait.result()
    return out


def row_ids(cfg: dict, load: LoadArtifact):
    """Every row's id: ``dataset.ids`` (a 1-D array file), the dataset's own ids (``dataset.id_column``,
    file names of a folder), else None (row numbers)."""
    import numpy as np

    n = len(load.y) if load.y is not None else len(load.inputs)
    ids = (load.meta or {}).get("ids")
    return None if ids is None or len(ids) != n else np.asarray(ids)


class _Int64:
    """A tree's cluster ids (kept in a small integer type) read as int64 slice by slice: the file's
    columns keep their type whatever the ids are kept in."""

    def __init__(self, ids) -> None:
        self.ids = ids

    def __getitem__(self, rows: slice):
        return self.ids[rows].astype("int64")


def write_assignments(out_dir: Path, cfg: dict, load: LoadArtifact, cluster: ClusterArtifact, fits: dict) -> Path:
    """``assignments.parquet``: every row's id (or row number), its reference cluster and each
    tree's cluster (row groups of 262,144 rows, streamed one at a time), written atomically."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    labels = np.asarray(cluster.labels)
    ids = row_ids(cfg, load)
    cols = {"id": ids if ids is not None else None, "reference": labels}
    cols.update({row: _Int64(fit.predictions) for row, fit in fits.items() if len(fit.predictions) == labels.size})
    group = 1 << 18  # a row group of every column at a time: ~20 MB in Arrow, not the whole table

    def piece(start: int) -> "pa.Table":  # one row group of every column
        stop = min(start + group, labels.size)
        return pa.table({k: (np.arange(start, stop, dtype=np.int64) if v is None else v[start:stop])
                         for k, v in cols.items()})

    def stream(fh) -> None:
        # no dictionary pages: for a column of cluster ids they took ~70 MB of encoder state and saved no
        # space; zstd makes the file 40% smaller than snappy
        with pq.ParquetWriter(fh, piece(0).schema, use_dictionary=False, compression="zstd") as writer:
            for start in range(0, max(labels.size, 1), group):
                writer.write_table(piece(start), row_group_size=group)
        pa.default_memory_pool().release_unused()  # Arrow's allocator keeps freed buffers otherwise

    return atomic_write(Path(out_dir) / "assignments.parquet", stream)


def render_cache(cfg: dict, ctx: RunContext):
    """Figures drawn by earlier runs, kept under ``<cache_dir>/report`` (``+force=report`` redraws;
    ``cache.enabled=false`` draws everything and keeps nothing)."""
    cache = ctx.cache
    keep = getattr(cache, "enabled", False) and not cache.forced("report")
    return RenderCache(Path(cache.root) / "report" if keep else None)


def write_trees(out_dir: Path, fits: dict[str, FitArtifact], figures: bool = True, data: dict | None = None,
                dataset: str | None = None, ari: dict[str, float] | None = None, cache=None) -> list[Path]:
    """Each tree as ``trees/<row>.json`` (tree + simplified annotated rules), ``trees/<row>.rules.txt``
    and ``trees/<row>.dot`` (Graphviz), and (``figures``) its figures (:func:`tree_figures`).

    ``data`` (:func:`pipeline.app.report.run_report.tree_data`) annotates leaves with size, purity
    and majority class; ``ari`` (row -> ARI vs ground truth) goes into the figure titles.
    ``cache`` (:class:`pipeline.app.report.render_cache.RenderCache`) reuses figures drawn before.
    """
    finish = tree_figures(out_dir, fits, data, dataset, ari, cache) if figures else list
    written = []
    for row, fit in fits.items():
        tree, reading = read_tree(fit, data)
        doc = {"explainer": row, "method": fit.name, "fit_seconds": float(fit.fit_seconds), "tree": fit.tree,
               "rules": rules_json(fit, data)}
        written.append(atomic_write(Path(out_dir) / "trees" / f"{row}.json", json.dumps(doc, indent=1, default=float)))
        written.append(atomic_write(Path(out_dir) / "trees" / f"{row}.rules.txt", rules_text(row, fit, data).encode("utf-8")))
        written.append(atomic_write(Path(out_dir) / "trees" / f"{row}.dot",
                                    tree.to_dot(title=f"{row} ({fit.name})", reading=reading).encode("utf-8")))
    return written + finish()


def tree_figures(out_dir: Path, fits: dict[str, FitArtifact], data: dict | None = None, dataset: str | None = None,
                 ari: dict[str, float] | None = None, cache=None, encoder=None) -> Callable[[], list[Path]]:
    """Starts each tree's figures: ``figures/<row>.{png,svg,pdf}`` (screen size) with the print
    variants ``figures/<row>.column.{pdf,png}`` (3.3 in, one column of a two-column paper) and
    ``figures/<row>.wide.{pdf,png}`` (6.9 in), all text at 7 pt or more. Returns the function
    that waits for them and writes them (and keeps them in ``cache``): the figures are encoded
    meanwhile by ``encoder`` (:class:`pipeline.app.execution.encoding.Encoder`: worker processes)
    when given, else when the function is called. A tree drawn by an earlier run is copied
    from ``cache`` (matplotlib is then not imported)."""
    cache = cache or RenderCache(None)
    jobs = []
    for row, fit in fits.items():
        inputs = {"row": row, "name": fit.name, "tree": fit.tree, "data": render_key(data),
                  "dataset": dataset, "ari": (ari or {}).get(row)}
        hit = cache.lookup("tree_figure", inputs)
        jobs.append((row, inputs, hit if hit is not None else _start_figures(row, fit, data, dataset, ari, encoder)))

    def finish() -> list[Path]:
        written = []
        for row, inputs, job in jobs:
            if isinstance(job, list):  # encodings under way
                job = {name: blob for encoding in job for name, blob in encoding.result().items()}
                cache.store("tree_figure", inputs, job)
            for fmt, blob in job.items():
                written.append(atomic_write(Path(out_dir) / "figures" / f"{row}.{fmt}", blob))
        return written

    return finish


def _start_figures(row: str, fit: FitArtifact, data, dataset, ari, encoder) -> list:
    from pipeline.app.execution.encoding import FORMATS, Encoder
    from pipeline.app.report.figures import COLUMN_WIDTHS

    encoder = encoder or Encoder(1)
    jobs = [(tree_figure(row, fit, data, dataset, (ari or {}).get(row)), FORMATS, "")]
    for variant, width in COLUMN_WIDTHS.items():  # print sizes: 3.3 in / 6.9 in at >= 7 pt
        fig = tree_figure(row, fit, data, dataset, (ari or {}).get(row), width=width)
        jobs.append((fig, ("pdf", "png"), f"{variant}."))
    return [encoder.submit_all(jobs)]  # one worker: the three layouts' PDFs share their font subsets
