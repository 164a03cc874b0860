"""Embeddings streamed from disk: a 10M x 512 float32 file (20 GB) through the streamed run (issue 28).

Data: ``n`` x 512 float32 Gaussian blobs (10 clusters, std 6 around centres in [-10, 10]^512)
written as one ``.npy`` under ``--dir`` (default /tmp, never the repository) in 200k-row
chunks, with its int32 labels, and 20 concepts given as example embeddings
(``<stem>_concepts.npz``: 300 positives per concept, 600 negatives). The files are deleted
afterwards unless ``--keep``.

Every run goes through the command line's runner (``pipeline.app.runner.run`` on the
``python -m pipeline`` arguments of :func:`cli_args`): ``dataset.chunk_rows=100000``,
``clustering=kmeans``, ``concepts=examples`` (CAVs fitted from the examples), ``explainer=[mmdt,
imm,cart]``, its stages cached under the section's work folder. Sections, each in its own
process (peak RSS = the process's VmHWM, plus a 5 ms sampler):

- ``read``: a plain sequential read of the file (8 MB ``readinto``), the physical limit;
- ``streamed``: all rows, trees on a stratified sample of ``--sample-rows``; then the same
  command again (every stage a cache hit, shards verified);
- ``memory_vs_streamed`` on the first ``--small`` rows: the streamed run (trees on every row)
  against the in-memory run's stages (load, encode, concepts, project, fit) on the same rows
  with the streamed reference clustering; same trees? time ratio;
- ``dask_vs_local`` on the same rows: ``compute=local`` vs ``compute=dask`` (a 2-worker
  LocalCluster, k-means by dask-ml's k-means||): time, ARI between the two reference clusterings.

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


def make_concepts(path: Path, d: int = DIM, k: int = CLUSTERS, m: int = CONCEPTS, per: int = 300,
                  seed: int = 0) -> Path:
    """Concept examples as embeddings (``concepts=examples`` with an ``.npz``): concept j's
    positives lie around cluster j mod k's centre shifted along a random direction, the
    negatives (``random``) around random centres."""
    centres = np.random.default_rng(seed).uniform(-10, 10, size=(k, d)).astype(np.float32)  # make_data's
    rng = np.random.default_rng(seed + 1)
    arrays = {}
    for j in range(m):
        u = rng.standard_normal(d)
        u /= np.linalg.norm(u)
        arrays[f"c{j:02d}"] = (centres[j % k] + 6 * rng.standard_normal((per, d)) + 8 * u).astype(np.float32)
    arrays["random"] = (centres[rng.integers(0, k, 2 * per)] + 6 * rng.standard_normal((2 * per, d))).astype(np.float32)
    out = path.with_name(path.stem + "_concepts.npz")
    np.savez(out, **arrays)
    return out


EXPLAINERS = ["mmdt", "imm", "cart"]


def cli_args(path: Path, work: Path, compute: str = "local", sample_rows: int | None = None) -> list:
    """The command line of the streamed run: ``python -m pipeline <these>``."""
    args = [f"paths.output_dir={work / 'out'}", f"paths.cache_dir={work / 'cache'}", "dataset=files",
            f"dataset.path={path}", f"dataset.labels={labels_path(path)}", f"dataset.chunk_rows={CHUNK}",
            "clustering=kmeans", f"clustering.n_clusters={CLUSTERS}", f"explainer=[{','.join(EXPLAINERS)}]",
            "concepts=examples", f"concepts.path={path.with_name(path.stem + '_concepts.npz')}",
            "report.summary=false"]
    if compute == "dask":
        args += ["compute=dask", "compute.n_workers=2", "compute.threads_per_worker=1"]
    if sample_rows:
        args.append(f"fit.sample_rows={sample_rows}")
    return args


def _cli_run(path: Path, work: Path, compute: str = "local", sample_rows: int | None = None) -> dict:
    """One streamed run through the command line's runner; wall, CPU, every stage's seconds."""
    from pipeline.app.config import compose_config
    from pipeline.app.runner import run

    t0, c0 = time.perf_counter(), time.process_time()
    df = run(compose_config(cli_args(path, work, compute, sample_rows)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    status = json.loads((work / "out" / "status.json").read_text())
    stages = {}
    for e in status["cache"]:
        stages[e["stage"]] = stages.get(e["stage"], 0.0) + e["seconds"]
    return {"wall_s": wall, "cpu_s_driver": cpu, "stage_wall_s": stages,
            "cache_hits": sum(e["hit"] for e in status["cache"]), "cached_stages": len(status["cache"]),
            "results": df.to_dict(orient="records")}


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
    drop_cache(path)
    with Sampler() as mem:
        res = _cli_run(path, work, "local", sample_rows)
    n = int(np.load(labels_path(path), mmap_mode="r").shape[0])
    nbytes = path.stat().st_size
    res.update(rows=n, bytes=nbytes, rows_per_s=n / res["wall_s"], GB_per_s=nbytes / res["wall_s"] / 1e9,
               peak_rss_GB=max(mem.peak, hwm_bytes()) / 1e9, sample_rows=sample_rows)
    t0 = time.perf_counter()
    again = _cli_run(path, work, "local", sample_rows)  # every cached stage read back (shards verified)
    res["rerun"] = {"wall_s": time.perf_counter() - t0, "cache_hits": again["cache_hits"],
                    "cached_stages": again["cached_stages"]}
    return res


def _in_memory(path: Path, work: Path, centres) -> tuple[dict, dict]:
    """The in-memory run's stages (load, encode, concepts, project, fit) on the same file, with the
    streamed run's reference clustering (its k-means centres) assigning the rows."""
    from pipeline import metrics
    from pipeline.app.artifacts import ClusterArtifact
    from pipeline.app.cache import StageCache
    from pipeline.app.config import compose_config
    from pipeline.app.runner import to_plain
    from pipeline.app.stages.concepts import CONCEPTS
    from pipeline.app.stages.encode import ENCODE, TRAIN
    from pipeline.app.stages.fit import fit_row
    from pipeline.app.stages.framework import RunContext, execute
    from pipeline.app.stages.load import LOAD
    from pipeline.app.stages.project import PROJECT
    from pipeline.streaming import assign_nearest

    cfg = to_plain(compose_config([a for a in cli_args(path, work) if not a.startswith("dataset.chunk_rows")]))
    ctx, done, seconds = RunContext(StageCache(work / "cache", enabled=False), work / "out"), {}, {}
    for stage in (LOAD, TRAIN, ENCODE, CONCEPTS):
        t = time.perf_counter()
        done[stage.name] = execute(stage, cfg, ctx, done)
        seconds[stage.name] = time.perf_counter() - t
    t = time.perf_counter()
    Z = done["encode"].artifact.Z
    cluster = ClusterArtifact(labels=assign_nearest(Z, centres).astype(np.int64), method="kmeans", centers=centres)
    seconds["assign"] = time.perf_counter() - t
    t = time.perf_counter()
    project = PROJECT.compute(cfg, encode=done["encode"].artifact, cluster=cluster, concepts=done["concepts"].artifact)
    seconds["project"] = time.perf_counter() - t
    trees, y = {}, done["load"].artifact.y
    for row in EXPLAINERS:
        t = time.perf_counter()
        fit = fit_row(cfg, row, project, cluster)
        seconds[f"fit.{row}"] = time.perf_counter() - t
        trees[row] = (fit.tree, metrics.ari(y, fit.predictions))
    return seconds, trees, done["concepts"].artifact.cavs


