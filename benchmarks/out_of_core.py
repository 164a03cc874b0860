"""One pipeline at any size (issue 35): the command a user runs, measured at 1M, 2M and 10M rows.

Every row runs ``python -m pipeline ...`` as a child process (never the library step by step),
as a user types it (its printed summary included; only ``hydra.run.dir`` and ``paths.cache_dir``
are set), and records its wall time, the peak resident set and the peak anonymous memory of the whole
process tree (psutil, sampled every 20 ms: the Dask workers count too), the cache's size after
the run, the load average before and after, and the run's own stage timings (status.json).

Sections (``--sections``, default all but ``scale``):

- ``million``: 1M x 512 float32 (2.05 GB), 20 concepts given as example embeddings, the issue's
  command ``dataset=files ... clustering=kmeans clustering.n_clusters=10 concepts=examples
  explainer=[mmdt,concept_cart,imm,spex_clique] threads=2``: cold (empty cache), warm (the same
  again), and cold without figures/HTML (``report.figures=false report.html=false``); beside a
  plain read of the file (the floor);
- ``bare``: 2M x 128 float32 (1.0 GB), the bare command ``dataset=files dataset.path=...
  dataset.labels=... explainer=[mmdt,imm]`` (no other option: GMM with K from the labels);
- ``dask``: the 1M x 512 chunked command of the issue (``clustering=kmeans
  clustering.n_clusters=10 explainer=[mmdt,imm]``) with ``compute=local`` and with
  ``compute=dask compute.n_workers=2``, both cold, in three alternating pairs (the ratio of the medians);
- ``million_ab``: the cold ``million`` command alternately on another checkout (``--against``,
  e.g. a ``git worktree`` of an earlier commit) and on this one, three pairs (the medians);
- ``scale``: 10M x 512 (20.5 GB) with the 20 concepts, end to end, beside one sequential read of
  the file with its pages dropped from the page cache first;
- ``scale_dask``: the same 10M command with ``compute=dask compute.n_workers=2`` (does it finish,
  in what time and memory, workers included).

Data are written under ``--dir`` (default /work/big) and kept (``--fresh`` rewrites them).
Results: benchmarks/results/out_of_core.json (merged per section; printed too).

    python benchmarks/out_of_core.py --sections million bare dask
    python benchmarks/out_of_core.py --sections scale scale_dask
    python benchmarks/out_of_core.py --sections million_ab --against /tmp/base --label before49

``million_ab`` also compares the first pair's run folders byte for byte (rules, trees, CAV table,
PNG figures, assignments; ``same_outputs``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
OUT = HERE.parent / "results" / "out_of_core.json"
DIM, CLUSTERS, CONCEPTS = 512, 10, 20
PAIRS = 3  # local/Dask pairs of the dask section (the ratio of the medians)


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


class TreeSampler:
    """Peak RSS and peak anonymous memory of a process and its children, sampled every 20 ms."""

    def __init__(self, pid: int):
        import psutil

        self.proc, self.peak_rss, self.peak_anon = psutil.Process(pid), 0, 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _sample(self):
        import psutil

        rss = anon = 0
        try:
            procs = [self.proc, *self.proc.children(recursive=True)]
        except psutil.Error:
            return
        for p in procs:
            try:
                with open(f"/proc/{p.pid}/status") as fh:
                    for line in fh:
                        if line.startswith("VmRSS:"):
                            rss += int(line.split()[1]) * 1024
                        elif line.startswith("RssAnon:"):
                            anon += int(line.split()[1]) * 1024
            except OSError:
                pass
        self.peak_rss, self.peak_anon = max(self.peak_rss, rss), max(self.peak_anon, anon)

    def _run(self):
        while not self._stop.wait(0.02):
            self._sample()

    def stop(self):
        self._stop.set()
        self._t.join()


def folder_bytes(path: Path, linked: bool = False) -> int:
    """Bytes of the files under ``path``; ``linked``: only those that are also a run folder's file
    (hard links: the run's files kept for reruns take no disk while the run folder exists)."""
    if not Path(path).exists():
        return 0
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file() and (not linked or f.stat().st_nlink > 1))


