"""The shape of Figure 7 of Plumb et al. (ICML 2020) on offline data: TGT vs DBM versus sparsity k.

For Iris, Wine and Breast Cancer (bundled with scikit-learn; features standardised) the
script trains a small MLP autoencoder with a 2-D bottleneck (a few seconds each), takes the
groups as k-means clusters of the 2-D embedding, chooses eps as in the paper, and for each
sparsity level k reports the correctness and coverage (mean over ordered pairs of groups)
of TGT (l1 tuned per k over a grid, Sec. 3.3) and DBM, plus the similarity curve (Eq. 10).
TGT is refitted for several seeds; the table shows the median over seeds.

    .venv/bin/python benchmarks/tgt_figure7.py [--seeds 0 1 2] [--n-iter 5000] [--learning-rate 0.05]

Prints the table and saves benchmarks/results/tgt_figure7.{csv,png}.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
from sklearn.cluster import KMeans  # noqa: E402
from sklearn.datasets import load_breast_cancer, load_iris, load_wine  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from pipeline.counterfactuals import choose_epsilon, default_l1_grid, sparsity_sweep  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DATASETS = {
    # name: (loader, number of groups, sparsity levels)
    "iris": (load_iris, 3, [1, 2, 3, 4]),
    "wine": (load_wine, 3, [1, 2, 3, 4, 5, 7, 10, 13]),
    "breast_cancer": (load_breast_cancer, 3, [1, 2, 3, 4, 5, 7, 10, 15, 20, 30]),
}


def train_autoencoder(X: np.ndarray, seed: int, epochs: int = 600) -> torch.nn.Module:
    """A d -> 32 -> 2 ELU autoencoder trained full-batch with Adam; returns the encoder."""
    torch.manual_seed(seed)
    d = X.shape[1]
    encoder = torch.nn.Sequential(torch.nn.Linear(d, 32), torch.nn.ELU(), torch.nn.Linear(32, 2))
    decoder = torch.nn.Sequential(torch.nn.Linear(2, 32), torch.nn.ELU(), torch.nn.Linear(32, d))
    opt = torch.optim.Adam([*encoder.parameters(), *decoder.parameters()], lr=1e-2)
    Xt = torch.as_tensor(X, dtype=torch.float32)
    for _ in range(epochs):
        opt.zero_grad()
        loss = ((decoder(encoder(Xt)) - Xt) ** 2).mean()
        loss.backward()
        opt.step()
    logging.info("autoencoder reconstruction MSE %.3f", float(loss.detach()))
    return encoder.eval()


def run_dataset(name: str, seeds: list[int], n_iter: int, learning_rate: float) -> pd.DataFrame:
    loader, n_groups, ks = DATASETS[name]
    X = StandardScaler().fit_transform(loader().data)
    encoder = train_autoencoder(X, seed=0)
    with torch.no_grad():
        Z = encoder(torch.as_tensor(X, dtype=torch.float32)).numpy()
    groups = KMeans(n_groups, n_init=10, random_state=0).fit_predict(Z)
    eps = choose_epsilon(encoder, X, groups)
    grid = default_l1_grid(encoder, X, groups)
    frames = []
    for seed in seeds:
        start = time.perf_counter()
        df = sparsity_sweep(encoder, X, groups, ks, eps=eps, l1_grid=grid, learning_rate=learning_rate,
                            n_iter=n_iter, random_state=seed)
        df["seed"], df["seconds"] = seed, time.perf_counter() - start
        frames.append(df)
    out = pd.concat(frames)
    out["dataset"], out["eps"], out["n"], out["d"] = name, eps, len(X), X.shape[1]
    return out


def plot(table: pd.DataFrame) -> plt.Figure:
    names = list(dict.fromkeys(table.dataset))
    fig, axes = plt.subplots(len(names), 3, figsize=(12, 3.2 * len(names)), squeeze=False)
    for row, name in zip(axes, names):
        sub = table[table.dataset == name]
        for ax, metric in zip(row, ["correctness", "coverage", "similarity"]):
            for method, style in [("TGT", "o-"), ("DBM", "s--")]:
                m = sub[sub.method == method].groupby("k")[metric]
                med = m.median()
                ax.plot(med.index, med.values, style, label=method)
                if m.size().max() > 1:
                    ax.fill_between(med.index, m.min().values, m.max().values, alpha=0.2)
            ax.set_title(f"{name}: {metric}")
            ax.set_xlabel("k (number of features kept)")
            ax.set_ylim(-0.02, 1.02)
        row[0].legend()
    fig.tight_layout()
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--n-iter", type=int, default=5000)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    table = pd.concat([run_dataset(name, args.seeds, args.n_iter, args.learning_rate) for name in args.datasets])
    RESULTS.mkdir(exist_ok=True)
    table.to_csv(RESULTS / "tgt_figure7.csv", index=False)
    plot(table).savefig(RESULTS / "tgt_figure7.png", dpi=120)
    summary = (table.groupby(["dataset", "k", "method"])[["correctness", "coverage", "similarity", "l1"]]
               .median().unstack("method"))
    pd.set_option("display.width", 200)
    print(summary.round(3).to_string())
    for name, sub in table.groupby("dataset"):
        secs = sub.groupby("seed").seconds.first()
        print(f"{name}: n={sub.n.iloc[0]}, d={sub.d.iloc[0]}, eps={sub.eps.iloc[0]:.4g}, "
              f"sweep time median {secs.median():.1f}s over {len(secs)} seed(s)")


if __name__ == "__main__":
    main()
