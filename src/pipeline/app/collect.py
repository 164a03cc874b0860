"""``python -m pipeline.app.collect <sweep dir>``: one table from a multirun's jobs.

Writes ``<sweep dir>/collected.csv`` and ``collected.md`` (one row per job x explainer, with
each job's overrides as columns) and ``jobs.csv`` (status per job); prints the table and
every failed job with its error. Exits 1 when a job failed (``--allow-failed`` to exit 0).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.app.report.collect import collect_sweep
from pipeline.app.report.writer import write_tables

_SHOWN = ["job", "explainer", "ari", "ami", "ref_ari", "fit_seconds"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.app.collect", description=__doc__.splitlines()[0])
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
        print(results[[c for c in ["job", *extra, *_SHOWN[1:]] if c in results.columns]].to_string(index=False))
        print(f"collected {len(results)} rows from {int((jobs['status'] == 'ok').sum())} jobs into {csv}")
    failed = jobs[jobs["status"] != "ok"]
    for row in failed.itertuples(index=False):
        print(f"job {row.job} {row.status}: {row.error}", file=sys.stderr)
    return 1 if len(failed) and not args.allow_failed else 0


if __name__ == "__main__":
    sys.exit(main())
