"""Benchmark: SpEx-Clique, SpEx-kNN, IMM, EMN, ExKMC and sklearn CART at CLIP-embedding scale.

Data: ``make_blobs(n_samples=N, n_features=D, centers=10, cluster_std=6.0, random_state=0)``
with a k-means reference (10 clusters, seed 0). Times are tree construction only (medians of
``--repeats`` runs; the first, untimed call compiles the numba kernels). Reference timings of the
published implementations on this kind of machine are quoted next to ours; with
``--reference-dir`` pointing at a local checkout of the SpEx repository (github.com/talargv/SpEx:
``clique_based.py``, ``graph_based.py``, ``base_classes.py``) they are also run here, on the same
data in the same process, and the partitions are compared.

    python benchmarks/spex_baselines.py                       # everything, 3 repeats
    python benchmarks/spex_baselines.py --sections clique imm --repeats 5
    python benchmarks/spex_baselines.py --reference-dir ~/src/SpEx --sections clique knn --reference-repeats 3

Results are printed and written to benchmarks/results/spex_baselines.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score
from sklearn.tree import DecisionTreeClassifier

from pipeline.trees import EMN, IMM, ExKMC, SpExClique, SpExGraph
from pipeline.trees.graphs import knn_graph

PUBLISHED = {  # seconds, published implementations timed on this 2-core machine (issue 3)
    "spex_clique_50k": 15.4, "spex_knn_tree_10k": 29.7, "knn_graph_10k": 2.8,
    "imm_50k": 13.1, "emn_10k": 165.0, "cart_sklearn_50k": 22.1,
}
RESULTS: dict = {}
REF_REPEATS = 1  # runs of the published code per measurement (--reference-repeats)


def load() -> str:
    return "load avg %.1f/%.1f/%.1f" % os.getloadavg()


def data(n: int, d: int):
    X, _ = make_blobs(n_samples=n, n_features=d, centers=10, cluster_std=6.0, random_state=0)
    t = time.perf_counter()
    y = KMeans(10, random_state=0, n_init=1).fit_predict(X)
    return X, y, time.perf_counter() - t


CPU: dict = {}  # process CPU seconds (all threads) of the last timed() call: load-robust work measure


def timed(fn, repeats: int):
    times, cpus, out = [], [], None
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    CPU["last"] = statistics.median(cpus)
    return statistics.median(times), times, out


def report(key: str, med: float, times, ref: float | None = None, **extra):
    ratio = f"  -> {ref / med:5.1f}x faster than published {ref:.1f} s" if ref else ""
    cpu = CPU.pop("last", None)
    cpu_txt = f" cpu {cpu:7.2f} s" if cpu is not None else ""
    print(f"{key:<28} median {med:8.3f} s{cpu_txt}  runs {[round(t, 3) for t in times]}{ratio}  [{load()}]",
          flush=True)
    RESULTS[key] = {"median_s": med, "runs_s": times, "cpu_s": cpu, "published_s": ref, "load": os.getloadavg(),
                    **extra}
    save()


OUT = Path(__file__).parent / "results" / "spex_baselines.json"


def save():
    """Merge RESULTS into the results file (after every measurement, so partial runs persist)."""
    OUT.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(OUT.read_text()) if OUT.exists() else {}
    previous.update(RESULTS)
    OUT.write_text(json.dumps(previous, indent=1))


def same_partition(a, b) -> bool:
    return adjusted_rand_score(a, b) == 1.0


def warm_up():
    X, y, _ = data(500, 8)
    SpExClique().fit(X, y)
    SpExGraph(n_leaves=3).fit(X, knn_graph(X, 5))
    ExKMC(n_leaves=12).fit(X, y)
    EMN().fit(X, y)


def bench_clique(X, y, repeats, ref_dir, tag):
    med, times, est = timed(lambda: SpExClique().fit(X, y), repeats)
    report(f"spex_clique_{tag}", med, times, PUBLISHED.get(f"spex_clique_{tag}"))
    if ref_dir:
        from clique_based import CliqueBased

        ref = CliqueBased()
        rmed, rtimes, _ = timed(lambda: ref.train(X, y), REF_REPEATS)
        same = same_partition(est.tree_.apply(X), ref.predict(X))
        ours_cpu = RESULTS[f"spex_clique_{tag}"]["cpu_s"]
        report(f"reference_spex_clique_{tag}", rmed, rtimes, same_partition_as_ours=same,
               in_run_speedup=rmed / med)
        print(f"    in-run speed-up vs published code: {rmed / med:.1f}x wall, "
              f"{RESULTS[f'reference_spex_clique_{tag}']['cpu_s'] / ours_cpu:.1f}x CPU time; same partition: {same}")


def bench_knn(X, repeats, ref_dir, tag, method="exact"):
    tracemalloc.start()
    t = time.perf_counter()
    G = knn_graph(X, 20, method=method, random_state=0)
    build = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    report(f"knn_graph_{method}_{tag}", build, [build], PUBLISHED.get(f"knn_graph_{tag}") if method == "exact" else None,
           peak_traced_MiB=peak)
    print(f"    kNN graph ({method}): {G.nnz} stored edges, peak numpy-traced memory {peak:.0f} MiB")
    med, times, est = timed(lambda: SpExGraph(n_leaves=10).fit(X, G), repeats)
    report(f"spex_knn_tree_{tag}", med, times, PUBLISHED.get(f"spex_knn_tree_{tag}"))
    if ref_dir:
        from graph_based import GraphBased

        ref = GraphBased()
        rmed, rtimes, _ = timed(lambda: ref.train(X, G, 10), REF_REPEATS)
        same = same_partition(est.tree_.apply(X), ref.predict(X))
        ours_cpu = RESULTS[f"spex_knn_tree_{tag}"]["cpu_s"]
        report(f"reference_spex_knn_tree_{tag}", rmed, rtimes, same_partition_as_ours=same,
               in_run_speedup=rmed / med)
        print(f"    in-run speed-up vs published code: {rmed / med:.1f}x wall, "
              f"{RESULTS[f'reference_spex_knn_tree_{tag}']['cpu_s'] / ours_cpu:.1f}x CPU time; same partition: {same}")


def bench_nndescent(X):
    from pynndescent import NNDescent

    t = time.perf_counter()
    NNDescent(X[:1000], n_neighbors=21, random_state=0).neighbor_graph  # compile
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    NNDescent(X, n_neighbors=21, random_state=0).neighbor_graph
    report(f"pynndescent_graph_{X.shape[0] // 1000}k", time.perf_counter() - t, [time.perf_counter() - t],
           compile_s=compile_s)


def bench_centre(cls, X, y, repeats, tag, **kw):
    name = f"{cls.__name__.lower()}_{tag}"
    med, times, est = timed(lambda: cls(**kw).fit(X, y), repeats)
    report(name, med, times, PUBLISHED.get(name), leaves=est.tree_.n_leaves)


def bench_cart(X, y, repeats, tag):
    med, times, _ = timed(lambda: DecisionTreeClassifier(max_leaf_nodes=10, random_state=0).fit(X, y), repeats)
    report(f"cart_sklearn_{tag}", med, times)
    ours = med
    spex = RESULTS.get(f"spex_clique_{tag}", {}).get("median_s")
    if spex:
        print(f"    in-run: SpEx-Clique is {ours / spex:.1f}x faster than sklearn CART (10 leaves)")


def bench_scaling(repeats):
    for n in (10_000, 30_000, 100_000):
        X, y, _ = data(n, 512)
        for cls in (SpExClique, IMM):
            if n > 1 << 16:  # int32 row ids above 65,536 points: compile those kernels untimed
                cls().fit(X, y)
            med, times, _ = timed(lambda: cls().fit(X, y), repeats)
            report(f"scale_n_{cls.__name__}_{n}", med, times)
    for d in (128, 256, 512, 1024):
        X, y, _ = data(10_000, d)
        for cls in (SpExClique, IMM):
            med, times, _ = timed(lambda: cls().fit(X, y), repeats)
            report(f"scale_d_{cls.__name__}_{d}", med, times)
        G = knn_graph(X, 20)
        med, times, _ = timed(lambda: SpExGraph(n_leaves=10).fit(X, G), repeats)
        report(f"scale_d_SpExKNN_{d}", med, times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", nargs="+", default=["clique", "knn", "imm", "emn", "exkmc", "cart", "scaling"],
                        choices=["clique", "knn", "knn50", "nndescent", "imm", "emn", "exkmc", "cart", "scaling"])
    parser.add_argument("--approx-50k", action="store_true", help="use pynndescent for the 50k kNN graph")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reference-dir", type=Path, default=None,
                        help="local checkout of github.com/talargv/SpEx to time the published code in-run")
    parser.add_argument("--reference-repeats", type=int, default=1, help="runs of the published code (median)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    globals()["OUT"] = args.out
    globals()["REF_REPEATS"] = args.reference_repeats
    if args.reference_dir:
        sys.path.insert(0, str(args.reference_dir))
    print(f"start: {load()}, {os.cpu_count()} CPUs")
    warm_up()
    secs = set(args.sections)
    if secs & {"clique", "imm", "emn", "exkmc", "cart"}:
        X, y, km = data(50_000, 512)
        print(f"50k x 512 blobs, k-means reference {km:.1f} s (not counted)")
        if "clique" in secs:
            bench_clique(X, y, args.repeats, args.reference_dir, "50k")
        if "imm" in secs:
            bench_centre(IMM, X, y, args.repeats, "50k")
        if "emn" in secs:
            bench_centre(EMN, X, y, args.repeats, "50k")
        if "exkmc" in secs:
            bench_centre(ExKMC, X, y, args.repeats, "50k_20leaves", n_leaves=20)
        if "cart" in secs:
            bench_cart(X, y, 1, "50k")
        del X, y
    if secs & {"knn", "emn", "nndescent", "knn50"}:
        X, y, _ = data(10_000, 512)
        if "knn" in secs:
            bench_knn(X, args.repeats, args.reference_dir, "10k")
        if "emn" in secs:
            bench_centre(EMN, X, y, args.repeats, "10k")
        if "nndescent" in secs:
            bench_nndescent(X)
        if "knn" in secs or "knn50" in secs:
            X, y, _ = data(50_000, 512)
            bench_knn(X, args.repeats, None, "50k", method="nndescent" if args.approx_50k else "exact")
    if "scaling" in secs:
        bench_scaling(1)
    save()
    print(f"end: {load()}; results in {args.out}")


if __name__ == "__main__":
    main()
