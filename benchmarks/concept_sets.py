"""Issues 47 and 48, the Check: concepts defined by the classes against concepts measured on the inputs,
on real data, each beside random and principal directions of the same count.

For every run below (real data, offline), once with the class-defined (or phrase-defined) concept set
and once with the measured one, it records:

* the trees' agreement with the reference clustering (ARI, same number of leaves: K), and the same for
  a CART tree of K leaves on M random latent directions (median and range of 20 draws) and on the top-M
  principal directions (the completeness stage's tree baseline);
* the completeness table: Yeh et al.'s figure (affine and network rebuild), the linear-probe ratio,
  each for the concepts, random and principal directions;
* per concept: its transfer check (a measured concept's Spearman ρ on held-out rows), TCAV's test,
  whether the trees use it; the marks († ‡) its name carries;
* the time the measurements take per 1,000 items (the measurement functions alone, warm, median of 3);
* the first three rules of Concept-CART read as sentences, with their measured checks;
* the TCAV table (concept × cluster) of the default run and of one Fashion-MNIST run.

    python benchmarks/concept_sets.py                       # every run (~25 min on 2 cores)
    python benchmarks/concept_sets.py --runs mnist emails   # some

Writes benchmarks/results/concept_sets.json and .md (the runs' files under a temporary folder;
the stage cache and checkpoints are the repository's, so VaDE is trained once).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

FASHION = ["dataset=fashion_mnist", "dataset.n_samples=3000", "encoder=efficientnet_lite0", "clustering=gmm",
           "explainer=[concept_mmdt,concept_cart]"]
RUNS = {
    "mnist": {"base": [], "sets": {"class-defined (mnist_geometric)": ["concepts=mnist_geometric"],
                                   "measured (mnist_measured)": ["concepts=mnist_measured"]},
              "measure": "pipeline.concepts.measures.digits.digit_measurements"},
    "fashion679": {"base": [*FASHION, "dataset.classes=[6,7,9]"],
                   "sets": {"class attributes (fashion_attributes)": ["concepts=fashion_attributes"],
                            "measured (fashion_measured)": ["concepts=fashion_measured"]},
                   "measure": "pipeline.concepts.measures.silhouettes.silhouette_measurements"},
    "fashion13468": {"base": [*FASHION, "dataset.classes=[1,3,4,6,8]"],
                     "sets": {"class attributes (fashion_attributes)": ["concepts=fashion_attributes"],
                              "measured (fashion_measured)": ["concepts=fashion_measured"]},
                     "measure": "pipeline.concepts.measures.silhouettes.silhouette_measurements"},
    "emails": {"base": ["dataset=spam_assassin", "dataset.n_samples=600", "encoder=sbert", "clustering=gmm",
                        "explainer=[concept_mmdt,concept_cart]"],
               "sets": {"topic phrases (email_topics)": ["concepts=email_topics"],
                        "measured (text_measured)": ["concepts=text_measured"]},
               "measure": "pipeline.app.concept_sets.measured_text.text_measurements"},
}
TCAV_TABLES = {("mnist", "measured (mnist_measured)"), ("fashion679", "measured (fashion_measured)")}


def sentence(rule: dict, check: str) -> str:
    """A rule as a sentence a researcher reads aloud."""
    conds = " and ".join(c["text"] for c in rule["conditions"]) or "always"
    text = rule["text"]
    who = text.split("→", 1)[1].strip() if "→" in text else ""
    return f"If {conds}, the item falls in {who}." + (f" ({check})" if check else "")


def one_run(name: str, label: str, overrides: list[str], work: Path) -> dict:
    from pipeline.app.configuration.config import compose_config
    from pipeline.app.running.runner import run_single, to_plain
    from pipeline.app.stores.cache import StageCache

    out = work / f"{name}-{label.split()[0]}"
    cfg = to_plain(compose_config([f"paths.output_dir={out}", "report.figures=false", *overrides]))
    t = time.perf_counter()
    df = run_single(cfg, StageCache(Path(cfg["paths"]["cache_dir"]), True), out, summary=False)
    seconds = time.perf_counter() - t
    res = {"overrides": overrides, "seconds": round(seconds, 1)}
    rows = df.set_index("explainer")
    res["reference_ari"] = float(rows.loc["reference", "ari"]) if "ari" in rows.columns else None
    for row in ("concept_mmdt", "concept_cart"):
        if row in rows.index:
            res[row] = {k: (None if rows.loc[row, k] != rows.loc[row, k] else float(rows.loc[row, k]))
                        for k in ("ref_ari", "ari", "n_leaves") if k in rows.columns}
    comp = json.loads((out / "concepts" / "completeness.json").read_text())
    res["completeness"] = comp.get("completeness")
    res["tree_baseline"] = comp.get("tree_baseline")
    import pandas as pd

    cavs = pd.read_csv(out / "concepts" / "cavs.csv", comment="#")
    keep = [c for c in ("concept", "in_trees", "transfer_check", "transfer_value", "tracks_fit", "tcav_p_min",
                        "tcav_significant", "score") if c in cavs.columns]
    res["concepts"] = cavs[keep].to_dict(orient="records")
    trees = json.loads((out / "trees" / "concept_cart.json").read_text()) if (out / "trees" /
                                                                             "concept_cart.json").exists() else None
    if trees is not None:
        res["rules"] = [sentence(r, "; ".join(f"{m['concept']}: {100 * m['share']:.0f}% agree by the measurement"
                                            for m in r.get("measured", []) if m["share"] == m["share"]))
                        for r in trees["rules"][:3]]
    tables = out / "concepts" / "run.json"
    if (name, label) in TCAV_TABLES and tables.exists():
        meta = json.loads(tables.read_text())
        res["tcav"] = meta.get("tcav")
    return res


def measurement_time(name: str, spec: dict) -> dict | None:
    """Seconds per 1,000 items of the run's measurement function (warm, median of 3), and the load."""
    from pipeline.app.configuration.config import compose_config
    from pipeline.app.data.loading import load_dataset
    from pipeline.app.running.runner import to_plain
    from hydra.utils import get_object

    cfg = to_plain(compose_config(["paths.output_dir=/tmp/x", *spec["base"]]))
    data = load_dataset(cfg["dataset"], cfg["paths"], cfg["seed"])
    inputs = data.images if data.images is not None else (list(data.X) if data.kind == "text" else data.X)
    fn = get_object(spec["measure"])
    n = min(len(inputs), 1000)
    part = inputs[:n]
    fn(part)  # warm
    times = []
    for _ in range(3):
        t = time.perf_counter()
        fn(part)
        times.append(time.perf_counter() - t)
    return {"seconds_per_1000": round(float(np.median(times)) * 1000 / n, 3), "items": n,
            "load": os.getloadavg()[0]}


