"""Speed of our trees against the published implementations, side by side (issue 17).

The references are built from local checkouts whose paths are given, into a temporary
directory that is removed afterwards (nothing is copied into this repository):

* ExKMC 0.0.3 (github.com/navefr/ExKMC): its shipped ``cut_finder.c`` predates Python 3.11,
  so Cython (installed into the temporary directory) regenerates it from ``cut_finder.pyx``
  and the extension is compiled there with ``setup.py build_ext --inplace --cython``.
* The SpEx authors' code (github.com/talargv/SpEx): run as is (``CliqueBased``,
  ``GraphBased``); it needs numpy, scipy and numba, which this environment has.

Every implementation runs in its own process on the same saved data, one untimed warm-up
run first (numba compilation, caches), then ``--repeats`` timed runs; medians of process
CPU time and wall time are reported, for 1 thread and for all threads (environment caps
``OMP/OPENBLAS/MKL/NUMBA_NUM_THREADS``, ExKMC's ``n_jobs``, our ``limit_threads``). The
leaf partitions of ours and the reference are compared on every case (ARI == 1).

    python benchmarks/reference_speed.py --exkmc /tmp/refs/ExKMC --spex /tmp/refs/SpEx
    python benchmarks/reference_speed.py --exkmc ... --spex ... --sections small --repeats 9

Results are printed as tables and written to benchmarks/results/reference_speed.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
SHARED = HERE.parents[2] / "shared"  # /work/shared beside the repository
OUT = HERE.parent / "results" / "reference_speed.json"

# case -> (our implementation, reference implementation)
LARGE = {
    "spex_clique_50k": ("ours_clique", "spex_clique"),
    "imm_50k": ("ours_imm", "exkmc_imm"),
    "exkmc20_50k": ("ours_exkmc", "exkmc_exkmc"),
    "spex_knn_10k": ("ours_graph", "spex_graph"),
}
SMALL_DATA = ("iris", "digits", "d31")
SMALL = {  # the ExKMC Cython is the reference of both centre-based trees
    "imm": ("ours_imm", "exkmc_imm"),
    "exkmc": ("ours_exkmc", "exkmc_exkmc"),
    "spex_clique": ("ours_clique", "spex_clique"),
    "spex_knn": ("ours_graph", "spex_graph"),
}


# ----------------------------------------------------------------------------- data
def make_case_data(name: str, workdir: Path, n_init: int = 1, prefix: str = "data") -> Path:
    """Save X, reference labels (``KMeans(k, n_init=n_init, random_state=0)``), their means and (for
    graph cases) a 20-NN graph as ``workdir/<prefix>_<name>.npz``."""
    from sklearn.cluster import KMeans

    path = workdir / f"{prefix}_{name}.npz"
    if path.exists():
        return path
    base = name.removesuffix("_knn")
    if base in ("blobs_50k", "blobs_10k"):
        from sklearn.datasets import make_blobs

        n = 50_000 if base == "blobs_50k" else 10_000
        X, _ = make_blobs(n_samples=n, n_features=512, centers=10, cluster_std=6.0, random_state=0)
        k = 10
    elif base == "iris":
        from sklearn.datasets import load_iris

        X, k = load_iris().data, 3
    elif base == "digits":
        from sklearn.datasets import load_digits

        X, k = load_digits().data, 10
    elif base == "d31":
        folder = SHARED / "data" / "clustering-benchmarks" / "sipu"
        with gzip.open(folder / "d31.data.gz", "rt") as fh:
            X = np.loadtxt(fh)
        k = 31
    else:
        raise ValueError(name)
    X = np.ascontiguousarray(X, dtype=np.float64)
    y = KMeans(k, random_state=0, n_init=n_init).fit_predict(X).astype(np.int32)
    centers = np.stack([X[y == c].mean(axis=0) for c in range(k)])
    extra = {}
    if "knn" in name:
        from pipeline.trees.graphs import knn_graph

        G = knn_graph(X, 20, method="exact").tocsr()
        extra = {"g_data": G.data, "g_indices": G.indices, "g_indptr": G.indptr}
    np.savez(path, X=X, y=y, centers=centers, **extra)
    return path


def load_case(path: Path):
    import scipy.sparse as sp

    z = np.load(path)
    G = None
    if "g_data" in z:
        n = z["X"].shape[0]
        G = sp.csr_matrix((z["g_data"], z["g_indices"], z["g_indptr"]), shape=(n, n))
    return z["X"], z["y"], z["centers"], G


# ----------------------------------------------------------------------------- building ExKMC
def build_exkmc(src: Path, workdir: Path) -> Path:
    """Regenerate ExKMC's cut_finder.c with Cython and compile it; returns the import dir."""
    build = workdir / "exkmc_build"
    if build.exists():
        return build
    shutil.copytree(src, build, ignore=shutil.ignore_patterns(".git"))
    (build / "ExKMC" / "splitters" / "cut_finder.c").unlink(missing_ok=True)  # stale for 3.11: regenerate
    tools = workdir / "build_tools"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(tools), "cython"], check=True)
    env = dict(os.environ, PYTHONPATH=str(tools))
    subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "--cython"], cwd=build, env=env,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not list(build.glob("cut_finder*.so")):
        raise RuntimeError(f"building ExKMC's cut_finder in {build} produced no extension module")
    return build


