"""The encoders' CUDA + AMP path against the same work on the CPU (issue 27, item 3).

Three timings, each on the CPU (float32, all of the process's torch threads) and on CUDA
with automatic mixed precision (``amp=True``: float16 autocast + GradScaler), then checks
that the two devices agree:

* **VaDE training** (the paper's 784-500-500-2000-10 network, K = 10) on digit-like
  784-pixel images (sklearn digits upscaled 8x8 -> 28x28, tiled to ``--vade-rows`` rows with
  noise): seconds per ELBO epoch. Agreement: the CPU-trained weights evaluated on CUDA under
  autocast give the same posterior means (relative error) and the same cluster of each row;
  the two trainings (same initial weights and batch order; the reparameterisation noise
  differs by device) end at a -ELBO within 5 % of each other.
* **CNN embedding**: the project's image encoder backbone (torchvision ResNet-50 inside
  ``ContrastiveClusteringEncoder``, random weights: no ImageNet download offline, and the
  EfficientNet-Lite0 encoder of issue 24 is not on main yet) at 224x224: images/s of the
  whole ``embed_all`` path (uint8 images -> resize on the CPU -> network -> float32) and of
  the network alone on a batch already on the device. Agreement: cosine similarity of each
  image's CPU and CUDA-AMP embedding.
* **Contrastive-head training** (``mode="finetune_heads"``: frozen ResNet-34, instance and
  cluster heads trained): seconds per epoch. Agreement: the seeded initial network's loss on
  one fixed pair of views within 1 %, and the last epoch's mean loss within 5 % (same initial
  weights and augmentations, whose random stream is on the CPU; after the first Adam steps
  float16 rounding sends the two runs apart, so the first epoch's mean loss differed by 5.5 %
  on the H100 while the last epoch's agreed within 1 %).

    python benchmarks/gpu.py                         # both devices where CUDA exists, else the CPU half
    python benchmarks/gpu.py --devices cpu --quick   # the CPU half at small sizes, anywhere

Results: benchmarks/results/gpu.json (``--out``); parts run again replace their entries in an
existing file (``--parts heads`` keeps the VaDE and embedding results). The exit status is 1
when a check fails.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits

from pipeline.encoders import ContrastiveClusteringEncoder, VaDEEncoder
from pipeline.encoders.device import autocast

OUT = Path(__file__).parent / "results" / "gpu.json"
TOL = {"vade_mean_rel_err": 2e-2, "vade_same_cluster": 0.99, "vade_final_loss_rel": 0.05,
       "embed_min_cosine": 0.99, "heads_initial_loss_rel": 1e-2, "heads_last_loss_rel": 0.05}


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def digit_pixels(n: int, seed: int = 0) -> np.ndarray:
    """``n`` rows of 784 uint8 pixels: sklearn's digits upscaled to 28x28, tiled, with noise."""
    images = load_digits().images / 16.0
    images = np.pad(images.repeat(3, axis=1).repeat(3, axis=2), ((0, 0), (2, 2), (2, 2)))  # 24 -> 28
    rng = np.random.default_rng(seed)
    rows = images[rng.integers(0, len(images), n)].reshape(n, -1)
    return (np.clip(rows + rng.normal(0, 0.05, rows.shape), 0, 1) * 255).astype(np.uint8)


