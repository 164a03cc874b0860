"""Reference clusterings the trees explain: GMM, k-means, spectral, DBSCAN and "best of".

Pure functions on arrays (scikit-learn estimators underneath): :func:`cluster` by method name,
and one function per method (:func:`fit_gmm`, :func:`fit_kmeans`, :func:`fit_spectral`,
:func:`fit_dbscan`, :func:`best_of`) that the pipeline's ``clustering`` configs name in their
``_target_``. The encoder's own cluster head is handled by the cluster stage, which has the
encoder's outputs. A fitted clustering's rule for new rows is :func:`pipeline.cluster_heads.predictor_of`
(built on :func:`mixture_predict` and :func:`nearest_centers` here); :func:`stratified_sample` draws
rows that keep every cluster's share.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
from sklearn.cluster import DBSCAN, KMeans, MiniBatchKMeans, SpectralClustering
from sklearn.metrics import adjusted_rand_score
from sklearn.metrics.cluster import contingency_matrix
from sklearn.mixture import GaussianMixture
from sklearn.neighbors import NearestNeighbors, kneighbors_graph
from sklearn.preprocessing import StandardScaler

from pipeline.threads import limit_threads
from pipeline.trees.mixture import gmm_covariances
from pipeline.validation import InvalidInputError, check_matrix

log = logging.getLogger(__name__)

METHODS = ("gmm", "kmeans", "spectral", "dbscan", "best_of")


@dataclass
class Clustering:
    """A reference clustering.

    Attributes
    ----------
    labels : ndarray of shape (n_samples,), int64; -1 marks noise (DBSCAN)
    method : str
        The method that produced ``labels`` (for best_of: the chosen candidate).
    centers : ndarray of shape (K, d) or None
    weights, means, covariances : ndarrays of shapes (K,), (K, d), (K, d, d), or None
        The mixture, when the method keeps one.
    graph : scipy.sparse matrix of shape (n, n) or None
        The similarity graph the method clustered (spectral).
    uses_labels : bool
        True when ground-truth labels influenced the result (best_of).
    scores : dict
        best_of: ARI of every candidate. ``"stability"`` (GMM): the restarts (their number,
        log-likelihoods, which one was kept and why), ``mean_ari`` (the mean ARI between every pair
        of restarts' labelings), ``chosen_agreement`` (the kept labeling's ARI with each restart),
        ``kept_ari`` (its mean over the other restarts: :attr:`stability`) and, per kept cluster
        (``clusters``), its best Jaccard index with a cluster of each other restart
        (``cluster_jaccard``, :func:`cluster_recovery`).
    """

    labels: np.ndarray
    method: str
    centers: np.ndarray | None = None
    weights: np.ndarray | None = None
    means: np.ndarray | None = None
    covariances: np.ndarray | None = None
    graph: object = None
    uses_labels: bool = False
    scores: dict = field(default_factory=dict)

    @property
    def stability(self) -> float | None:
        """Mean ARI between the kept labeling and each other restart's (1: every restart found the
        partition the trees explain), when the method had restarts."""
        return (self.scores.get("stability") or {}).get("kept_ari")

    @property
    def n_clusters(self) -> int:
        return int(np.unique(self.labels[self.labels >= 0]).size)

    @property
    def n_noise(self) -> int:
        return int((self.labels < 0).sum())


#: restarts agreeing less than this (mean ARI between every pair of restarts' labelings) counted as
#: unstable in benchmarks/reference_stability.py (runs now say which kept clusters the restarts
#: found, :data:`FOUND_AGAIN`): at .9 two restarts' partitions differ in a few percent of the points
#: at most; on Fashion-MNIST Shirt/Sneaker/Ankle boot the GMM's two optima (ARI .84 and .47 against
#: the classes) agree at ARI ~.45, and restarts that mix them score .6-.8
STABILITY_THRESHOLD = 0.9


#: a kept cluster is *found again* by another restart when one of that restart's clusters has a
#: Jaccard index (shared points / points in either) of at least this with it: the threshold of
#: Hennig (2007, "Cluster-wise assessment of cluster stability", Comput. Stat. Data Anal. 52) for a
#: stable cluster; at .5 and below he calls a cluster dissolved
FOUND_AGAIN = 0.75


def cluster_recovery(kept, others) -> np.ndarray:
    """Each kept cluster's best Jaccard index with any cluster of each other labeling.

    Parameters
    ----------
    kept : array-like of shape (n_samples,)
        The labeling the trees explain.
    others : sequence of array-like of shape (n_samples,)
        The other restarts' labelings.

    Returns
    -------
    ndarray of shape (n_kept_clusters, len(others))
        Rows in the order of ``np.unique(kept)``; 1.0: a cluster of that restart holds exactly the
        same points.
    """
    kept = np.asarray(kept)
    out = np.empty((np.unique(kept).size, len(others)))
    for r, other in enumerate(others):
        table = contingency_matrix(kept, np.asarray(other)).astype(float)  # kept clusters x that restart's
        union = table.sum(axis=1, keepdims=True) + table.sum(axis=0, keepdims=True) - table
        out[:, r] = (table / union).max(axis=1)
    return out


def restart_stability(labelings) -> float | None:
    """The mean adjusted Rand index over every pair of restarts' labelings (1.0: every restart
    found the same partition), or None with fewer than two restarts. Noise points (-1) count as
    a cluster of their own."""
    labelings = [np.asarray(lab) for lab in labelings]
    pairs = [adjusted_rand_score(a, b) for i, a in enumerate(labelings) for b in labelings[i + 1:]]
    return float(np.mean(pairs)) if pairs else None


def degenerate_components(gmm, n_samples: int) -> list[int]:
    """Components of a fitted GaussianMixture too small to estimate their covariance: fewer
    members (weight x ``n_samples``) than dimensions for full covariances (their sample
    covariance is singular, held up only by ``reg_covar``), fewer than 2 otherwise (a tied
    covariance is pooled: never). Such a component's density grows without bound as it
    collapses, so its mixture's likelihood is inflated and not comparable with that of a mixture
    without one: on EfficientNet features of Fashion-MNIST Shirt/Sneaker/Ankle boot (320-d, 3,000
    images) the likeliest of ten restarts put 255 images in one component (66 eigenvalues at the
    floor) and matched the classes at ARI .47, against .84 for the restarts without one."""
    if gmm.covariance_type == "tied":
        return []
    need = gmm.means_.shape[1] + 1 if gmm.covariance_type == "full" else 2
    return [c for c, w in enumerate(gmm.weights_) if w * n_samples < need]


def gmm_restarts(X, k: int, params: dict, seed) -> list[GaussianMixture]:
    """The ``params["n_init"]`` restarts of a Gaussian mixture, each fitted on its own, drawing from
    one stream seeded by ``seed`` exactly as scikit-learn's ``n_init`` loop does (so the likeliest
    is, bit for bit, ``GaussianMixture(n_init=...)``'s choice). ``params``: the remaining
    GaussianMixture arguments."""
    params = dict(params)
    n_init = int(params.pop("n_init", 1))
    if n_init < 1:
        raise InvalidInputError(f"clustering.params.n_init must be >= 1, got {n_init}.")
    stream = np.random.RandomState(seed)
    return [GaussianMixture(n_components=k, random_state=stream, n_init=1, **params).fit(X) for _ in range(n_init)]


def choose_restart(fits, n_samples: int, skip_degenerate: bool = True) -> tuple[int, list[bool]]:
    """The index of the restart to keep: the likeliest (the first of equals, as scikit-learn) among
    those without a degenerate component (:func:`degenerate_components`), or among all when every
    restart has one or ``skip_degenerate`` is False (scikit-learn's rule); and which restarts were
    degenerate."""
    degenerate = [bool(degenerate_components(g, n_samples)) for g in fits]
    pool = [i for i in range(len(fits)) if not (skip_degenerate and degenerate[i])] or list(range(len(fits)))
    if skip_degenerate and len(pool) == len(fits) and any(degenerate):
        log.warning("every one of the %d GMM restarts has a degenerate component (fewer members than dimensions); "
                    "the likeliest is kept. More restarts (clustering.params.n_init), a larger "
                    "clustering.params.reg_covar or covariance_type=diag avoid it", len(fits))
    bounds = [float(g.lower_bound_) for g in fits]
    return max(pool, key=lambda i: (bounds[i], -i)), degenerate


def _gmm(X, k, params, seed):
    """The restarts (:func:`gmm_restarts`), the one kept (:func:`choose_restart`; param
    ``skip_degenerate=False``: scikit-learn's likeliest of all), every restart's log-likelihood
    bound and the mean ARI between the restarts' labelings (:func:`restart_stability`)."""
    params = dict(params)
    skip_degenerate = bool(params.pop("skip_degenerate", True))
    fits = gmm_restarts(X, k, params, seed)
    chosen, degenerate = choose_restart(fits, len(X), skip_degenerate)
    labelings = [g.predict(X).astype(np.int64) for g in fits]
    gmm = fits[chosen]
    agreement = [float(adjusted_rand_score(labelings[chosen], lab)) for lab in labelings]
    others = [lab for i, lab in enumerate(labelings) if i != chosen]
    stability = {"mean_ari": restart_stability(labelings), "restarts": len(fits), "chosen": chosen,
                 "chosen_by": "likelihood among restarts without a degenerate component" if skip_degenerate
                 else "likelihood", "log_likelihood": [float(g.lower_bound_) for g in fits], "degenerate": degenerate,
                 "chosen_agreement": agreement,
                 "kept_ari": float(np.mean([a for i, a in enumerate(agreement) if i != chosen])) if others else None,
                 "clusters": np.unique(labelings[chosen]).tolist(),
                 "cluster_jaccard": cluster_recovery(labelings[chosen], others).round(4).tolist() if others else []}
    return Clustering(labelings[chosen], "gmm", centers=gmm.means_, weights=gmm.weights_,
                      means=gmm.means_, covariances=gmm_covariances(gmm), scores={"stability": stability})


def _kmeans(X, k, params, seed):
    params = dict(params)
    minibatch, standardize = bool(params.pop("minibatch", False)), bool(params.pop("standardize", False))
    fit_rows = _fit_rows(params.pop("fit_rows", None), k, X.shape[0])
    Xs = StandardScaler().fit_transform(X) if standardize else X
    km = (MiniBatchKMeans if minibatch else KMeans)(n_clusters=k, random_state=seed, **params)
    if fit_rows is None:
        labels = km.fit(Xs).labels_.astype(np.int64)
    else:  # centres from a uniform sample, then every row to its nearest centre in one pass
        rows = np.sort(np.random.default_rng(seed).choice(Xs.shape[0], size=fit_rows, replace=False))
        # the sample's fit is small work: on one thread (20k x 512, n_init=3 on a loaded 2-core
        # machine: 0.8 s CPU / 2 s wall on one thread, 8.6 s CPU / 26 s wall on two)
        with limit_threads(1):
            km.fit(Xs[rows])
        labels = km.predict(Xs).astype(np.int64)
    # centres in the units of X (what the trees see): the cluster means when k-means ran on scaled data
    centers = (np.stack([X[labels == c].mean(axis=0) if (labels == c).any() else np.full(X.shape[1], np.nan)
                         for c in range(k)]) if standardize else km.cluster_centers_)
    return Clustering(labels, "kmeans", centers=centers, scores={"scaled": True} if standardize else {})


def _fit_rows(fit_rows, k: int, n: int) -> int | None:
    """``clustering.params.fit_rows`` checked: None (fit on all rows) or a row count in [k, n)."""
    if fit_rows is None:
        return None
    if isinstance(fit_rows, bool) or not isinstance(fit_rows, (int, np.integer)) or fit_rows < k:
        raise InvalidInputError(f"clustering.params.fit_rows must be an integer >= n_clusters ({k}) or null, "
                                f"got {fit_rows!r}.")
    return int(fit_rows) if fit_rows < n else None


def _spectral(X, k, params, seed):
    params = dict(params)
    standardize, graph = bool(params.pop("standardize", False)), params.pop("graph", "affinity")
    if graph not in ("affinity", "knn"):
        raise InvalidInputError(f"clustering.params.graph must be 'affinity' (the clustering's own affinity "
                                f"matrix) or 'knn' (a symmetrised k-NN graph), got {graph!r}.")
    Xs = StandardScaler().fit_transform(X) if standardize else X
    sc = SpectralClustering(n_clusters=k, random_state=seed, **params).fit(Xs)
    G = sc.affinity_matrix_
    if graph == "knn":  # A + Aᵀ of the k-NN connectivity graph (no self-loops): SpEx's published notebook
        A = kneighbors_graph(Xs, n_neighbors=min(int(params.get("n_neighbors", 10)), len(X) - 1))
        G = (A + A.T).tocsr()
    return Clustering(sc.labels_.astype(np.int64), "spectral", graph=G)


def dbscan_eps(X: np.ndarray, min_samples: int, quantile: float) -> float:
    """``quantile`` of the distance from each point to its ``min_samples``-th neighbour (k-distance curve)."""
    nn = NearestNeighbors(n_neighbors=min(min_samples, len(X))).fit(X)
    dist, _ = nn.kneighbors(X)
    return float(np.quantile(dist[:, -1], quantile))


def _dbscan(X, k, params, seed):
    params = dict(params)
    min_samples = params.pop("min_samples", None) or 2 * X.shape[1]
    quantile = params.pop("eps_quantile", 0.9)
    eps = params.pop("eps", None) or dbscan_eps(X, min_samples, quantile)
    labels = DBSCAN(eps=eps, min_samples=min_samples, **params).fit_predict(X).astype(np.int64)
    return Clustering(labels, "dbscan", scores={"eps": eps, "min_samples": min_samples})


_BASE = {"gmm": _gmm, "kmeans": _kmeans, "spectral": _spectral, "dbscan": _dbscan}

#: each method's estimators (their constructor arguments are its params) and the params it adds
_ESTIMATORS = {"gmm": ((GaussianMixture,), {"skip_degenerate"}),
               "kmeans": ((KMeans, MiniBatchKMeans), {"minibatch", "standardize", "fit_rows"}),
               "spectral": ((SpectralClustering,), {"standardize", "graph"}),
               "dbscan": ((DBSCAN,), {"eps_quantile"})}


def method_params(method: str) -> set[str] | None:
    """The ``params`` a base method takes: its scikit-learn estimator's arguments (less the number
    of clusters and the seed, which :func:`cluster` passes) and its own extras; None for ``best_of``
    (one dict of params per candidate method) and unknown names."""
    if method not in _ESTIMATORS:
        return None
    classes, extra = _ESTIMATORS[method]
    names = {name for cls in classes for name in cls().get_params()}
    return (names - {"n_clusters", "n_components", "random_state"}) | extra


def check_method_params(method: str, params: dict, where: str = "clustering.params") -> None:
    """Raise on a key of ``params`` that ``method`` does not take, naming the ones it does."""
    valid = method_params(method)
    unknown = sorted(set(params or {}) - valid) if valid is not None else []
    if unknown:
        raise InvalidInputError(f"{where}.{unknown[0]}: clustering={method} takes no parameter {unknown[0]!r}"
                                + (f" (nor {unknown[1:]})" if len(unknown) > 1 else "")
                                + f"; its parameters: {', '.join(sorted(valid))}.")


def cluster(X, method: str, n_clusters: int, params: dict | None = None, random_state: int = 0,
            y_true=None, candidates=()) -> Clustering:
    """Compute a reference clustering of ``X``.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    method : {"gmm", "kmeans", "spectral", "dbscan", "best_of"}
    n_clusters : int
        Number of clusters (ignored by DBSCAN).
    params : dict
        Keyword arguments of the scikit-learn estimator (best_of: ``{method: params}``).
    y_true : array-like of shape (n_samples,), optional
        Ground truth; required by ``best_of``, which keeps the candidate with the highest ARI.
    candidates : sequence of str
        best_of: the base methods to try.

    Returns
    -------
    Clustering
    """
    params = dict(params or {})
    # k-means on a sample (fit_rows) is the large-data mode: float32 embeddings stay float32 (a
    # float64 copy of 1M x 512 would be 4 GB); every other method sees float64, as it always has
    keep32 = method == "kmeans" and params.get("fit_rows") is not None and getattr(X, "dtype", None) == np.float32
    X = check_matrix(X, "embeddings", dtype=np.float32 if keep32 else np.float64)
    if method == "best_of":
        return _best_of(X, n_clusters, params, random_state, y_true, candidates)
    if method not in _BASE:
        raise InvalidInputError(f"unknown clustering {method!r}; choose one of {list(METHODS)}.")
    check_method_params(method, params)
    if method != "dbscan" and not 2 <= n_clusters <= len(X):
        raise InvalidInputError(f"clustering.n_clusters must be in [2, {len(X)}], got {n_clusters}.")
    try:
        out = _BASE[method](X, n_clusters, params, random_state)
    except TypeError as exc:  # an unknown keyword in clustering.params
        raise InvalidInputError(f"clustering={method}: bad clustering.params {params}: {exc}") from None
    check_enough_clusters(out)
    return out


def choose_n_clusters(X, k_min: int = 2, k_max: int = 10, random_state: int = 0,
                      max_samples: int = 5000) -> tuple[int, dict[int, float]]:
    """The number of clusters with the lowest BIC of a diagonal-covariance Gaussian mixture.

    For data without labels and without a given K. Fits ``k_min..k_max`` components (capped at
    ``n_samples // 2``) on at most ``max_samples`` rows drawn with ``random_state``.

    Returns
    -------
    k : int
    bic : dict of int -> float
        BIC per candidate K (lower is better).
    """
    X = check_matrix(X, "embeddings", min_rows=4)
    rng = np.random.default_rng(random_state)
    if len(X) > max_samples:
        X = X[np.sort(rng.choice(len(X), max_samples, replace=False))]
    ks = range(int(k_min), max(int(k_min), min(int(k_max), len(X) // 2)) + 1)
    bic = {k: float(GaussianMixture(k, covariance_type="diag", n_init=1, random_state=random_state,
                                    reg_covar=1e-6).fit(X).bic(X)) for k in ks}
    return min(bic, key=bic.get), bic


def nearest_centers(X, centers, with_rows=None, n_jobs=None) -> tuple[np.ndarray, np.ndarray | None]:
    """Index (int64) of each row's nearest centre, as :func:`sklearn.metrics.pairwise_distances_argmin`
    says, and ``X @ with_rows.T`` (float64) from the same pass over ``X`` (or None).

    One compiled pass (:func:`pipeline.concepts.projection.project_with_norms`) gives the products
    of every row with the centres (and ``with_rows``: the CAVs of a concept run) and its squared
    norm, in float64; the nearest centre minimises ``‖μ‖² − 2⟨x, μ⟩``. scikit-learn computes
    ``‖x‖² − 2⟨x, μ⟩ + ‖μ‖²`` in float64 with other summation orders: both are within
    ``γ (‖x‖ + ‖μ‖)²`` of the exact value (``γ = (d + 3) u``, the rounding bound of a d-term
    dot product and the additions, u = 2⁻⁵³). A row whose two best scores differ by more than
    four times that gets the same centre from both; the rest (near-ties, none in most data) are
    decided in exact arithmetic (:func:`exact_nearest`; scikit-learn's own answer there depends on
    how many rows it is given). Rows are independent: any chunking gives the same labels. ``X`` is
    not checked (NaN rows get unspecified labels).
    """
    from sklearn.metrics import pairwise_distances_argmin

    from pipeline.concepts.projection import project_with_norms

    # the centres in X's precision, as scikit-learn compares them
    mu = np.asarray(centers, dtype=np.float32 if X.dtype == np.float32 else np.float64)
    mu64 = mu.astype(np.float64)
    m = 0 if with_rows is None else len(with_rows)
    stacked = mu64 if with_rows is None else np.vstack([np.asarray(with_rows, np.float64), mu64])
    P, sq = project_with_norms(X, stacked, n_jobs)
    mu_sq = np.einsum("ij,ij->i", mu64, mu64)
    bound = 4 * (X.shape[1] + 3) * np.finfo(np.float64).eps / 2  # 4 γ
    labels, unsure = _nearest_from_products(P, m, mu_sq, sq, bound)
    if unsure.size:  # near-ties: the exact answer (scikit-learn's own rounds differently with the rows' count)
        labels[unsure] = exact_nearest(X[unsure], mu) if unsure.size <= EXACT_ROWS else \
            pairwise_distances_argmin(X[unsure], mu)
    return labels, (np.ascontiguousarray(P[:, :m]) if with_rows is not None else None)


#: near-tie rows of :func:`nearest_centers` decided in exact arithmetic (more: by scikit-learn)
EXACT_ROWS = 2000


def exact_nearest(X: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """The index (int64) of each row's nearest centre, its squared distance summed in exact rational
    arithmetic (the first of exactly equal ones, as ``np.argmin``); for the few near-ties a float
    computation cannot decide."""
    from fractions import Fraction

    C = [[Fraction(float(v)) for v in row] for row in np.asarray(centers, dtype=np.float64)]
    out = np.empty(len(X), np.int64)
    for i, x in enumerate(np.asarray(X, dtype=np.float64)):
        xs = [Fraction(float(v)) for v in x]
        dists = [sum((a - b) * (a - b) for a, b in zip(xs, c)) for c in C]
        out[i] = min(range(len(dists)), key=dists.__getitem__)
    return out


def _nearest_from_products(P, m: int, mu_sq, sq, bound: float) -> tuple[np.ndarray, np.ndarray]:
    """(the argmin over k of ``mu_sq[k] - 2 P[:, m + k]``, the finite rows whose two best scores
    are within ``bound (√sq + max √mu_sq)²``) of :func:`nearest_centers`."""
    from pipeline.concepts import _project_kernel as _kernel

    labels = np.zeros(P.shape[0], np.int64)
    if not _kernel.AVAILABLE:  # pragma: no cover - numba is a dependency; scikit-learn decides every row
        return labels, np.flatnonzero(np.isfinite(sq))
    unsure = np.empty(P.shape[0], np.bool_)
    n = _kernel.nearest_from_products(P, m, mu_sq, sq, bound, float(np.sqrt(mu_sq.max())), labels, unsure)
    return labels, (np.flatnonzero(unsure) if n else np.empty(0, np.int64))


def mixture_predict(gm, X) -> np.ndarray:
    """``gm.predict(X)`` (int64) for a fitted full- or tied-covariance ``GaussianMixture``, about 3×
    faster: the Mahalanobis terms ``‖(x - μ_k) L_k‖²`` are first computed in float32, with a bound
    on their rounding error per row and component; only rows whose two most probable components
    are closer than those bounds allow are predicted again by ``gm.predict`` in float64. The labels
    are scikit-learn's wherever the float32 screen cannot tell the answer apart, so they equal
    ``gm.predict(X)``.

    The bound: ``y = x L - μ L`` in float32 (``x``, ``L`` and ``μ L`` rounded to float32, a
    product of depth ``d``, one subtraction) is off by at most ``(d + 4) ε (|x| + |μ|) · Σ_j |L_ij|`` in the 1-norm (ε:
    float32's unit roundoff), so ``‖y‖²`` is off by at most ``2 ‖y‖ e + e²``; all of it is summed
    in float64, with a margin for the float64 arithmetic itself.
    """
    X = np.asarray(X)
    kind = gm.covariance_type
    if kind not in ("full", "tied") or X.shape[0] == 0:
        return np.asarray(gm.predict(X), dtype=np.int64)
    means = np.asarray(gm.means_, dtype=np.float64)
    k, d = means.shape
    chol = np.asarray(gm.precisions_cholesky_, dtype=np.float64)
    chol = np.broadcast_to(chol, (k, d, d)) if kind == "tied" else chol
    eps = float(np.finfo(np.float32).eps)
    X32 = np.asarray(X, dtype=np.float32)
    row_l1 = np.abs(chol).sum(axis=2).T  # (d, k): Σ_j |L_ij| of each component
    # e = (d + 4) ε (|x| + |μ|) · Σ_j |L_ij|, every component at once
    e = (d + 4) * eps * ((np.abs(X32) @ row_l1.astype(np.float32)).astype(np.float64)
                         + np.einsum("kd,dk->k", np.abs(means), row_l1))
    shift = np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(axis=1) - 0.5 * d * np.log(2 * np.pi) \
        + np.log(np.asarray(gm.weights_, dtype=np.float64))
    maha = np.empty((X.shape[0], k))
    for j in range(k):
        y = X32 @ chol[j].astype(np.float32)
        y -= (means[j] @ chol[j]).astype(np.float32)
        maha[:, j] = np.einsum("ij,ij->i", y, y, dtype=np.float64)
    logp = -0.5 * maha + shift
    err = 0.5 * (2 * np.sqrt(maha) * e + e * e) + 1e-9 * (1 + np.abs(logp))
    rows = np.arange(X.shape[0])
    best = logp.argmax(axis=1)
    out = best.astype(np.int64)
    if k > 1:
        gap = logp[rows, best][:, None] - logp
        gap[rows, best] = np.inf
        unsure = np.flatnonzero((gap <= err[rows, best][:, None] + err).any(axis=1))
        if unsure.size:
            out[unsure] = gm.predict(np.asarray(X[unsure]))
    return out


def mixture_from_labels(X, labels, reg_covar: float = 1e-6) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The empirical Gaussian mixture of a hard clustering: weights (K,) (cluster shares), means
    (K, d) and covariances (K, d, d) (maximum likelihood, plus ``reg_covar`` on the diagonal as in
    scikit-learn's GaussianMixture) of the clusters 0..K-1 of ``labels`` (noise, -1, left out)."""
    X = np.asarray(X, dtype=np.float64)
    labels = np.asarray(labels)
    k = int(labels.max()) + 1 if (labels >= 0).any() else 0
    weights, means, covs = np.zeros(k), np.zeros((k, X.shape[1])), np.zeros((k, X.shape[1], X.shape[1]))
    for c in range(k):
        rows = X[labels == c]
        if len(rows) == 0:
            raise InvalidInputError(f"cluster {c} of the {k} clusters is empty; no mixture can be estimated from these "
                                    "labels.")
        weights[c], means[c] = len(rows), rows.mean(axis=0)
        centred = rows - means[c]
        covs[c] = centred.T @ centred / len(rows) + reg_covar * np.eye(X.shape[1])
    return weights / weights.sum(), means, covs


def _unique_inverse(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(labels, return_inverse=True, return_counts=True)`` of a 1-D array; integer
    labels of a small range by counting (no sort of the n labels: 10M cluster ids in 0.1 s, not 1 s)."""
    if labels.ndim == 1 and labels.size and labels.dtype.kind in "iu":
        lo, hi = int(labels.min()), int(labels.max())
        if hi - lo < 1 << 16 and hi < 1 << 62:
            shifted = labels.astype(np.intp) - lo
            counts = np.bincount(shifted, minlength=hi - lo + 1)
            present = np.flatnonzero(counts)
            lookup = np.zeros(hi - lo + 1, np.intp)
            lookup[present] = np.arange(present.size)
            return (present + lo).astype(labels.dtype), lookup[shifted], counts[present]
    return np.unique(labels, return_inverse=True, return_counts=True)


def stratified_sample(labels, n_rows: int, random_state: int = 0) -> np.ndarray:
    """Sorted indices of ``n_rows`` rows drawn without replacement, every label value (noise
    -1 included) keeping its share (largest-remainder rounding, at least one row per value).

    ``n_rows`` at least the number of rows returns every row.
    """
    labels = np.asarray(labels)
    n = labels.shape[0]
    if n_rows >= n:
        return np.arange(n)
    if n_rows < 1:
        raise InvalidInputError(f"a sample of {n_rows} rows: ask for at least one row.")
    values, inverse, counts = _unique_inverse(labels)
    exact = counts * (n_rows / n)
    take = np.minimum(np.maximum(np.floor(exact).astype(np.int64), 1), counts)
    order = np.argsort(-(exact - np.floor(exact)), kind="stable")
    for i in order:  # largest remainders first, until the total is n_rows
        if take.sum() >= n_rows:
            break
        if take[i] < counts[i]:
            take[i] += 1
    while take.sum() > max(n_rows, values.size):  # the ones given to tiny values come from the most over-served
        over = np.where(take > 1, take - exact, -np.inf)
        take[int(np.argmax(over))] -= 1
    rng = np.random.default_rng(random_state)
    # stable: the one order of the rows by value (16-bit keys: numpy's radix sort, O(n))
    by_value = np.argsort(inverse.astype(np.uint16) if values.size <= 1 << 16 else inverse, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    picked = [rng.choice(by_value[s:s + c], size=t, replace=False) for s, c, t in zip(starts, counts, take)]
    return np.sort(np.concatenate(picked))


def fit_gmm(X, n_clusters: int, random_state: int = 0, **params) -> Clustering:

    """Gaussian mixture (``params``: :class:`sklearn.mixture.GaussianMixture` arguments); keeps the mixture."""
    return cluster(X, "gmm", n_clusters, params, random_state)


def fit_kmeans(X, n_clusters: int, random_state: int = 0, **params) -> Clustering:
    """k-means (``params``: :class:`sklearn.cluster.KMeans` arguments); keeps the centres.

    Extra ``params``: ``minibatch=True`` runs :class:`sklearn.cluster.MiniBatchKMeans` instead;
    ``standardize=True`` clusters the standardised features (zero mean, unit variance) and
    keeps the clusters' means in the original units as centres (the SpEx authors' published
    notebook: MiniBatchKMeans on standardised data, trees on the raw features).
    ``fit_rows=N`` fits k-means (with its ``n_init`` restarts) on N rows drawn uniformly
    without replacement (seeded by ``random_state``) and assigns every row to its nearest
    centre in one pass; float32 embeddings then stay float32. On a million 512-d embeddings
    this is the fast reference (issue 27, ``benchmarks/million_end_to_end.py``: ``fit_rows=20000,
    n_init=3``, ARI against k-means on all rows in that benchmark's JSON).
    """
    return cluster(X, "kmeans", n_clusters, params, random_state)


def fit_spectral(X, n_clusters: int, random_state: int = 0, **params) -> Clustering:
    """Spectral clustering (``params``: :class:`sklearn.cluster.SpectralClustering` arguments); keeps a graph.

    Extra ``params``: ``standardize=True`` clusters the standardised features; ``graph`` is
    the graph handed to graph-based explainers: ``"affinity"`` (default) the clustering's own
    affinity matrix, ``"knn"`` the symmetrised ``n_neighbors``-NN connectivity graph ``A + Aᵀ``
    of the (standardised) features, as the SpEx authors' published notebook builds for SpEx-kNN.
    """
    return cluster(X, "spectral", n_clusters, params, random_state)


def fit_dbscan(X, random_state: int = 0, **params) -> Clustering:
    """DBSCAN; ``eps=None`` takes the ``eps_quantile`` of the k-distance curve, ``min_samples=None`` 2·d."""
    return cluster(X, "dbscan", 0, params, random_state)


def best_of(X, n_clusters: int, random_state: int = 0, y_true=None, candidates=(), **params) -> Clustering:
    """The candidate method (by name) with the highest ARI against ``y_true``; ``params`` maps a
    method name to its parameters."""
    return cluster(X, "best_of", n_clusters, params, random_state, y_true=y_true, candidates=candidates)


for _fit, _method in ((fit_gmm, "gmm"), (fit_kmeans, "kmeans"), (fit_spectral, "spectral"), (fit_dbscan, "dbscan"),
                      (best_of, "best_of")):
    _fit.method = _method  # which params it takes (method_params), read by the pipeline's start-up checks


def check_enough_clusters(c: Clustering) -> None:
    if c.n_clusters < 2:
        raise InvalidInputError(
            f"the {c.method} reference clustering found {c.n_clusters} cluster(s) ({c.n_noise} noise points); "
            "a tree needs at least 2. Change the clustering's parameters (e.g. clustering.params.eps for DBSCAN, "
            "clustering.n_clusters) or choose another clustering."
        )


def _best_of(X, n_clusters, params, seed, y_true, candidates) -> Clustering:
    if y_true is None:
        raise InvalidInputError("clustering=best_of picks by ARI against the ground truth, but the dataset has no labels.")
    if not candidates:
        raise InvalidInputError("clustering=best_of needs clustering.candidates, e.g. [gmm, spectral, dbscan].")
    y_true = np.asarray(y_true)
    known = y_true >= 0
    best, scores = None, {}
    for name in candidates:
        try:
            c = cluster(X, name, n_clusters, params.get(name, {}), seed)
        except InvalidInputError as exc:
            log.warning("best_of: candidate %s failed: %s", name, exc)
            scores[name] = None
            continue
        scores[name] = float(adjusted_rand_score(y_true[known], c.labels[known]))
        if best is None or scores[name] > scores[best.method]:
            best = c
    if best is None:
        raise InvalidInputError(f"clustering=best_of: every candidate {list(candidates)} failed; see the warnings.")
    best.uses_labels, best.scores = True, {**best.scores, "candidates_ari": scores}
    log.info("best_of chose %s (ARI %s)", best.method, scores)
    return best
