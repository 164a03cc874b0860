"""Does another seed explain another partition? The reference GMM of a documented run over seeds
and restart counts, beside what its stability sentence says (issue 50, item 3).

    .venv/bin/python benchmarks/restart_seeds.py [--seeds 11] [--n-init 3 10] [--out restart_seeds] [RUN ...]

RUN is a name of :data:`RUNS` (default: all): the README's default MNIST run, the wine table of
docs/own-data.md, examples/small_text and the 600 SpamAssassin e-mails (docs/datasets.md). Each run
is composed as documented, its stages up to ``cluster`` are read from (or written to) the stage
cache, and the GMM of the cluster stage (same latents, same parameters) is fitted again for seeds
0..S-1 with each ``n_init``. Per run and ``n_init``: the ARI of every seed's kept partition with
seed 0's, and for seed 0 the number of restarts that found each kept cluster
(:func:`pipeline.clustering.cluster_recovery`, Jaccard >= :data:`pipeline.clustering.FOUND_AGAIN`)
and whether the run's summary warns. Printed and saved to benchmarks/results/<out>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from sklearn.metrics import adjusted_rand_score

import pipeline.clustering as clustering
from pipeline.app.configuration.config import compose_config
from pipeline.app.report.summary import stability_text
from pipeline.app.stores.cache import StageCache
from pipeline.app.running.runner import run_stages, to_plain

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
RUNS = {
    "default_mnist": [],
    "wine_table": ["dataset=files", f"dataset.path={Path(tempfile.gettempdir()) / 'wine.csv'}", "dataset.labels=cultivar",
                   "explainer=[mmdt,cart]"],
    "small_text": ["dataset=files", f"dataset.path={ROOT / 'examples/small_text/texts.csv'}",
                   "dataset.text_column=text", "dataset.labels=topic", "encoder=sbert", "concepts=examples",
                   f"concepts.path={ROOT / 'examples/small_text/concepts'}", "explainer=[concept_mmdt,concept_cart]"],
    "emails": ["dataset=spam_assassin", "dataset.n_samples=600", "encoder=sbert", "offline=true", "clustering=gmm",
               "concepts=email_topics", "explainer=[concept_mmdt,concept_cart]"],
}


def wine_csv() -> None:
    """The wine table of docs/own-data.md (scikit-learn's copy of UCI wine, ``cultivar`` as labels)."""
    path = Path(tempfile.gettempdir()) / "wine.csv"
    if not path.exists():
        from sklearn.datasets import load_wine

        load_wine(as_frame=True).frame.rename(columns={"target": "cultivar"}).to_csv(path, index=False)


def gmm_inputs(overrides: list[str]) -> tuple[np.ndarray, int, dict]:
    """The latents, K and GMM parameters the run's cluster stage uses (its own call, recorded)."""
    seen = {}
    real = clustering._BASE["gmm"]

    def spy(X, k, params, seed):
        seen.update(X=X, k=k, params=dict(params))
        return real(X, k, params, seed)

    clustering._BASE["gmm"] = spy
    try:
        with tempfile.TemporaryDirectory() as out:
            plain = to_plain(compose_config([*overrides, f"paths.output_dir={out}"]))
            run_stages(plain, StageCache(plain["paths"]["cache_dir"], force=["cluster"]))
    finally:
        clustering._BASE["gmm"] = real
    return seen["X"], seen["k"], seen["params"]


def one_run(name: str, seeds: int, n_inits: list[int]) -> dict:
    X, k, params = gmm_inputs(RUNS[name])
    out = {"n": int(len(X)), "d": int(X.shape[1]), "k": int(k), "params": params, "by_n_init": {}}
    for n_init in n_inits:
        cpu = time.process_time()
        fits = [clustering._gmm(X, k, {**params, "n_init": n_init}, s) for s in range(seeds)]
        s0 = fits[0].scores["stability"]
        text, warn = stability_text(s0)
        found = [1 + sum(v >= clustering.FOUND_AGAIN for v in row) for row in s0["cluster_jaccard"]]
        out["by_n_init"][n_init] = {
            "ari_with_seed0": [round(float(adjusted_rand_score(fits[0].labels, f.labels)), 3) for f in fits[1:]],
            "seed0_stability": round(float(s0["kept_ari"]), 3), "seed0_found_by": found, "seed0_warns": warn,
            "seed0_sentence": text, "cpu_seconds": round(time.process_time() - cpu, 1)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="*", default=list(RUNS))
    ap.add_argument("--seeds", type=int, default=11)
    ap.add_argument("--n-init", type=int, nargs="+", default=[3, 10])
    ap.add_argument("--out", default="restart_seeds")
    args = ap.parse_args()
    wine_csv()
    result = {"command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]), "load": os.getloadavg()[0],
              "runs": {}}
    for name in args.runs:
        result["runs"][name] = r = one_run(name, args.seeds, args.n_init)
        for n_init, row in r["by_n_init"].items():
            same = sum(a > 0.99 for a in row["ari_with_seed0"])
            print(f"{name} (n={r['n']}, d={r['d']}, K={r['k']}) n_init={n_init}: seeds 1-{args.seeds - 1} kept "
                  f"seed 0's partition {same} times; ARI with it {row['ari_with_seed0']}; seed 0: stability "
                  f"{row['seed0_stability']}, found by {row['seed0_found_by']}, warns {row['seed0_warns']}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
