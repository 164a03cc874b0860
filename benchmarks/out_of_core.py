"""Embeddings streamed from disk: a 10M x 512 float32 file (20 GB) through the streamed run (issue 28).

Data: ``n`` x 512 float32 Gaussian blobs (10 clusters, std 6 around centres in [-10, 10]^512)
written as one ``.npy`` under ``--dir`` (default /tmp, never the repository) in 200k-row
chunks, with its int32 labels; 20 concepts are random unit directions (CAVs). The file is
deleted afterwards unless ``--keep``.

Sections, each in its own process (peak RSS = the process's VmHWM, plus a 5 ms sampler):

- ``read``: a plain sequential read of the file (8 MB ``readinto``), the physical limit;
- ``streamed``: :class:`pipeline.app.streamed.StreamedRun` on all rows, chunks of 100k:
  cluster (MiniBatchKMeans partial_fit, one pass), assign (labels + Z Cᵀ + moments, stored
  as shards), fit (MMDT on the streamed moments; IMM and CART on a stratified sample of
  ``--sample-rows``), evaluate (every row's predictions, ARI/AMI/agreement);
- ``memory_vs_streamed`` on the first ``--small`` rows: the same steps on an in-memory array
  (trees fitted on every row, library calls as in benchmarks/million_points.py) against the
  streamed run with no sample; same trees? time ratio;
- ``dask_vs_local`` on the same rows: the streamed run in one process vs a 2-worker LocalCluster.

Before every pass the file's pages are dropped from the page cache (posix_fadvise DONTNEED on
this file only), so each pass reads the disk.

    python benchmarks/out_of_core.py                              # 10M rows (20 GB), ~1 h on 2 loaded cores
    python benchmarks/out_of_core.py --rows 200000 --small 100000 # quick

Results: benchmarks/results/out_of_core.json (printed too).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
OUT = HERE.parent / "results" / "out_of_core.json"
DIM, CLUSTERS, CONCEPTS, CHUNK = 512, 10, 20, 100_000


def make_data(path: Path, n: int, d: int = DIM, k: int = CLUSTERS, chunk: int = 200_000, seed: int = 0) -> None:
    """Blobs written row chunk by row chunk (never whole) + ``<stem>_labels.npy``."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-10, 10, size=(k, d)).astype(np.float32)
    labels = np.empty(n, dtype=np.int32)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": (n, d)})
        for s in range(0, n, chunk):
            m = min(chunk, n - s)
            y = rng.integers(0, k, size=m).astype(np.int32)
            x = rng.standard_normal((m, d), dtype=np.float32)
            x *= 6
            x += centres[y]
            fh.write(x.tobytes())
            labels[s:s + m] = y
    tmp.rename(path)
    np.save(labels_path(path), labels)


def labels_path(path: Path) -> Path:
    return path.with_name(path.stem + "_labels.npy")


def drop_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def hwm_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


class Sampler:
    def __enter__(self):
        self.peak, self._stop = rss_bytes(), threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss_bytes())

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def cavs(d: int = DIM, m: int = CONCEPTS, seed: int = 1) -> np.ndarray:
    C = np.random.default_rng(seed).standard_normal((m, d))
    return C / np.linalg.norm(C, axis=1, keepdims=True)


EXPLAINERS = {
    "mmdt": {"_target_": "pipeline.trees.mmdt.MMDT", "name": "mmdt", "fit": "mixture", "n_leaves": None, "params": {}},
    "imm": {"_target_": "pipeline.trees.imm.IMM", "name": "imm", "fit": "centers", "n_leaves": None, "params": {}},
    "cart": {"_target_": "pipeline.trees.cart.CART", "name": "cart", "fit": "labels", "n_leaves": None, "params": {}},
}


def _streamed(path: Path, rows: int | None, work: Path, compute, sample_rows: int | None):
    from pipeline.app.data.chunked import ChunkedArray, open_chunked
    from pipeline.app.streamed import StreamedRun

    Z, y = open_chunked(path), open_chunked(labels_path(path), vector=True)
    if rows is not None and rows < Z.n_rows:  # the first `rows` rows: a view on the same file
        Z = ChunkedArray(Z.source, (Z.parts[0].__class__(**{**vars(Z.parts[0]), "rows": rows}),))
        y = ChunkedArray(y.source, (y.parts[0].__class__(**{**vars(y.parts[0]), "rows": rows}),))
    names = [f"c{j}" for j in range(CONCEPTS)]
    run = StreamedRun(Z, y, CLUSTERS, CHUNK, work, compute, cavs=cavs(), feature_names=names)
    model = run.cluster("kmeans")
    assigned = run.assign(model)
    C = cavs()
    fits = run.fit(assigned, EXPLAINERS, sample_rows, model.cluster_centers_ @ C.T)
    results = run.evaluate(assigned, fits)
    return run, model, fits, results


