"""Data a clone of the project does not carry, found where the pipeline finds it (issue 50, item 1).

The clustering-benchmarks collection (M. Gagolewski's ``clustering-data-v1``: batteries ``sipu``,
``uci``, ``fcps``, ``other``, ``<battery>/<name>.data.gz`` + ``.labels0.gz``) is read from
``$PIPELINE_BENCHMARK_DIR``, else ``$PIPELINE_SHARED_DIR/data/clustering-benchmarks``, else
``../shared/data/clustering-benchmarks`` beside the repository: the defaults of
``paths.benchmark_dir`` (``conf/paths/default.yaml``). A test that needs one of its files is marked
``benchmark_data`` and skips, saying which file and how to get it, where the file is missing;
``tests/test_fresh_clone.py`` runs those tests in a copy of the repository with no ``../shared``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def benchmark_dir() -> Path:
    """The clustering-benchmarks folder the pipeline's default ``paths.benchmark_dir`` points at."""
    if os.environ.get("PIPELINE_BENCHMARK_DIR"):
        return Path(os.environ["PIPELINE_BENCHMARK_DIR"]).expanduser()
    shared = Path(os.environ.get("PIPELINE_SHARED_DIR") or ROOT.parent / "shared").expanduser()
    return shared / "data" / "clustering-benchmarks"


BENCHMARKS = benchmark_dir()

#: how to get the collection (the same words as README.md and docs/datasets.md)
HOW = ("the clustering-benchmarks collection (Gagolewski, clustering-data-v1: "
       "`git clone --depth 1 --branch v1.1.0 https://github.com/gagolews/clustering-data-v1 <dir>`) and "
       "PIPELINE_BENCHMARK_DIR=<dir> (or paths.benchmark_dir=<dir>; default ../shared/data/clustering-benchmarks); "
       "docs/datasets.md")


def missing(*names: str) -> list[str]:
    """The benchmark files (``battery/name``, e.g. ``sipu/r15``) whose data or labels are absent."""
    return [n for n in names if not all((BENCHMARKS / f"{n}.{part}.gz").is_file() for part in ("data", "labels0"))]


def skip_reason(*names: str) -> str:
    return f"needs {', '.join(missing(*names))} of {BENCHMARKS} (not found): get {HOW}"


def needs_benchmarks(*names: str):
    """Mark a test that reads these clustering-benchmarks files: it skips, saying why, without them."""
    absent = missing(*names)

    def mark(test):
        test = pytest.mark.benchmark_data(test)
        return pytest.mark.skipif(bool(absent), reason=skip_reason(*names))(test)

    return mark


def skip_without_benchmarks(*names: str) -> None:
    """Inside a test: skip here (after the checks that need no data) when the files are absent."""
    if missing(*names):
        pytest.skip(skip_reason(*names))
