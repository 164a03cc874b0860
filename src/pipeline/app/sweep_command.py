"""``python -m pipeline.collect <sweep dir>`` (this module's :func:`main`): one table from a multirun's jobs.

Writes ``<sweep dir>/collected.csv`` and ``collected.md`` (one row per job x explainer, with
each job's overrides as columns), ``jobs.csv`` (status per job), ``summary.csv`` and
``summary.md`` (grouped by every override except the seed: ``<metric>_mean``, ``<metric>_std``
and ``n_runs`` for ARI, AMI, agreement with the reference, mis-assignment, q, leaves, depth and
fit time) and ``summary_ari.{png,svg,pdf}`` (ARI per explainer, mean ± SD); prints the summary
and every failed job with its error. Exits 1 when a job failed (``--allow-failed`` to exit 0).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.app.report.sweep_results import collect_sweep
from pipeline.app.report.writer import write_tables

_SHOWN = ["job", "explainer", "ari", "ami", "ref_ari", "fit_seconds"]


def table_text(df) -> str:
    """A table as the run's summary prints it: an override column that repeats a results column
    (``dataset_override`` beside ``dataset``) once, cells as :func:`~pipeline.app.report.tables.format_cell`
    writes them (3 decimals, times to 3 significant digits; not pandas' 6 decimals)."""
    import pandas as pd

    from pipeline.app.report.tables import format_cell

    same = [c for c in df.columns if c.endswith("_override") and c.removesuffix("_override") in df.columns
            and (df[c].astype(str) == df[c.removesuffix("_override")].astype(str)).all()]
    df = df.drop(columns=same)
    return pd.DataFrame({c: [format_cell(v, c) for v in df[c]] for c in df.columns}).to_string(index=False)


def write_summary(sweep_dir: Path, results, override_keys) -> None:
    """``summary.csv|md`` (mean ± SD over seeds per group) and the ARI-per-explainer figure."""
    from pipeline.app.report.sweep import grouping_keys, summarize_sweep

    summary = summarize_sweep(results, override_keys)
    if summary.empty:
        return
    csv, _ = write_tables(sweep_dir, summary, "summary")
    shown = [c for c in summary.columns if not c.endswith(("_std", "_mean"))] + [
        c for c in ("ari_mean", "ari_std", "ref_ari_mean", "n_leaves_mean", "fit_seconds_mean") if c in summary]
    print(f"\nmean and SD over seeds, by {', '.join(grouping_keys(override_keys)) or 'explainer'}:")
    print(table_text(summary[shown]))
    print(f"summary written to {csv}")
    if "ari_mean" in summary and summary["ari_mean"].notna().any():
        from pipeline.app.report.figures import FORMATS, figure_bytes
        from pipeline.app.report.sweep import plot_metric_per_explainer
        from pipeline.app.stores.writing import atomic_write

        fig = plot_metric_per_explainer(summary, "ari")
        for fmt in FORMATS:
            atomic_write(Path(sweep_dir) / f"summary_ari.{fmt}", figure_bytes(fig, fmt))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.collect", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="a Hydra multirun directory (outputs/multiruns/<date>/<time>)")
    parser.add_argument("--allow-failed", action="store_true", help="exit 0 even if some jobs failed")
    args = parser.parse_args(argv)
    if not args.sweep_dir.is_dir():
        print(f"error: {args.sweep_dir} is not a directory; pass the multirun directory the sweep printed.",
              file=sys.stderr)
        return 2
    results, jobs = collect_sweep(args.sweep_dir)
    if jobs.empty:
        print(f"error: no job directories under {args.sweep_dir}.", file=sys.stderr)
        return 2
    write_tables(args.sweep_dir, jobs, "jobs")
    if not results.empty:
        csv, _ = write_tables(args.sweep_dir, results, "collected")
        extra = [c for c in results.columns if c.endswith("_override")
                 or (c not in _SHOWN and c in jobs.columns and c not in ("status", "error"))]
        print(table_text(results[[c for c in ["job", *extra, *_SHOWN[1:]] if c in results.columns]]))
        print(f"collected {len(results)} rows from {int((jobs['status'] == 'ok').sum())} jobs into {csv}")
        write_summary(args.sweep_dir, results, [c for c in jobs.columns if c not in ("job", "status", "error")])
    failed = jobs[jobs["status"] != "ok"]
    for row in failed.itertuples(index=False):
        print(f"job {row.job} {row.status}: {row.error}", file=sys.stderr)
    return 1 if len(failed) and not args.allow_failed else 0


if __name__ == "__main__":
    sys.exit(main())