def section_read(path: Path) -> dict:
    drop_cache(path)
    buf = bytearray(8 << 20)
    t0, c0, total = time.perf_counter(), time.process_time(), 0
    with open(path, "rb", buffering=0) as fh:
        while True:
            got = fh.readinto(buf)
            if not got:
                break
            total += got
    wall = time.perf_counter() - t0
    return {"bytes": total, "wall_s": wall, "cpu_s": time.process_time() - c0, "GB_per_s": total / wall / 1e9,
            "peak_rss_GB": hwm_bytes() / 1e9}


def section_streamed(path: Path, work: Path, sample_rows: int) -> dict:
    from pipeline.app.compute import LocalCompute

    drop_cache(path)
    t0, c0 = time.perf_counter(), time.process_time()
    with Sampler() as mem:
        run, _, fits, results = _streamed(path, None, work, LocalCompute(), sample_rows)
    wall = time.perf_counter() - t0
    n = run.Z.n_rows
    return {"rows": n, "bytes": run.Z.nbytes, "stage_wall_s": run.seconds, "wall_s": wall,
            "cpu_s": time.process_time() - c0, "rows_per_s": n / wall, "GB_per_s": run.Z.nbytes / wall / 1e9,
            "peak_rss_GB": max(mem.peak, hwm_bytes()) / 1e9, "sample_rows": sample_rows, "results": results}


def _in_memory(path: Path, rows: int) -> tuple[dict, dict]:
    """The same steps on an in-memory array: every tree on every row."""
    from pipeline.app.explainers import FitInputs, fit_explainer
    from pipeline.concepts.projection import project
    from pipeline.streaming import stream_kmeans
    from pipeline import metrics

    seconds = {}
    t = time.perf_counter()
    Z = np.load(path, mmap_mode="r")[:rows].copy()
    y = np.load(labels_path(path))[:rows]
    seconds["load"] = time.perf_counter() - t
    t = time.perf_counter()
    model = stream_kmeans([[Z[s:s + CHUNK] for s in range(0, rows, CHUNK)]], CLUSTERS, random_state=0, n_init=3)
    seconds["cluster"] = time.perf_counter() - t
    t = time.perf_counter()
    labels = model.predict(Z).astype(np.int64)
    C = cavs()
    X = project(Z, C)
    seconds["assign"] = time.perf_counter() - t
    t = time.perf_counter()
    inputs = FitInputs(X=X, labels=labels, feature_names=[f"c{j}" for j in range(CONCEPTS)], n_clusters=CLUSTERS,
                       centers=model.cluster_centers_ @ C.T)
    trees = {}
    for row, spec in EXPLAINERS.items():  # MMDT: fit(X, labels) estimates the means and σ itself
        est, pred = fit_explainer(row, spec, inputs, 0)
        trees[row] = (est.tree_, metrics.ari(y, pred))
    seconds["fit"] = time.perf_counter() - t
    return seconds, trees


def section_memory_vs_streamed(path: Path, rows: int, work: Path) -> dict:
    from pipeline.app.compute import LocalCompute

    _in_memory(path, 20_000)  # warm-up: the trees' compiled kernels, imports
    _streamed(path, 20_000, work / "warm", LocalCompute(), None)
    with Sampler() as m1:
        t0 = time.perf_counter()
        mem_seconds, mem_trees = _in_memory(path, rows)
        mem_wall = time.perf_counter() - t0
    drop_cache(path)
    with Sampler() as m2:
        t0 = time.perf_counter()
        run, _, fits, results = _streamed(path, rows, work, LocalCompute(), None)
        st_wall = time.perf_counter() - t0
    same = {}
    for row, (tree, _) in mem_trees.items():
        a, b = tree.to_dict(), fits[row]["tree"].to_dict()
        same[row] = {"structure": _structure(a) == _structure(b),
                     "max_threshold_diff": _threshold_diff(tree, fits[row]["tree"])}
    return {"rows": rows, "in_memory": {"wall_s": mem_wall, "stage_wall_s": mem_seconds, "peak_rss_GB": m1.peak / 1e9,
                                        "ari": {r: t[1] for r, t in mem_trees.items()}},
            "streamed": {"wall_s": st_wall, "stage_wall_s": run.seconds, "peak_rss_GB": m2.peak / 1e9,
                         "ari": {r["explainer"]: r.get("ari") for r in results}},
            "streamed_over_in_memory": st_wall / mem_wall, "same_trees": same}