def section_memory_vs_streamed(path: Path, rows: int, work: Path) -> dict:
    import shutil

    from pipeline.trees.tree import ExplanationTree

    work.mkdir(parents=True, exist_ok=True)
    small = work / "warm.npy"  # warm-up on 20k rows: the trees' compiled kernels, imports
    np.save(small, np.load(path, mmap_mode="r")[:20_000])
    np.save(labels_path(small), np.load(labels_path(path))[:20_000])
    shutil.copy(path.with_name(path.stem + "_concepts.npz"), small.with_name(small.stem + "_concepts.npz"))
    _cli_run(small, work / "warm")
    drop_cache(path)
    with Sampler() as m2:
        streamed = _cli_run(path, work / "streamed")
    from pipeline.app.artifacts import StreamClusterArtifact
    from pipeline.app.cache import load_artifact

    entry = next((work / "streamed" / "cache" / "stream_cluster").glob("*/manifest.json")).parent
    centres = StreamClusterArtifact.from_record(load_artifact(entry)).centers
    drop_cache(path)
    with Sampler() as m1:
        t0 = time.perf_counter()
        mem_seconds, mem_trees, mem_cavs = _in_memory(path, work / "memory", centres)
        mem_wall = time.perf_counter() - t0
    same = {}
    for row, (doc, _) in mem_trees.items():
        st = json.loads((work / "streamed" / "out" / "trees" / f"{row}.json").read_text())
        same[row] = {"identical": st == doc, "structure": _structure(doc) == _structure(st),
                     "max_threshold_diff": _threshold_diff(ExplanationTree.from_dict(doc), ExplanationTree.from_dict(st))}
    return {"rows": rows, "in_memory": {"wall_s": mem_wall, "stage_wall_s": mem_seconds, "peak_rss_GB": m1.peak / 1e9,
                                        "ari": {r: t[1] for r, t in mem_trees.items()}},
            "streamed": {**streamed, "peak_rss_GB": m2.peak / 1e9,
                         "ari": {r["explainer"]: r.get("ari") for r in streamed["results"]}},
            "streamed_over_in_memory": streamed["wall_s"] / mem_wall, "same_trees": same}


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
    """The command line's streamed run with compute=local and compute=dask (a 2-worker LocalCluster;
    k-means by dask-ml's k-means||): time, and the ARI between the two reference clusterings."""
    import pandas as pd

    from pipeline import metrics

    out = {}
    for name in ("local", "dask"):
        drop_cache(path)
        out[name] = _cli_run(path, work / name, name)
    ref = {n: pd.read_parquet(work / n / "out" / "assignments")["reference"].to_numpy() for n in ("local", "dask")}
    out["reference_ari_dask_vs_local"] = metrics.ari(ref["local"], ref["dask"])
    out["same_trees"] = {r: (work / "local" / "out" / "trees" / f"{r}.json").read_text()
                         == (work / "dask" / "out" / "trees" / f"{r}.json").read_text() for r in EXPLAINERS}
    out["dask_over_local"] = out["dask"]["wall_s"] / out["local"]["wall_s"]
    return out