# ----------------------------------------------------------------------------- worker side
def _exkmc_leaves(tree, X) -> np.ndarray:
    """Leaf index of every row of X in an ExKMC tree (Node.feature/value/left/right)."""
    out = np.empty(X.shape[0], dtype=np.int64)
    stack, leaf = [(tree.tree, np.arange(X.shape[0]))], 0
    while stack:
        node, rows = stack.pop()
        if node.is_leaf():
            out[rows] = leaf
            leaf += 1
            continue
        left = X[rows, node.feature] <= node.value
        stack.append((node.right, rows[~left]))
        stack.append((node.left, rows[left]))
    return out


class _Reference:
    """The k-means object ExKMC's ``Tree.fit`` expects, answering with the saved labels."""

    def __init__(self, y, centers):
        self.n_clusters, self.cluster_centers_, self._y = centers.shape[0], centers, y

    def predict(self, X):
        return self._y if X.shape[0] == self._y.size else self._y[: X.shape[0]]


def _runner(impl: str, X, y, centers, G, k: int, threads: int):
    """A zero-argument callable fitting ``impl`` on the data, and a function giving leaf ids."""
    if impl.startswith("ours"):
        from pipeline.trees import IMM, ExKMC, SpExClique, SpExGraph

        if impl == "ours_clique":
            return lambda: SpExClique().fit(X, y), lambda est: est.tree_.apply(X)
        if impl == "ours_imm":
            return lambda: IMM().fit(X, y, centers=centers), lambda est: est.tree_.apply(X)
        if impl == "ours_exkmc":
            return (lambda: ExKMC(n_leaves=2 * k).fit(X, y, centers=centers)), lambda est: est.tree_.apply(X)
        if impl == "ours_graph":
            return lambda: SpExGraph(n_leaves=k).fit(X, G), lambda est: est.tree_.apply(X)
    if impl.startswith("exkmc"):
        from ExKMC.Tree import Tree

        leaves = k if impl == "exkmc_imm" else 2 * k
        ref = _Reference(y, centers)
        return (lambda: Tree(k, max_leaves=leaves, n_jobs=threads).fit(X, ref)), lambda t: _exkmc_leaves(t, X)
    if impl == "spex_clique":
        from clique_based import CliqueBased

        def fit():
            est = CliqueBased()
            est.train(X, y)
            return est

        return fit, lambda est: est.predict(X)
    if impl == "spex_graph":
        from graph_based import GraphBased

        def fit():
            est = GraphBased()
            est.train(X, G, k)
            return est

        return fit, lambda est: est.predict(X)
    raise ValueError(impl)


def worker(impl: str, data: Path, threads: int, repeats: int, labels_out: Path) -> dict:
    from contextlib import nullcontext

    X, y, centers, G = load_case(data)
    k = centers.shape[0]
    fit, leaves = _runner(impl, X, y, centers, G, k, threads)
    ctx = nullcontext()
    if impl.startswith("ours"):
        from pipeline.threads import limit_threads

        ctx = limit_threads(threads)
    walls, cpus = [], []
    with ctx:
        est = fit()  # warm-up: numba compilation, first-touch allocations
        for _ in range(repeats):
            w, c = time.perf_counter(), time.process_time()
            est = fit()
            walls.append(time.perf_counter() - w)
            cpus.append(time.process_time() - c)
    np.save(labels_out, np.asarray(leaves(est)).astype(np.int64))
    return {"wall": walls, "cpu": cpus}


# ----------------------------------------------------------------------------- parent side
OURS_SRC = HERE.parents[1] / "src"  # --ours-src: time another checkout of this package


