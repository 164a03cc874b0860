"""Collecting a multirun sweep: every job's results.csv + status.json into one table."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml


def job_dirs(sweep_dir: Path) -> list[Path]:
    """Job directories of a Hydra sweep (those holding status.json, results.csv or .hydra/), sorted by job number."""
    dirs = [p for p in Path(sweep_dir).iterdir() if p.is_dir() and not p.name.startswith(".")
            and any((p / f).exists() for f in ("status.json", "results.csv", ".hydra"))]
    return sorted(dirs, key=lambda p: (not p.name.isdigit(), int(p.name) if p.name.isdigit() else 0, p.name))


def read_overrides(job: Path) -> dict:
    path = job / ".hydra" / "overrides.yaml"
    if not path.exists():
        return {}
    out = {}
    for item in yaml.safe_load(path.read_text()) or []:
        key, _, value = str(item).partition("=")
        out[key.lstrip("+~")] = value
    return out


def read_status(job: Path) -> dict:
    path = job / "status.json"
    if not path.exists():
        return {"status": "unknown", "error": "no status.json (the job died before the pipeline started?)"}
    from pipeline.app.stores.status import effective_status

    status = json.loads(path.read_text())
    if effective_status(status) == "interrupted":  # "running", but its process is gone
        status.update(status="interrupted", error=status.get("error") or "the job's process ended without reporting "
                      "(killed, out of memory or time)")
    return status


def collect_sweep(sweep_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(results of all jobs with job number + overrides as columns, one status row per job).

    An override whose key is also a results column (``dataset``, ``explainer``) becomes ``<key>_override``.
    """
    frames, statuses = [], []
    for job in job_dirs(sweep_dir):
        overrides, status = read_overrides(job), read_status(job)
        statuses.append({"job": job.name, "status": status.get("status"), "error": status.get("error", ""),
                         **overrides})
        if (job / "results.csv").exists() and status.get("status") == "ok":
            df = pd.read_csv(job / "results.csv")
            for i, (k, v) in enumerate({"job": job.name, **overrides}.items()):
                df.insert(i, f"{k}_override" if k in df.columns else k, v)
            frames.append(df)
    results = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return results, pd.DataFrame(statuses)
