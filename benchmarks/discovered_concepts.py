"""Discovered concepts beside the hand-made concept set (issue 25).

    .venv/bin/python benchmarks/discovered_concepts.py [--datasets mnist digits] [--n-concepts 10]

For each dataset's default deep run (VaDE -> VaDE's clusters -> Concept-MMDT + Concept-CART;
the VaDE checkpoint is trained on first use, then loaded from ``paths.models_dir``), runs the
pipeline twice: with the hand-made ``mnist_geometric`` concepts (CAVs; rules in P(concept)) and
with ``concepts=discovered`` (FastICA on the signed VaDE latents; rules in percentiles), and
records the discovered concepts' names, associations and AUCs, the trees' rules and the ARI of
Concept-MMDT / Concept-CART vs the ground truth for both concept sets. Saves
benchmarks/results/discovered_concepts.json (with the load average).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run

RESULTS = Path(__file__).parent / "results"


def one_run(dataset: str, concepts: list[str], out: Path) -> dict:
    start = time.perf_counter()
    df = run(compose_config([f"dataset={dataset}", f"paths.output_dir={out}", "report.figures=false", *concepts]))
    seconds = time.perf_counter() - start
    rows = df.set_index("explainer")
    meta = json.loads((out / "concepts" / "run.json").read_text())
    rules = {row: json.loads((out / "trees" / f"{row}.json").read_text())["rules"] for row in ("concept_mmdt",
                                                                                             "concept_cart")}
    return {"overrides": concepts, "seconds": round(seconds, 1),
            "ari": {row: round(float(rows.loc[row, "ari"]), 4) for row in ("reference", "concept_mmdt", "concept_cart")},
            "concept_names": meta["concept_names"], "units": meta.get("units"), "discovery": meta.get("discovery"),
            "cav_summary": [{k: c[k] for k in ("concept", "score", "boundary") if k in c}
                            for c in meta.get("cav_summary") or []],
            "rules": {row: [r["text"] for r in rs] for row, rs in rules.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["mnist", "digits"])
    ap.add_argument("--n-concepts", type=int, default=10)
    args = ap.parse_args()
    out = {"load_average": os.getloadavg(), "n_concepts": args.n_concepts, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for ds in args.datasets:
            out["runs"][ds] = {
                "hand_made": one_run(ds, ["concepts=mnist_geometric"], Path(tmp) / ds / "hand"),
                "discovered": one_run(ds, ["concepts=discovered", f"concepts.params.n_concepts={args.n_concepts}"],
                                      Path(tmp) / ds / "discovered")}
            d, h = out["runs"][ds]["discovered"], out["runs"][ds]["hand_made"]
            print(f"{ds}: ARI Concept-MMDT {h['ari']['concept_mmdt']} (mnist_geometric) vs {d['ari']['concept_mmdt']} "
                  f"(discovered); Concept-CART {h['ari']['concept_cart']} vs {d['ari']['concept_cart']}")
            print("  discovered:", ", ".join(f"{r['concept']} (AUC {r['AUC']:.2f})" for r in d["discovery"]))
    out["load_average_end"] = os.getloadavg()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "discovered_concepts.json").write_text(json.dumps(out, indent=1, ensure_ascii=False, default=float))


if __name__ == "__main__":
    main()