def _structure(d: dict):
    """The tree without its thresholds (features, children, labels)."""
    nodes = [{k: v for k, v in node.items() if k != "threshold"} for node in d.get("nodes", [])]
    return json.dumps({**d, "nodes": nodes}, sort_keys=True, default=str)


def _threshold_diff(a, b) -> float:
    ta, tb = np.asarray(a.threshold, float), np.asarray(b.threshold, float)
    if ta.shape != tb.shape:
        return float("inf")
    ok = np.isfinite(ta) & np.isfinite(tb)
    return float(np.max(np.abs(ta[ok] - tb[ok]), initial=0.0))


def section_dask_vs_local(path: Path, rows: int, work: Path) -> dict:
    from pipeline.app.compute import DaskCompute, LocalCompute

    out = {}
    for name in ("local", "dask_2_workers"):
        compute = LocalCompute() if name == "local" else DaskCompute(n_workers=2, threads_per_worker=1)
        try:
            drop_cache(path)
            t0 = time.perf_counter()
            run, model, fits, results = _streamed(path, rows, work / name, compute, None)
            out[name] = {"wall_s": time.perf_counter() - t0, "stage_wall_s": run.seconds,
                         "trees": {r: f["tree"].to_json() for r, f in fits.items()},
                         "results": results}
        finally:
            compute.close()
    out["same_trees"] = out["local"]["trees"] == out["dask_2_workers"]["trees"]
    out["same_results"] = all({k: v for k, v in a.items() if k != "fit_seconds"}
                              == {k: v for k, v in b.items() if k != "fit_seconds"}
                              for a, b in zip(out["local"]["results"], out["dask_2_workers"]["results"]))
    out["dask_over_local"] = out["dask_2_workers"]["wall_s"] / out["local"]["wall_s"]
    for name in ("local", "dask_2_workers"):
        out[name].pop("trees")
    return out


def child(args) -> None:
    path, work = Path(args.data), Path(args.work)
    if args.section == "read":
        res = section_read(path)
    elif args.section == "streamed":
        res = section_streamed(path, work / "streamed", args.sample_rows)
    elif args.section == "memory_vs_streamed":
        res = section_memory_vs_streamed(path, args.small, work / "small")
    else:
        res = section_dask_vs_local(path, args.small, work / "dask")
    print("RESULT " + json.dumps(res, default=float), flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--small", type=int, default=1_000_000, help="rows of the in-memory and Dask comparisons")
    ap.add_argument("--sample-rows", type=int, default=1_000_000, help="fit.sample_rows of the big run")
    ap.add_argument("--dir", default="/tmp", help="where the data file goes (never the repository)")
    ap.add_argument("--keep", action="store_true", help="keep the data file")
    ap.add_argument("--sections", nargs="+", default=["read", "streamed", "memory_vs_streamed", "dask_vs_local"])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--section", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.section:
        return child(args)
    base = Path(args.dir) / f"out_of_core_{args.rows}"
    base.mkdir(parents=True, exist_ok=True)
    path = base / "embeddings.npy"
    made = not path.exists()
    if made:
        t0 = time.perf_counter()
        print(f"writing {args.rows} x {DIM} float32 ({args.rows * DIM * 4 / 1e9:.1f} GB) to {path}", flush=True)
        make_data(path, args.rows)
        print(f"  written in {time.perf_counter() - t0:.0f} s", flush=True)
    report = {"rows": args.rows, "dim": DIM, "clusters": CLUSTERS, "concepts": CONCEPTS, "chunk_rows": CHUNK,
              "file_GB": path.stat().st_size / 1e9, "cpus": os.cpu_count(), "sections": {}}
    try:
        for section in args.sections:
            load = os.getloadavg()
            cmd = [sys.executable, str(HERE), "--section", section, "--data", str(path), "--work", str(base / "work"),
                   "--small", str(min(args.small, args.rows)), "--sample-rows", str(args.sample_rows)]
            print(f"[{section}] load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode or not line:
                print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
                report["sections"][section] = {"error": proc.stderr[-2000:]}
                continue
            res = json.loads(line[0][len("RESULT "):])
            res["load_average_before"] = load
            res["load_average_after"] = os.getloadavg()
            report["sections"][section] = res
            print(json.dumps(res, indent=1)[:3000], flush=True)
            Path(args.out).write_text(json.dumps(report, indent=1))  # every finished section is kept
    finally:
        import shutil

        shutil.rmtree(base / "work", ignore_errors=True)
        if made and not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    s = report["sections"]
    if "read" in s and "streamed" in s and "error" not in s["read"] and "error" not in s["streamed"]:
        report["streamed_over_read"] = s["streamed"]["wall_s"] / s["read"]["wall_s"]
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