def markdown(results: dict) -> str:
    lines = ["# Class-defined and measured concepts, beside random and principal directions", "",
             f"`python benchmarks/concept_sets.py` — {results['machine']}", ""]
    for name, run in results["runs"].items():
        lines += [f"## {name}", ""]
        if run.get("measurement"):
            m = run["measurement"]
            lines.append(f"Measurements: {m['seconds_per_1000']} s per 1,000 items (median of 3, load {m['load']:.1f}).")
            lines.append("")
        lines += ["| concept set | ref ARI | Concept-CART ARI vs ref | Concept-MMDT ARI vs ref | CART on M random dirs "
                  "(median [range]) | CART on top-M PCs | completeness (affine) | random | PCs | network | probe ratio |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for label, r in run["sets"].items():
            if "error" in r:
                lines.append(f"| {label} | error: {r['error']} |")
                continue
            b, c = r.get("tree_baseline") or {}, r.get("completeness") or {}
            rb = b.get("random", {})
            aff, net, pr = c.get("affine", {}), c.get("network", {}), c.get("probe", {})

            def f(v):
                return "–" if v is None or v != v else f"{v:.2f}"

            lines.append(
                f"| {label} (M={c.get('n_concepts')}) | {f(r.get('reference_ari'))} | "
                f"{f((r.get('concept_cart') or {}).get('ref_ari'))} | {f((r.get('concept_mmdt') or {}).get('ref_ari'))} | "
                f"{f(rb.get('median'))} [{f(rb.get('low'))}–{f(rb.get('high'))}] | {f(b.get('principal'))} | "
                f"{f(aff.get('concepts'))} | {f((aff.get('random') or {}).get('median'))} | {f(aff.get('principal'))} | "
                f"{f(net.get('concepts'))} | {f(pr.get('concepts'))} |")
        for label, r in run["sets"].items():
            if "error" in r:
                continue
            lines += ["", f"**{label}** — per concept (transfer: ρ on held-out rows for measured concepts; TCAV p: the "
                          "smallest adjusted p over clusters):", ""]
            def transfer(c):
                v = c.get("transfer_value", float("nan"))
                return "no transfer check" if c.get("transfer_check") in (None, "none") or v != v else \
                    f"{c['transfer_check']} {v:.2f}"

            def tcav(c):
                p = c.get("tcav_p_min", float("nan"))
                return f"TCAV {c.get('tcav_significant')}" + (f" (p {p:.2g})" if p == p else "")

            lines += [f"- {c['concept']}: in trees {'yes' if c.get('in_trees') else 'no'}, {transfer(c)}, {tcav(c)}"
                      for c in r.get("concepts", [])]
            if r.get("rules"):
                lines += ["", "Concept-CART's first three rules, as sentences:", ""] + [f"1. {s}" for s in r["rules"]]
            if r.get("tcav"):
                lines += ["", "TCAV scores through the clustering (rows: concepts; columns: clusters):", "",
                          "```", *r["tcav"], "```"]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", nargs="*", default=list(RUNS))
    args = ap.parse_args()
    os.chdir(ROOT)
    results = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                          f"load {os.getloadavg()[0]:.1f} at start", "runs": {}}
    path = RESULTS / "concept_sets.json"
    if path.exists():
        results["runs"] = json.loads(path.read_text()).get("runs", {})
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.runs:
            spec = RUNS[name]
            run = {"sets": {}}
            for label, extra in spec["sets"].items():
                print(f"== {name}: {label}", flush=True)
                try:
                    run["sets"][label] = one_run(name, label, [*spec["base"], *extra], Path(tmp))
                except Exception as exc:  # a missing dataset here: recorded, the others go on
                    run["sets"][label] = {"error": f"{type(exc).__name__}: {exc}"}
            try:
                run["measurement"] = measurement_time(name, spec)
            except Exception as exc:
                run["measurement"] = None
                print(f"measurement timing failed: {exc}")
            results["runs"][name] = run
            path.write_text(json.dumps(results, indent=1, default=float))
            (RESULTS / "concept_sets.md").write_text(markdown(results))
    print((RESULTS / "concept_sets.md").read_text())


if __name__ == "__main__":
    main()