def run_worker(impl, data, threads, repeats, workdir, exkmc_dir, spex_dir):
    labels = workdir / f"labels_{impl}_{data.stem}_{threads}.npy"
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[var] = str(threads)
    env.setdefault("OMP_WAIT_POLICY", "passive")  # as `python -m pipeline` sets it; for every implementation
    paths = [str(OURS_SRC)]
    paths += [str(exkmc_dir)] if impl.startswith("exkmc") else [str(spex_dir)] if impl.startswith("spex") else []
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")])
    cmd = [sys.executable, str(HERE), "--worker", impl, "--data", str(data), "--threads", str(threads),
           "--repeats", str(repeats), "--labels", str(labels)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{impl} on {data.stem} failed:\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["labels"] = str(labels)
    return res


def same_partition(a: str, b: str) -> bool:
    from sklearn.metrics import adjusted_rand_score

    return adjusted_rand_score(np.load(a), np.load(b)) == 1.0


def med(xs):
    return statistics.median(xs)


def fmt_t(s: float) -> str:
    return f"{s:8.4f}" if s < 1 else f"{s:8.2f}"


def measure(rows, case, data, ours, ref, thread_settings, repeats, workdir, exkmc_dir, spex_dir, results):
    for threads in thread_settings:
        a = run_worker(ours, data, threads, repeats, workdir, exkmc_dir, spex_dir)
        b = run_worker(ref, data, threads, repeats, workdir, exkmc_dir, spex_dir)
        same = same_partition(a["labels"], b["labels"])
        row = {"case": case, "threads": threads, "ours": ours, "reference": ref,
               "ours_cpu": med(a["cpu"]), "ours_wall": med(a["wall"]), "ref_cpu": med(b["cpu"]),
               "ref_wall": med(b["wall"]), "ours_runs": a, "ref_runs": b, "same_partition": same,
               "load": os.getloadavg()}
        row["ratio_cpu"] = row["ref_cpu"] / row["ours_cpu"]
        row["ratio_wall"] = row["ref_wall"] / row["ours_wall"]
        rows.append(row)
        results.setdefault("rows", []).append(row)
        print(f"| {case:<18} | {threads:>2} | {fmt_t(row['ours_cpu'])} | {fmt_t(row['ours_wall'])} | "
              f"{ref:<12} {fmt_t(row['ref_cpu'])} | {fmt_t(row['ref_wall'])} | {row['ratio_cpu']:7.1f}x | "
              f"{row['ratio_wall']:7.1f}x | {str(same):<5} | {os.getloadavg()[0]:4.1f} |", flush=True)


HEADER = ("| case               | th | ours CPU | ours wall| reference     ref CPU | ref wall | CPU ratio | "
          "wall ratio | same  | load |\n|---|---|---|---|---|---|---|---|---|---|")


def speedups(rows, n_all):
    print("\nAll-thread speed-up over one thread (wall):")
    for case in dict.fromkeys(r["case"] for r in rows):
        one = {r["reference"]: r for r in rows if r["case"] == case and r["threads"] == 1}
        many = {r["reference"]: r for r in rows if r["case"] == case and r["threads"] == n_all}
        for ref, r1 in one.items():
            if ref in many:
                rn = many[ref]
                print(f"  {case:<18} ours {r1['ours_wall'] / rn['ours_wall']:4.2f}x   "
                      f"{ref} {r1['ref_wall'] / rn['ref_wall']:4.2f}x   ({n_all} threads)")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--exkmc", type=Path, help="checkout of github.com/navefr/ExKMC (0.0.3)")
    p.add_argument("--spex", type=Path, help="checkout of github.com/talargv/SpEx")
    p.add_argument("--sections", nargs="+", default=["large", "small"], choices=["large", "small"])
    p.add_argument("--cases", nargs="+", default=None, help="subset of the large cases / small trees")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--small-repeats", type=int, default=15)
    p.add_argument("--threads", nargs="+", default=["1", "all"])
    p.add_argument("--workdir", type=Path, default=None, help="keep data and builds here (default: temporary)")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--ours-src", type=Path, default=OURS_SRC, help="src/ directory of the package to time")
    # worker mode (internal)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--labels", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker:
        print(json.dumps(worker(args.worker, args.data, int(args.threads[0]), args.repeats, args.labels)))
        return
    if not (args.exkmc and args.spex):
        p.error("--exkmc and --spex (checkout paths of the references) are required")
    globals()["OURS_SRC"] = args.ours_src.resolve()
    n_all = len(os.sched_getaffinity(0))
    thread_settings = [n_all if t == "all" else int(t) for t in args.threads]
    own_tmp = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="reference_speed_")) if own_tmp else args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict = {"machine": {"cpus": n_all, "start_load": os.getloadavg()}, "repeats": args.repeats}
    try:
        t = time.perf_counter()
        exkmc_dir = build_exkmc(args.exkmc.resolve(), workdir)
        print(f"ExKMC built with Cython in {time.perf_counter() - t:.0f} s ({exkmc_dir})", flush=True)
        spex_dir = args.spex.resolve()
        rows: list = []
        if "large" in args.sections:
            print(f"\nLarge data (make_blobs 50k/10k x 512, 10 centres, std 6; k-means reference), "
                  f"medians of {args.repeats}, seconds:\n{HEADER}")
            for case, (ours, ref) in LARGE.items():
                if args.cases and case not in args.cases:
                    continue
                data = make_case_data("blobs_10k_knn" if "knn" in case else "blobs_50k", workdir)
                measure(rows, case, data, ours, ref, thread_settings, args.repeats, workdir, exkmc_dir, spex_dir,
                        results)
            speedups(rows, n_all)
        if "small" in args.sections:
            print(f"\nSmall data (k-means reference with k = classes; ExKMC with 2k leaves), 1 thread, "
                  f"medians of {args.small_repeats}, seconds:\n{HEADER}")
            for name in SMALL_DATA:
                for tree, (ours, ref) in SMALL.items():
                    if args.cases and tree not in args.cases:
                        continue
                    data = make_case_data(f"{name}_knn" if tree == "spex_knn" else name, workdir)
                    measure(rows, f"{tree}_{name}", data, ours, ref, [1], args.small_repeats, workdir, exkmc_dir,
                            spex_dir, results)
    finally:
        if own_tmp:
            shutil.rmtree(workdir, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print(f"\nresults in {args.out}")


if __name__ == "__main__":
    main()