def digit_images(n: int, size: int) -> np.ndarray:
    """``n`` uint8 RGB images (n, size, size, 3) from sklearn's digits (nearest upscaling)."""
    images = (load_digits().images / 16 * 255).astype(np.uint8)
    images = images[np.arange(n) % len(images)].repeat(size // 8, axis=1).repeat(size // 8, axis=2)
    return np.repeat(images[..., None], 3, axis=-1)


def timed_fit(enc, X):
    """Fit, returning per-main-phase-epoch seconds (epoch callback) and the total."""
    stamps = []

    def on_epoch(_):
        sync(enc.device_.type)
        stamps.append(time.perf_counter())

    start = time.perf_counter()
    enc.fit(X, epoch_callback=on_epoch)
    total = time.perf_counter() - start
    return np.diff(stamps).tolist(), total, stamps


def bench_vade(device: str, X: np.ndarray, args) -> dict:
    enc = VaDEEncoder(n_clusters=10, pretrain_epochs=args.vade_pretrain_epochs, epochs=args.vade_epochs,
                      batch_size=args.vade_batch, lr=5e-4, device=device, amp=device == "cuda", progress=False,
                      random_state=0)
    epoch_s, total, _ = timed_fit(enc, X)
    return {"encoder": enc, "epoch_seconds": epoch_s, "epoch_seconds_median": statistics.median(epoch_s),
            "fit_seconds": total, "final_loss": enc.history_[-1]["loss"],
            "rows": len(X), "batch_size": args.vade_batch, "epochs": args.vade_epochs,
            "pretrain_epochs": args.vade_pretrain_epochs}


def vade_cross_check(cpu_enc, X) -> dict:
    """The CPU-trained network on CUDA under autocast: same means and clusters as on the CPU?"""
    data = cpu_enc._prepare(X, fitting=False)
    z_cpu = cpu_enc._embed(data)
    labels_cpu = cpu_enc._assign(data)
    net = cpu_enc.module_.to("cuda").eval()
    with torch.no_grad(), autocast(torch.device("cuda"), True):
        z_gpu = torch.cat([net.encode(xb.cuda())[0].float() for xb in data.split(4096)]).cpu().numpy()
        gamma = torch.cat([net.log_joint(torch.from_numpy(z).cuda()).argmax(1) for z in np.array_split(z_gpu, 8)])
    net.to("cpu")
    rel = float(np.linalg.norm(z_gpu - z_cpu) / np.linalg.norm(z_cpu))
    same = float(np.mean(gamma.cpu().numpy() == labels_cpu))
    return {"mean_rel_err": rel, "same_cluster_share": same}


def bench_embed(device: str, images: np.ndarray, args) -> dict:
    enc = ContrastiveClusteringEncoder(n_clusters=10, backbone=args.embed_backbone, backbone_weights="none",
                                       mode="scratch", epochs=0, image_size=args.embed_size,
                                       batch_size=args.embed_batch, device=device, amp=device == "cuda",
                                       progress=False, random_state=0)
    enc.fit(images[:args.embed_batch])  # builds the network (random weights, seeded); no training
    enc.embed_all(images[:args.embed_batch])  # warm-up (cuDNN autotuning, allocator)
    times, out = [], None
    for _ in range(args.repeats):
        sync(device)
        start = time.perf_counter()
        out = enc.embed_all(images)["backbone"]
        sync(device)
        times.append(time.perf_counter() - start)
    net = enc.module_.resnet.eval()
    x = torch.rand(args.embed_batch, 3, args.embed_size, args.embed_size, device=device)
    net_times = []
    with torch.no_grad(), autocast(enc.device_, device == "cuda"):
        net(x)
        for _ in range(args.repeats):
            sync(device)
            start = time.perf_counter()
            net(x)
            sync(device)
            net_times.append(time.perf_counter() - start)
    return {"embeddings": out, "images": len(images), "image_size": args.embed_size, "backbone": args.embed_backbone,
            "weights": "random (torchvision architecture)", "batch_size": args.embed_batch,
            "images_per_s": len(images) / statistics.median(times), "seconds": times,
            "network_only_images_per_s": args.embed_batch / statistics.median(net_times)}


def heads_initial_loss(device: str, images: np.ndarray, args) -> float:
    """The contrastive loss of the seeded initial network on one fixed pair of views (an
    image and its mirror image), float32 on the CPU or under autocast on CUDA."""
    from pipeline.encoders.augment import ImageViews, eval_transform
    from pipeline.encoders.contrastive import ContrastiveClusteringNet, cluster_loss, instance_loss

    torch.manual_seed(0)
    net = ContrastiveClusteringNet("resnet34", 10).to(device).eval()
    views = ImageViews(images[:args.heads_batch], eval_transform(args.heads_size), n_views=1)
    x = torch.stack([views[i][0] for i in range(len(views))]).to(device)
    with torch.no_grad(), autocast(torch.device(device), device == "cuda"):
        z, c = net.heads(net.resnet(torch.cat([x, x.flip(-1)])).float())
    z, c, n = z.float(), c.float(), len(x)
    return float(instance_loss(z[:n], z[n:]) + cluster_loss(c[:n], c[n:]))


def bench_heads(device: str, images: np.ndarray, args) -> dict:
    enc = ContrastiveClusteringEncoder(n_clusters=10, backbone="resnet34", backbone_weights="none",
                                       mode="finetune_heads", epochs=args.heads_epochs, image_size=args.heads_size,
                                       batch_size=args.heads_batch, lr=3e-3, device=device, amp=device == "cuda",
                                       progress=False, random_state=0)
    epoch_s, total, _ = timed_fit(enc, images)
    losses = [h["loss"] for h in enc.history_]
    return {"initial_loss_fixed_views": heads_initial_loss(device, images, args), "epoch_seconds": epoch_s, "seconds_per_epoch": total / args.heads_epochs if not epoch_s else
            statistics.median(epoch_s), "fit_seconds": total, "losses": losses, "images": len(images),
            "image_size": args.heads_size, "batch_size": args.heads_batch, "epochs": args.heads_epochs}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--devices", nargs="+", default=None, choices=["cpu", "cuda"],
                   help="default: cpu, and cuda where available")
    p.add_argument("--quick", action="store_true", help="small sizes (the CPU half on a laptop or CI machine)")
    p.add_argument("--parts", nargs="+", default=["vade", "embed", "heads"], choices=["vade", "embed", "heads"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    quick = args.quick
    args.vade_rows, args.vade_batch = (2000, 128) if quick else (20000, 256)
    args.vade_epochs, args.vade_pretrain_epochs = (3, 1) if quick else (4, 2)
    args.embed_images, args.embed_size, args.embed_batch = (32, 224, 16) if quick else (512, 224, 128)
    args.embed_backbone = "resnet18" if quick else "resnet50"
    args.heads_images, args.heads_size, args.heads_batch, args.heads_epochs = \
        (64, 32, 32, 2) if quick else (2048, 64, 256, 3)
    devices = args.devices or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    if "cuda" in devices and not torch.cuda.is_available():
        p.error("--devices cuda: CUDA is not available here")
    logging.basicConfig(level=logging.WARNING)
    torch.backends.cudnn.benchmark = True
    res: dict = {"machine": {"cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                             "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                             "gpu": torch.cuda.get_device_name(0) if "cuda" in devices else None,
                             "load_start": os.getloadavg()},
                 "quick": quick, "tolerances": TOL, "devices": devices}
    previous = json.loads(args.out.read_text()) if args.out.is_file() else {}
    checks: dict = {}
    if "vade" in args.parts:
        X = digit_pixels(args.vade_rows)
        runs = {d: bench_vade(d, X, args) for d in devices}
        res["vade"] = {d: {k: v for k, v in r.items() if k != "encoder"} for d, r in runs.items()}
        if len(runs) == 2:
            cross = vade_cross_check(runs["cpu"]["encoder"], X)
            loss_rel = abs(runs["cuda"]["final_loss"] - runs["cpu"]["final_loss"]) / abs(runs["cpu"]["final_loss"])
            res["vade"]["agreement"] = {**cross, "final_loss_rel_diff": loss_rel,
                                        "speedup_epoch": runs["cpu"]["epoch_seconds_median"]
                                        / runs["cuda"]["epoch_seconds_median"]}
            checks["vade_mean_rel_err"] = cross["mean_rel_err"] <= TOL["vade_mean_rel_err"]
            checks["vade_same_cluster"] = cross["same_cluster_share"] >= TOL["vade_same_cluster"]
            checks["vade_final_loss_rel"] = loss_rel <= TOL["vade_final_loss_rel"]
    if "embed" in args.parts:
        images = digit_images(args.embed_images, 32)
        runs = {d: bench_embed(d, images, args) for d in devices}
        res["embed"] = {d: {k: v for k, v in r.items() if k != "embeddings"} for d, r in runs.items()}
        if len(runs) == 2:
            a, b = runs["cpu"]["embeddings"], runs["cuda"]["embeddings"]
            cos = np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
            res["embed"]["agreement"] = {"min_cosine": float(cos.min()), "median_cosine": float(np.median(cos)),
                                         "speedup": runs["cuda"]["images_per_s"] / runs["cpu"]["images_per_s"],
                                         "speedup_network_only": runs["cuda"]["network_only_images_per_s"]
                                         / runs["cpu"]["network_only_images_per_s"]}
            checks["embed_min_cosine"] = float(cos.min()) >= TOL["embed_min_cosine"]
    if "heads" in args.parts:
        images = digit_images(args.heads_images, 32)
        runs = {d: bench_heads(d, images, args) for d in devices}
        res["heads"] = runs
        if len(runs) == 2:
            a, b = runs["cpu"], runs["cuda"]
            initial = abs(b["initial_loss_fixed_views"] - a["initial_loss_fixed_views"]) / abs(
                a["initial_loss_fixed_views"])
            last = abs(b["losses"][-1] - a["losses"][-1]) / abs(a["losses"][-1])
            res["heads"]["agreement"] = {"initial_loss_rel_diff": initial, "last_epoch_loss_rel_diff": last,
                                         "speedup_epoch": a["seconds_per_epoch"] / b["seconds_per_epoch"]}
            checks["heads_initial_loss_rel"] = initial <= TOL["heads_initial_loss_rel"]
            checks["heads_last_loss_rel"] = last <= TOL["heads_last_loss_rel"]
    for part in ("vade", "embed", "heads"):  # parts not run this time keep their last results
        if part not in args.parts and part in previous and previous.get("quick") == quick:
            res[part] = previous[part]
            res.setdefault("machine_of", {})[part] = previous.get("machine_of", {}).get(part, previous["machine"])
            checks.update({k: v for k, v in previous.get("checks", {}).items() if k.startswith(part)})
    for part in args.parts:
        res.setdefault("machine_of", {})[part] = res["machine"]
    res["checks"] = checks
    res["agree"] = all(checks.values())
    res["machine"]["load_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1, default=float))
    print(json.dumps(res, indent=1, default=float))
    return 0 if res["agree"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