def _first_rows(path: Path, rows: int, work: Path) -> Path:
    """The file itself when it has ``rows`` rows, else a copy of its first ``rows`` rows (chunk by chunk)."""
    import shutil

    if np.load(path, mmap_mode="r").shape[0] == rows:
        return path
    work.mkdir(parents=True, exist_ok=True)
    out = work / f"first_{rows}.npy"
    src = np.load(path, mmap_mode="r")
    dst = np.lib.format.open_memmap(out, mode="w+", dtype=src.dtype, shape=(rows, src.shape[1]))
    for s in range(0, rows, 200_000):
        dst[s:s + 200_000] = src[s:min(s + 200_000, rows)]
    dst.flush()
    del dst
    np.save(labels_path(out), np.load(labels_path(path))[:rows])
    shutil.copy(path.with_name(path.stem + "_concepts.npz"), out.with_name(out.stem + "_concepts.npz"))
    return out


def child(args) -> None:
    path, work = Path(args.data), Path(args.work)
    if args.section == "read":
        res = section_read(path)
    elif args.section == "streamed":
        res = section_streamed(path, work / "streamed", args.sample_rows)
    elif args.section == "memory_vs_streamed":
        res = section_memory_vs_streamed(_first_rows(path, args.small, work), args.small, work / "small")
    else:
        res = section_dask_vs_local(_first_rows(path, args.small, work), args.small, work / "dask")
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
        make_concepts(path)
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
