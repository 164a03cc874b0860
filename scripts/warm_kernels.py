"""Compile the package's numba kernels into their cache once, at install time (issue 50, item 7).

The tree and concept kernels are ``numba.njit(cache=True)``: numba compiles each one for the
argument types of its first call and keeps the machine code in ``__pycache__`` beside the kernel's
module (or under ``$NUMBA_CACHE_DIR``), keyed by the source file, the types and this CPU. Without
this step the first large run of a fresh install compiled about 30 of them (the 1M x 512 command
of benchmarks/out_of_core.py: 113 s instead of 55 s on a 2-core machine at load 7). ``make
install`` runs this script once; it runs the pipeline on small generated data through the same code
paths and types as that command (float32 embeddings read out of core and in memory, k-means on a
sample, concept examples, Concept-CART above the presorted builder's threshold, MMDT, IMM,
SpEx-Clique; then the README's every-explainer command on the digits) and throws the runs away.

    .venv/bin/python scripts/warm_kernels.py        # about a minute; prints what it compiled

Runs may still compile a kernel for argument types no command here uses; nothing breaks then,
the run just pays that compile once.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROWS, DIM, CLUSTERS, CONCEPTS = 120_000, 32, 10, 20  # 120k x 20 concept coordinates: the presorted CART


def make_data(folder: Path) -> list[str]:
    """Blobs as float32 ``.npy`` + labels + concept example embeddings (as benchmarks/out_of_core.py)."""
    rng = np.random.default_rng(0)
    centres = rng.uniform(-10, 10, size=(CLUSTERS, DIM)).astype(np.float32)
    y = rng.integers(0, CLUSTERS, ROWS)
    X = (centres[y] + rng.standard_normal((ROWS, DIM), dtype=np.float32) * 3).astype(np.float32)
    np.save(folder / "x.npy", X)
    np.save(folder / "y.npy", y)
    concepts = {}
    for j in range(CONCEPTS):
        u = rng.standard_normal(DIM)
        concepts[f"c{j:02d}"] = (centres[j % CLUSTERS] + 3 * rng.standard_normal((200, DIM)) + 4 * u / np.linalg.norm(u))
    concepts["random"] = centres[rng.integers(0, CLUSTERS, 400)] + 3 * rng.standard_normal((400, DIM))
    np.savez(folder / "concepts.npz", **{k: v.astype(np.float32) for k, v in concepts.items()})
    return ["dataset=files", f"dataset.path={folder / 'x.npy'}", f"dataset.labels={folder / 'y.npy'}",
            "clustering=kmeans", f"clustering.n_clusters={CLUSTERS}", "concepts=examples",
            f"concepts.path={folder / 'concepts.npz'}", "explainer=[mmdt,concept_cart,imm,spex_clique]", "threads=2"]


def kernel_files() -> set[str]:
    """The compiled kernels numba holds for this package (``*.nbc`` in its cache folders)."""
    import pipeline

    roots = [Path(os.environ["NUMBA_CACHE_DIR"])] if os.environ.get("NUMBA_CACHE_DIR") else \
        [p / "__pycache__" for p in Path(pipeline.__file__).parent.rglob("*") if p.is_dir()]
    return {str(f) for r in roots if r.is_dir() for f in r.rglob("*.nbc")}


def main() -> int:
    from pipeline.app.configuration.config import compose_config
    from pipeline.app.running.runner import run

    before, t0 = kernel_files(), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pipeline-warm-") as tmp:
        tmp = Path(tmp)
        large = make_data(tmp)
        commands = {
            "out of core": [*large, "dataset.memory_budget=4MB"],
            "in memory": large,
            "every explainer": ["dataset=digits", "clustering=kmeans", "encoder=identity", "concepts=none",
                                "explainer=[spex_clique,imm,emn,exkmc,cart,tao]"],
        }
        for i, (name, args) in enumerate(commands.items()):
            cfg = compose_config([*args, f"paths.output_dir={tmp / f'run{i}'}", f"paths.cache_dir={tmp / 'cache'}",
                                  "report.html=false", "cache.reuse_files=false"])
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                run(cfg)  # its summary and progress bars are not the install's business
            print(f"warm_kernels: {name}: done ({time.perf_counter() - t0:.0f} s)", flush=True)
    added = kernel_files() - before
    print(f"warm_kernels: {len(added)} kernel versions compiled into numba's cache "
          f"({os.environ.get('NUMBA_CACHE_DIR') or 'the package folders’ __pycache__'}), "
          f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
