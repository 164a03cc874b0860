"""Stage ``cluster``: latents -> the reference clustering (labels, centres, mixture, graph)."""

from __future__ import annotations

import numpy as np
from scipy import sparse

from pipeline.clustering import Clustering, check_enough_clusters, cluster
from pipeline.app.stages.base import Stage
from pipeline.validation import InvalidInputError


def resolve_n_clusters(cfg: dict, y) -> int:
    """``clustering.n_clusters``, or the number of ground-truth classes when it is null."""
    k = cfg["clustering"].get("n_clusters")
    if k is not None:
        return int(k)
    if y is None:
        raise InvalidInputError("the dataset has no labels, so clustering.n_clusters cannot default to the number "
                                "of classes; set clustering.n_clusters=<K>.")
    return int(np.unique(y[y >= 0]).size)


def clustering_to_artifact(c: Clustering) -> dict:
    out = {"labels": c.labels, "method": c.method, "uses_labels": c.uses_labels, "scores": c.scores}
    for name in ("centers", "weights", "means", "covariances"):
        if getattr(c, name) is not None:
            out[name] = np.asarray(getattr(c, name), dtype=np.float64)
    if c.graph is not None:
        g = sparse.coo_matrix(c.graph)
        out["graph_row"], out["graph_col"], out["graph_data"] = g.row.astype(np.int64), g.col.astype(np.int64), g.data
    return out


def graph_from_artifact(a: dict):
    if "graph_row" not in a:
        return None
    n = len(a["labels"])
    return sparse.csr_matrix((a["graph_data"], (a["graph_row"], a["graph_col"])), shape=(n, n))


def _from_encoder_head(encode: dict) -> Clustering:
    if "head_labels" not in encode:
        raise InvalidInputError("clustering=encoder needs an encoder with its own cluster head (e.g. encoder=vade); "
                                "the configured encoder has none. Choose clustering=gmm or another encoder.")
    c = Clustering(encode["head_labels"], "encoder")
    if "mixture_means" in encode:
        c.weights, c.means, c.covariances = (encode["mixture_weights"], encode["mixture_means"],
                                             encode["mixture_covariances"])
        c.centers = c.means
    check_enough_clusters(c)
    return c


def _config(cfg: dict) -> dict:
    return {"clustering": cfg["clustering"], "seed": cfg["seed"]}


def _compute(cfg: dict, load: dict, encode: dict) -> dict:
    spec = cfg["clustering"]
    if spec["name"] == "encoder":
        return clustering_to_artifact(_from_encoder_head(encode))
    y = load.get("y")
    c = cluster(encode["Z"], spec["name"], resolve_n_clusters(cfg, y), spec.get("params"), cfg["seed"],
                y_true=y, candidates=spec.get("candidates") or ())
    return clustering_to_artifact(c)


CLUSTER = Stage("cluster", ("load", "encode"), _config, _compute)
