"""The clustering-benchmark text format (Gagolewski's framework, as in ../shared/data).

``<benchmark_dir>/<battery>/<name>.data.gz``: one point per line, whitespace-separated floats;
``<battery>/<name>.labels<k>.gz``: one 1-based integer label per line, 0 = noise.
Labels are returned 0-based with noise as -1.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.app.data.dataset import Dataset, reads
from pipeline.app.data.loading import missing_data_error
from pipeline.validation import InvalidInputError

LAYOUT = "<benchmark_dir>/<battery>/<name>.data.gz and <battery>/<name>.labels0.gz (e.g. sipu/r15.data.gz)"


def read_clustbench(root: Path, name: str, labels: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Points (n, d) float64 and labels (n,) int64 (0-based, noise -1) of ``<battery>/<name>``."""
    if "/" not in name:
        raise InvalidInputError(f"dataset.name must be '<battery>/<name>' (e.g. sipu/r15), got {name!r}.")
    data_file = root / f"{name}.data.gz"
    label_file = root / f"{name}.labels{labels}.gz"
    if not root.is_dir() or not data_file.exists() or not label_file.exists():
        available = sorted(p.name[: -len(".data.gz")] for p in (root / name.split("/")[0]).glob("*.data.gz")) \
            if (root / name.split("/")[0]).is_dir() else []
        err = missing_data_error(
            f"clustering benchmark {name!r} ({data_file.name}, {label_file.name})", root, LAYOUT,
            keys="paths.benchmark_dir=<dir> (or env PIPELINE_BENCHMARK_DIR, or dataset.root=<dir>)", downloadable=False,
        )
        hint = f" Datasets in that battery: {available}." if available else ""
        raise InvalidInputError(str(err) + hint)
    X = np.loadtxt(data_file, dtype=np.float64, ndmin=2)
    y = np.loadtxt(label_file, dtype=np.int64, ndmin=1)
    if len(X) != len(y):
        raise InvalidInputError(f"{data_file} has {len(X)} points but {label_file} has {len(y)} labels.")
    return X, y - 1  # 1-based -> 0-based; noise 0 -> -1


@reads("root")
def load_clustbench(spec: dict, paths: dict, random_state: int = 0, labels: int = 0) -> Dataset:
    """``<battery>/<name>`` (``dataset.name``) of the benchmark collection; ``labels``: which
    ``labels<k>`` file is the ground truth."""
    root = Path(spec.get("root") or paths["benchmark_dir"]).expanduser()
    labels = int(labels)
    X, y = read_clustbench(root, spec["name"], labels)
    return Dataset(
        name=f"clustbench/{spec['name']}", X=X, y=y, kind="tabular",
        feature_names=[f"x{j}" for j in range(X.shape[1])],
        meta={"source": str(root / spec["name"]), "labels": labels, "n_noise": int((y < 0).sum())},
    )