def command(args: list, work: Path, tag: str, src: Path | None = None) -> dict:
    """``python -m pipeline <args>`` as a child process; wall, peaks, cache size, stage seconds
    (``src``: the package of another checkout, for a side-by-side comparison)."""
    out = work / f"out-{tag}"
    shutil.rmtree(out, ignore_errors=True)
    # the user's command as typed (its printed summary included); only where its run folder and cache go is set
    full = [sys.executable, "-m", "pipeline", *args, f"hydra.run.dir={out}", f"paths.cache_dir={work / 'cache'}"]
    env = {**os.environ, "PYTHONPATH": str(src or ROOT / "src")}
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    with open(work / f"{tag}.log", "w") as log:
        proc = subprocess.Popen(full, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        sampler = TreeSampler(proc.pid)
        rc = proc.wait()
        sampler.stop()
    wall = time.perf_counter() - t0
    row = {"command": "python -m pipeline " + " ".join(args), "wall_s": round(wall, 2), "returncode": rc,
           "peak_rss_gb": round(sampler.peak_rss / 1e9, 3), "peak_anon_gb": round(sampler.peak_anon / 1e9, 3),
           "cache_gb": round(folder_bytes(work / "cache") / 1e9, 3),
           "cache_linked_to_runs_gb": round(folder_bytes(work / "cache", linked=True) / 1e9, 3),
           "load_before": load0, "load_after": os.getloadavg()}
    status = out / "status.json"
    if status.exists():
        events = json.loads(status.read_text()).get("cache", [])
        row["stages_s"] = {}
        for e in events:
            row["stages_s"][e["stage"]] = round(row["stages_s"].get(e["stage"], 0) + e["seconds"], 2)
        row["cache_hits"] = f"{sum(e['hit'] for e in events)}/{len(events)}"
    if (out / "results.csv").exists():
        import pandas as pd

        df = pd.read_csv(out / "results.csv")
        keep = [c for c in ("explainer", "ari", "ref_ari", "fit_rows") if c in df.columns]
        row["results"] = df[keep].to_dict("records")
    if rc != 0:
        row["log_tail"] = (work / f"{tag}.log").read_text()[-2000:]
    print(json.dumps({k: v for k, v in row.items() if k != "results"}), flush=True)
    return row


def read_file(path: Path) -> dict:
    """One sequential read of ``path`` after dropping its pages (8 MB readinto): the floor."""
    drop_cache(path)
    buf = bytearray(8 << 20)
    t0, n = time.perf_counter(), 0
    with open(path, "rb", buffering=0) as fh:
        while (got := fh.readinto(buf)):
            n += got
    wall = time.perf_counter() - t0
    return {"bytes": n, "wall_s": round(wall, 2), "gb_per_s": round(n / wall / 1e9, 3)}


def ensure(path: Path, n: int, d: int, fresh: bool, concepts: bool = False, warm: bool = True) -> None:
    """The data (written if missing), then read once: in the page cache as right after it was
    written, whatever ran before (a 10M section evicts it); the 10M section drops it instead."""
    if fresh or not path.exists():
        make_data(path, n, d)
    if concepts and (fresh or not concepts_path(path).exists()):
        make_concepts(path, d)
    if not warm:
        return
    with open(path, "rb", buffering=0) as fh:
        buf = bytearray(8 << 20)
        while fh.readinto(buf):
            pass


def concepts_path(path: Path) -> Path:
    return path.with_name(path.stem + "_concepts.npz")


def concept_args(path: Path) -> list:
    return ["dataset=files", f"dataset.path={path}", f"dataset.labels={labels_path(path)}", "clustering=kmeans",
            f"clustering.n_clusters={CLUSTERS}", "concepts=examples", f"concepts.path={concepts_path(path)}",
            "explainer=[mmdt,concept_cart,imm,spex_clique]", "threads=2"]


def workspace(d: Path, name: str) -> Path:
    """An empty work folder (run folders and the stage cache of one section)."""
    work = d / f"work-{name}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return work


def million(d: Path, fresh: bool) -> dict:
    path = d / "m1.npy"
    ensure(path, 1_000_000, DIM, fresh, concepts=True)
    work = workspace(d, "million")
    out = {"data_gb": round(path.stat().st_size / 1e9, 3), "read_cached": None}
    out["cold"] = command(concept_args(path), work, "cold")
    out["warm"] = command(concept_args(path), work, "warm")
    shutil.rmtree(work / "cache")
    out["cold_no_figures"] = command(concept_args(path) + ["report.figures=false", "report.html=false"], work,
                                     "cold-nofig")
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as fh:
        buf = bytearray(8 << 20)
        while fh.readinto(buf):
            pass
    out["read_cached"] = {"wall_s": round(time.perf_counter() - t0, 2), "note": "file in the page cache"}
    return out


def bare(d: Path, fresh: bool) -> dict:
    path = d / "m2.npy"
    ensure(path, 2_000_000, 128, fresh)
    work = workspace(d, "bare")
    args = ["dataset=files", f"dataset.path={path}", f"dataset.labels={labels_path(path)}", "explainer=[mmdt,imm]"]
    return {"data_gb": round(path.stat().st_size / 1e9, 3), "cold": command(args, work, "cold")}


def dask(d: Path, fresh: bool) -> dict:
    path = d / "m1.npy"
    ensure(path, 1_000_000, DIM, fresh)
    out = {}
    base = ["dataset=files", f"dataset.path={path}", f"dataset.labels={labels_path(path)}", "clustering=kmeans",
            f"clustering.n_clusters={CLUSTERS}", "explainer=[mmdt,imm]"]
    walls = {"local": [], "dask": []}
    for rep in range(PAIRS):  # alternating, so a change in the machine's state hits both alike
        for tag, extra in (("local", []), ("dask", ["compute=dask", "compute.n_workers=2",
                                                    "compute.threads_per_worker=1"])):
            out[f"{tag}_{rep}"] = row = command(base + extra, workspace(d, f"dask-{tag}"), tag)
            walls[tag].append(row["wall_s"])
    out["walls_s"] = walls
    out["ratio_dask_over_local"] = round(float(np.median(walls["dask"]) / np.median(walls["local"])), 3)
    return out


def scale(d: Path, fresh: bool) -> dict:
    path = d / "m10.npy"
    ensure(path, 10_000_000, DIM, fresh, concepts=True, warm=False)
    work = workspace(d, "scale")
    out = {"data_gb": round(path.stat().st_size / 1e9, 3), "read": read_file(path)}
    drop_cache(path)
    out["cold"] = command(concept_args(path), work, "cold")
    out["ratio_to_read"] = round(out["cold"]["wall_s"] / out["read"]["wall_s"], 2)
    return out


def scale_dask(d: Path, fresh: bool) -> dict:
    """The 10M command again with a 2-worker LocalCluster (the chunk passes as Dask tasks)."""
    path = d / "m10.npy"
    ensure(path, 10_000_000, DIM, fresh, concepts=True, warm=False)
    work = workspace(d, "scale-dask")
    out = {"data_gb": round(path.stat().st_size / 1e9, 3)}
    drop_cache(path)
    out["cold"] = command(concept_args(path) + ["compute=dask", "compute.n_workers=2", "compute.threads_per_worker=1"],
                          work, "cold")
    return out


def million_ab(d: Path, fresh: bool, against: Path | None = None) -> dict:
    """The cold 1M command of ``million``, alternately on the checkout ``against`` (its ``src``) and
    on this one, PAIRS times each: this machine's speed drifts within the hour, so a change is
    judged side by side (the medians)."""
    if against is None:
        raise SystemExit("--sections million_ab needs --against <a checkout of the commit to compare with>, e.g. "
                         "git worktree add /tmp/base <commit>")
    path = d / "m1.npy"
    ensure(path, 1_000_000, DIM, fresh, concepts=True)
    work = workspace(d, "million_ab")
    rows = {"against": str(against), "base": [], "this": []}
    for i in range(PAIRS):
        for side, src in (("base", Path(against) / "src"), ("this", None)):
            shutil.rmtree(work / "cache", ignore_errors=True)
            ensure(path, 1_000_000, DIM, False)
            rows[side].append(command(concept_args(path), work, f"{side}{i}", src=src))
    for side in ("base", "this"):
        rows[f"{side}_median_s"] = float(np.median([r["wall_s"] for r in rows[side]]))
    rows["ratio_this_over_base"] = round(rows["this_median_s"] / rows["base_median_s"], 3)
    rows["same_outputs"] = same_outputs(work / "out-base0", work / "out-this0")
    return rows


#: the run files that must not change when only the code's structure does: the rules, the trees, the CAV
#: table, the figures (PNG; PDF and SVG carry the time they were made) and every row's assignment
SAME = ("trees/*.rules.txt", "trees/*.json", "concepts/cavs.csv", "figures/*.png", "assignments.parquet",
        "results.csv")


def same_outputs(a: Path, b: Path) -> dict:
    """Byte comparison of two run folders' :data:`SAME` files: {file: "equal" | "differs" | "missing"}."""
    import hashlib

    out = {}
    for pattern in SAME:
        for f in sorted({p.relative_to(a) for p in a.glob(pattern)} | {p.relative_to(b) for p in b.glob(pattern)}):
            if not ((a / f).exists() and (b / f).exists()):
                out[str(f)] = "missing"
                continue
            digests = [hashlib.sha256((x / f).read_bytes()).hexdigest() for x in (a, b)]
            out[str(f)] = "equal" if digests[0] == digests[1] else "differs"
            if out[str(f)] == "differs" and f.parent.name == "trees" and f.suffix == ".json":  # fit_seconds: a timing
                trees = [{k: v for k, v in json.loads((x / f).read_text()).items() if k != "fit_seconds"} for x in (a, b)]
                out[str(f)] = "equal but its fit time" if trees[0] == trees[1] else "differs"
    if "results.csv" in out and out["results.csv"] == "differs":  # its fit_seconds column is a timing
        import pandas as pd

        ra, rb = (pd.read_csv(x / "results.csv") for x in (a, b))
        timing = [c for c in ra.columns if "seconds" in c or c.endswith("_s")]
        same = ra.drop(columns=timing, errors="ignore").equals(rb.drop(columns=timing, errors="ignore"))
        out["results.csv"] = "equal but its timings" if same else "differs"
    return out


SECTIONS = {"million": million, "million_ab": million_ab, "bare": bare, "dask": dask, "scale": scale,
            "scale_dask": scale_dask}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", nargs="+", default=["million", "bare", "dask"], choices=sorted(SECTIONS))
    ap.add_argument("--dir", type=Path, default=Path("/work/big"))
    ap.add_argument("--fresh", action="store_true", help="rewrite the data files")
    ap.add_argument("--against", type=Path, help="million_ab: a checkout of the commit to compare with")
    ap.add_argument("--label", help="million_ab: kept under million_ab_<label> (one entry per compared commit)")
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    results = json.loads(OUT.read_text()) if OUT.exists() else {}
    results = {k: v for k, v in results.items() if k in SECTIONS or k == "machine" or k.startswith("million_ab_")}
    results["machine"] = {"cpus": os.cpu_count(), "memory_gb": round(os.sysconf("SC_PAGE_SIZE") *
                                                                       os.sysconf("SC_PHYS_PAGES") / 1e9, 1)}
    for section in a.sections:
        name = f"{section}_{a.label}" if section == "million_ab" and a.label else section
        results[name] = (million_ab(a.dir, a.fresh, a.against) if section == "million_ab"
                         else SECTIONS[section](a.dir, a.fresh))
        results[name]["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(results, indent=1, default=str))
    print(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
