"""Quality and speed figures of the deep encoders (issue 5), on this machine's CPU.

    .venv/bin/python benchmarks/encoders.py [--parts vade contrastive sbert] [--seeds 3]

* VaDE (paper architecture 64-500-500-2000-10, K = 10) on sklearn digits (1797 images):
  ARI of its own posterior clusters vs the digit labels for each seed, training time, and
  the ARI of the seed chosen without labels (lowest final -ELBO). k-means on the raw pixels
  is computed in the same run as a reference.
* Contrastive clustering (ResNet34, random init: no ImageNet weights offline) on 256 digits
  upscaled to 32x32 RGB, batch 32: the loss per epoch of two short CPU runs — from scratch
  (lr 1e-3, 12 epochs) and heads-only on the frozen backbone (lr 3e-3, 10 epochs) — and the
  embedding throughput (images/s) of the backbone pass at 32x32 and 224x224 (median of 3).
* SBERT with the offline package: k-means (K = 4) on the embeddings of the labelled topic
  texts written by tests/test_encoders_sbert.py; ARI vs the topics.

Threads are pinned to 1 (the machine is shared). Results: benchmarks/results/encoders.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits
from sklearn.metrics import adjusted_rand_score

from pipeline.app.models.weights import SBERTEncoder
from pipeline.encoders import ContrastiveClusteringEncoder, VaDEEncoder

RESULTS = Path(__file__).parent / "results"
log = logging.getLogger("benchmarks.encoders")


def bench_vade(seeds: int, epochs: int, pretrain_epochs: int) -> dict:
    X, y = load_digits(return_X_y=True)
    kmeans_ari = adjusted_rand_score(y, KMeans(10, n_init=10, random_state=0).fit_predict(X))
    runs = []
    for seed in range(seeds):
        start = time.perf_counter()
        enc = VaDEEncoder(n_clusters=10, pretrain_epochs=pretrain_epochs, epochs=epochs, lr=5e-4, batch_size=128,
                          random_state=seed, device="cpu", progress=False).fit(X, y)
        seconds = time.perf_counter() - start
        ari = adjusted_rand_score(y, enc.predict_clusters(X))
        runs.append({"seed": seed, "ari": ari, "loss": enc.metrics_["loss"], "seconds": seconds,
                     "collapsed": enc.metrics_["collapsed"]})
        log.info("VaDE seed %d: ARI %.3f, -ELBO %.2f, %.1f s", seed, ari, enc.metrics_["loss"], seconds)
    aris = [r["ari"] for r in runs]
    chosen = min(runs, key=lambda r: r["loss"])
    return {"runs": runs, "ari_median": float(np.median(aris)), "ari_min": min(aris), "ari_max": max(aris),
            "ari_label_free_choice": chosen["ari"], "seconds_median": float(np.median([r["seconds"] for r in runs])),
            "kmeans_raw_pixels_ari": kmeans_ari,
            "config": {"hidden_dims": [500, 500, 2000], "latent_dim": 10, "pretrain_epochs": pretrain_epochs,
                       "epochs": epochs, "lr": 5e-4, "batch_size": 128}}


def digits_rgb(n: int, size: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """sklearn digits as uint8 RGB images (n, size, size, 3) (nearest-neighbour upscaling)."""
    digits = load_digits()
    imgs = (digits.images[:n] / 16 * 255).astype(np.uint8)
    reps = size // 8
    imgs = imgs.repeat(reps, axis=1).repeat(reps, axis=2)
    return np.repeat(imgs[..., None], 3, axis=-1), digits.target[:n]


def bench_contrastive(epochs: int, n_images: int, batch_size: int) -> dict:
    """Two short runs (scratch, lr 3e-4; heads on the frozen backbone, lr 3e-3) + throughput."""
    X, y = digits_rgb(n_images)
    out = {"n_images": len(X), "batch_size": batch_size, "backbone": "resnet34, random init (no ImageNet offline)"}
    for mode, lr, n_epochs in (("scratch", 1e-3, epochs), ("finetune_heads", 3e-3, 10)):
        enc = ContrastiveClusteringEncoder(n_clusters=10, backbone_weights="none", mode=mode, image_size=32,
                                           batch_size=batch_size, epochs=n_epochs, lr=lr, device="cpu", amp=False,
                                           progress=False)
        start = time.perf_counter()
        enc.fit(X)
        losses = [h["loss"] for h in enc.history_]
        out[mode] = {"lr": lr, "epochs": n_epochs, "losses": losses, "train_seconds": time.perf_counter() - start,
                     "chance_level": float(np.log(2 * batch_size - 1) + np.log(2 * 10 - 1)),
                     "first_minus_last": losses[0] - losses[-1],
                     "head_ari": adjusted_rand_score(y, enc.predict_clusters(X)),
                     "occupancy_last_epoch": enc.history_[-1]["occupancy"]}
        log.info("contrastive %s: losses %s", mode, np.round(losses, 3).tolist())
    throughput = {}
    for size, n in ((32, len(X)), (224, 64)):
        enc.set_params(image_size=size)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            enc.transform(X[:n])
            times.append(time.perf_counter() - start)
        throughput[f"{size}px_images_per_s"] = n / float(np.median(times))
    out["throughput_backbone_pass"] = throughput
    return out


def bench_sbert() -> dict:
    sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
    from test_encoders_sbert import topic_texts

    texts, y = topic_texts(n_per_topic=25, seed=1)
    enc = SBERTEncoder(offline=True, device="cpu", progress=False)
    start = time.perf_counter()
    Z = enc.fit().transform(texts)
    seconds = time.perf_counter() - start
    aris = [adjusted_rand_score(y, KMeans(4, n_init=10, random_state=s).fit_predict(Z)) for s in range(3)]
    return {"model": enc.model_used_, "n_texts": len(texts), "dim": Z.shape[1], "kmeans_ari_median": float(np.median(aris)),
            "seconds_load_and_embed": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", nargs="+", default=["vade", "contrastive", "sbert"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--vade-epochs", type=int, default=20)
    parser.add_argument("--vade-pretrain-epochs", type=int, default=20)
    parser.add_argument("--contrastive-epochs", type=int, default=12)
    parser.add_argument("--contrastive-images", type=int, default=256)
    parser.add_argument("--contrastive-batch", type=int, default=32)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for name in ("pipeline.encoders.training",):
        logging.getLogger(name).setLevel(logging.WARNING)
    torch.set_num_threads(1)
    out_path = RESULTS / "encoders.json"
    results = json.loads(out_path.read_text()) if out_path.is_file() else {}
    if "vade" in args.parts:
        results["vade_digits"] = bench_vade(args.seeds, args.vade_epochs, args.vade_pretrain_epochs)
    if "contrastive" in args.parts:
        results["contrastive_digits32"] = bench_contrastive(args.contrastive_epochs, args.contrastive_images,
                                                            args.contrastive_batch)
    if "sbert" in args.parts:
        results["sbert_topics"] = bench_sbert()
    results["torch_threads"] = torch.get_num_threads()
    RESULTS.mkdir(exist_ok=True)
    out_path.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
