"""The reference clustering's rule for a new latent point: one serialisable predictor (issues 48, 49).

Every place that assigns a row to a reference cluster asks one of these: the chunk pass that
labels every row after a fit on a sample (:mod:`pipeline.app.stages.cluster`), the saved
explainer (:mod:`pipeline.app.explainer.explainer_bundle`, ``ConceptExplainer``) and the concept checks
that read the clustering as a model *head* (Yeh et al.'s completeness, 2020, Def. 3.1; TCAV,
Kim et al. 2018). :func:`predictor_of` picks the rule of a fitted :class:`pipeline.clustering.Clustering`:

* :class:`MixtureHead`: a Gaussian mixture (the GMM reference): ``p(k | z) ∝ w_k N(z; μ_k, Σ_k)``,
  the most probable component, exactly as :meth:`sklearn.mixture.GaussianMixture.predict` says;
* :class:`EncoderHead`: ``clustering=encoder``: on latents, the same rule under the encoder's
  mixture prior (VaDE's head); given the inputs and the encoder, the encoder's own head;
* :class:`NearestCentreHead`: k-means, the nearest centre (:func:`pipeline.clustering.nearest_centers`);
  as a posterior, the isotropic equal-weight mixture that k-means is the hard limit of,
  ``p(k | z) ∝ exp(-‖z - μ_k‖² / (2 s²))`` with ``s²`` the pooled within-cluster variance per dimension;
* :class:`NearestRowPredictor`: spectral clustering, DBSCAN, a chosen ``best_of``, k-means on
  standardised latents or any other clustering, which have no rule for new points of their own:
  the label of the nearest of the rows they were fitted on (noise stays noise).

Each has ``predict(Z)`` and ``to_dict()`` (arrays and numbers; :func:`predictor_from_dict` reads it
back); the first three also have ``predict_proba`` and ``log_posterior_slopes`` (:func:`head_of`
returns those). Pure: arrays in, arrays out.
"""

from __future__ import annotations

import numpy as np

from pipeline.validation import InvalidInputError, check_matrix


#: rows per block of a prediction (a few MB of products per block; a float32 chunk is never widened whole)
BLOCK_ROWS = 16_384


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    top = logits.max(axis=1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))


def _pairwise_slopes(log_post: np.ndarray, a: np.ndarray, scaled: bool = False, block: int = 256) -> np.ndarray:
    """``out[n, k, r] = Σ_j p[n, j] (a[n, k, r] - a[n, j, r])`` with ``p = exp(log_post)`` (rows in
    blocks). ``scaled``: each (n, k) divided by ``max_{j≠k} p[n, j]``, computed in the log domain, so
    the sign survives where the other components' posteriors underflow to 0."""
    n, K, R = a.shape
    out = np.empty((n, K, R))
    for i in range(0, n, block):
        lp, x = log_post[i:i + block], a[i:i + block]
        for k in range(K):
            shift = 0.0
            if scaled and K > 1:
                shift = np.delete(lp, k, axis=1).max(axis=1, keepdims=True)
                shift = np.where(np.isfinite(shift), shift, 0.0)
            with np.errstate(under="ignore", over="ignore"):
                w = np.exp(lp - shift)
            w[:, k] = 0.0  # its own term is a_k - a_k = 0 (its weight may overflow when scaled)
            out[i:i + block, k, :] = np.einsum("nj,njr->nr", w, x[:, k:k + 1, :] - x)
    return out


def _rows(Z, check_input: bool) -> np.ndarray:
    """``Z`` as a 2-D float array: float32 latents stay float32 (each rule widens its blocks)."""
    return check_matrix(Z, "Z", min_rows=0, dtype=np.float32 if getattr(Z, "dtype", None) == np.float32 else np.float64,
                        finite=check_input)


def _in_blocks(fn, Z: np.ndarray, check_input: bool, block_rows: int) -> np.ndarray:
    """``fn(block)`` (int labels) over blocks of ``block_rows`` rows, as int64; ``check_input=False``
    (scikit-learn's name) tells scikit-learn the rows are finite (proved by the caller)."""
    from sklearn import config_context

    out = np.empty(Z.shape[0], np.int64)
    with config_context(assume_finite=not check_input):
        for i in range(0, Z.shape[0], block_rows):
            out[i:i + block_rows] = fn(Z[i:i + block_rows])
    return out


class _Predictor:
    """What every predictor offers beyond ``predict``: its labels with the rows' products with
    some directions (the concept coordinates ``Z Cᵀ``), from one pass over a chunk."""

    def predict_projected(self, Z, directions) -> tuple[np.ndarray, np.ndarray]:
        """(``predict(Z)``, ``Z @ directions.T`` in float64). The coordinates are computed first
        and prove ``Z`` finite (a NaN or inf reaches every coordinate of its row): an
        :class:`InvalidInputError` when they are not."""
        from pipeline.concepts.projection import project

        X = project(Z, directions)
        return self.predict(Z, check_input=False), X

    @classmethod
    def from_dict(cls, d: dict):
        """The predictor :meth:`to_dict` described."""
        return cls(**{k: v for k, v in d.items() if k != "kind"})


class MixtureHead(_Predictor):
    """A full-covariance Gaussian mixture as a head.

    Parameters
    ----------
    weights : array-like of shape (K,)
    means : array-like of shape (K, d)
    covariances : array-like of shape (K, d, d)
        Symmetric positive definite.
    """

    kind = "mixture"
    rule = "the most probable component of the fitted Gaussian mixture"

    def __init__(self, weights, means, covariances):
        from scipy.linalg import cholesky, solve_triangular

        self.weights = np.asarray(weights, dtype=np.float64).ravel()
        self.means = check_matrix(means, "mixture means")
        covs = np.asarray(covariances, dtype=np.float64)
        K, d = self.means.shape
        if self.weights.shape != (K,) or covs.shape != (K, d, d):
            raise InvalidInputError(f"a mixture head needs weights (K,), means (K, d) and covariances (K, d, d); got "
                                    f"{self.weights.shape}, {self.means.shape} and {covs.shape}.")
        if not (np.all(np.isfinite(self.weights)) and np.all(self.weights >= 0) and abs(self.weights.sum() - 1) < 1e-6):
            raise InvalidInputError(f"mixture weights must be finite, >= 0 and sum to 1; they sum to "
                                    f"{self.weights.sum():.6g}.")
        chol = np.empty_like(covs)
        for k, cov in enumerate(covs):
            try:
                low = cholesky(cov, lower=True)
            except np.linalg.LinAlgError:
                raise InvalidInputError(f"the covariance of mixture component {k} is not positive definite, so the "
                                        "mixture assigns no point to it; refit the clustering (a larger "
                                        "clustering.params.reg_covar).") from None
            # the precision Cholesky as scikit-learn computes it from the covariances: its predict exactly
            chol[k] = solve_triangular(low, np.eye(d), lower=True).T
        self.covariances = covs
        self.precisions_cholesky = chol
        with np.errstate(divide="ignore"):
            self._shift = (np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(axis=1) - 0.5 * d * np.log(2 * np.pi)
                           + np.log(self.weights))
        self._gm = None

    @property
    def n_clusters(self) -> int:
        return len(self.weights)

    def __getstate__(self) -> dict:  # picklable (Dask tasks) without the scikit-learn model built from it
        return {**self.__dict__, "_gm": None}

    def _log_joint(self, Z: np.ndarray) -> np.ndarray:
        out = np.empty((Z.shape[0], self.n_clusters))
        for k in range(self.n_clusters):
            y = (Z - self.means[k]) @ self.precisions_cholesky[k]
            out[:, k] = -0.5 * np.einsum("ij,ij->i", y, y) + self._shift[k]
        return out

    def mixture(self):
        """A fitted :class:`sklearn.mixture.GaussianMixture` with these parameters (built once)."""
        if self._gm is None:
            from sklearn.mixture import GaussianMixture

            gm = GaussianMixture(n_components=self.n_clusters, covariance_type="full")
            gm.weights_, gm.means_, gm.covariances_ = self.weights, self.means, self.covariances
            gm.precisions_cholesky_, gm.n_features_in_ = self.precisions_cholesky, self.means.shape[1]
            self._gm = gm
        return self._gm

    def predict(self, Z, check_input: bool = True, block_rows: int = BLOCK_ROWS) -> np.ndarray:
        """The most probable component of each row of ``Z`` (n, d), int64: what scikit-learn's
        ``GaussianMixture.predict`` says (:func:`pipeline.clustering.mixture_predict`). A row's label
        does not depend on the other rows. ``check_input=False`` skips the pass that proves ``Z``
        finite (NaN or inf rows then get unspecified labels)."""
        from pipeline.clustering import mixture_predict

        gm = self.mixture()
        return _in_blocks(lambda block: mixture_predict(gm, block), _rows(Z, check_input), check_input, block_rows)

    def predict_proba(self, Z) -> np.ndarray:
        """``p(k | z)``, shape (n, K)."""
        return np.exp(_log_softmax(self._log_joint(check_matrix(Z, "Z", min_rows=0))))

    def predict_affine(self, offset: np.ndarray, basis: np.ndarray, V: np.ndarray) -> np.ndarray:
        """The most probable component of ``z = offset + basis @ v`` for each row ``v`` of ``V`` (n, M),
        without forming the (n, d) points: cheap when M is much below d (latents rebuilt from M
        concept scores)."""
        V = np.asarray(V, dtype=np.float64)
        scores = np.empty((V.shape[0], self.n_clusters))
        for k in range(self.n_clusters):
            L = self.precisions_cholesky[k]
            y = V @ (basis.T @ L) + (offset - self.means[k]) @ L
            scores[:, k] = -0.5 * np.einsum("ij,ij->i", y, y) + self._shift[k]
        return scores.argmax(axis=1).astype(np.int64)

    def log_posterior_slopes(self, Z, directions, scaled: bool = False) -> np.ndarray:
        """``d/dε log p(k | z + ε c)`` for every row ``z`` of ``Z`` (n, d), cluster k and direction ``c``
        (rows of ``directions``, (R, d)): shape (n, K, R). With ``a_j = -(z - μ_j)ᵀ Σ_j⁻¹ c`` (the
        slope of component j's log density), the slope is ``Σ_{j≠k} p(j | z) (a_k - a_j)``: summed
        term by term, so a point deep inside its cluster (``p(k | z) ≈ 1``) keeps the sign of its
        small slope instead of the rounding of ``a_k - Σ_j p_j a_j``.

        ``scaled=True``: each slope divided by ``max_{j≠k} p(j | z)`` (a positive factor: the same
        sign), with the weights taken in the log domain. Where the other components' posteriors
        underflow to 0 in float64 (a point hundreds of log units inside its cluster, common with few
        rows in many dimensions) the plain slope is exactly 0; the scaled one still says whether
        the posterior rises (what TCAV's score counts)."""
        Z = check_matrix(Z, "Z", min_rows=0)
        C = np.atleast_2d(np.asarray(directions, dtype=np.float64))
        a = np.empty((Z.shape[0], self.n_clusters, C.shape[0]))
        for j in range(self.n_clusters):
            L = self.precisions_cholesky[j]
            Pc = L @ (L.T @ C.T)  # Σ_j⁻¹ c, (d, R)
            a[:, j, :] = -(Z @ Pc - self.means[j] @ Pc)
        return _pairwise_slopes(_log_softmax(self._log_joint(Z)), a, scaled)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "weights": self.weights, "means": self.means, "covariances": self.covariances}


class EncoderHead(MixtureHead):
    """``clustering=encoder``: the encoder's own cluster head. On latents alone, the most probable
    component of its mixture prior (VaDE's head, computed here in float64; the encoder computes it
    in its own precision, so a point on a boundary between two components may read differently);
    given the raw inputs and the fitted encoder, :meth:`predict_inputs` asks the encoder itself,
    which is how the run labelled its rows.

    Parameters
    ----------
    weights, means, covariances : the mixture prior (or, for a head without one, the clusters'
        empirical mixture), as :class:`MixtureHead`.
    head_labels : array-like of int, optional
        The encoder's head label of each run cluster 0..K-1 (the run numbers the clusters the head
        used consecutively); None: the same numbers.
    """

    kind = "encoder_head"
    rule = "the encoder's own cluster head (on latents alone: the posterior under its mixture prior)"

    def __init__(self, weights, means, covariances, head_labels=None):
        super().__init__(weights, means, covariances)
        self.head_labels = None if head_labels is None else np.asarray(head_labels, dtype=np.int64).ravel()

    def predict_inputs(self, encoder, inputs) -> np.ndarray:
        """The run's cluster of each raw input, from the encoder's head (``encoder.predict_clusters``)."""
        raw = np.asarray(encoder.predict_clusters(inputs), dtype=np.int64)
        if self.head_labels is None:
            return raw
        lookup = np.full(int(max(self.head_labels.max(), raw.max(initial=0))) + 1, -1, np.int64)
        lookup[self.head_labels] = np.arange(self.head_labels.size)
        return lookup[raw]

    def to_dict(self) -> dict:
        out = super().to_dict()
        return out if self.head_labels is None else {**out, "head_labels": self.head_labels}


class NearestCentreHead(_Predictor):
    """k-means' rule as a head: the nearest centre; its posterior (for slopes) that of the isotropic
    equal-weight mixture with variance ``spread`` per dimension (k-means is its hard limit).

    Parameters
    ----------
    centers : array-like of shape (K, d)
    spread : float, optional
        The within-cluster variance per dimension (default 1).
    """

    kind = "nearest_center"
    rule = "the nearest k-means centre"

    def __init__(self, centers, spread: float | None = None):
        self.centers = check_matrix(centers, "centres")
        self.spread = float(spread) if spread is not None else 1.0
        if not (np.isfinite(self.spread) and self.spread > 0):
            raise InvalidInputError(f"the spread of a nearest-centre head must be a positive number, got {spread!r}.")

    @property
    def n_clusters(self) -> int:
        return len(self.centers)

    def predict(self, Z, check_input: bool = True, block_rows: int = BLOCK_ROWS) -> np.ndarray:
        """The nearest centre of each row of ``Z`` (n, d), int64, as
        :func:`sklearn.metrics.pairwise_distances_argmin` says (:func:`pipeline.clustering.nearest_centers`)."""
        from pipeline.clustering import nearest_centers

        return _in_blocks(lambda block: nearest_centers(block, self.centers)[0], _rows(Z, check_input), check_input,
                          8 * block_rows)

    def predict_projected(self, Z, directions) -> tuple[np.ndarray, np.ndarray]:
        """(the nearest centres, ``Z @ directions.T``) from one compiled pass over ``Z``; coordinates
        that are not finite are an :class:`InvalidInputError`."""
        from pipeline.clustering import nearest_centers
        from pipeline.concepts.projection import check_projected

        labels, X = nearest_centers(Z, self.centers, with_rows=directions)
        check_projected(Z, X)
        return labels, X

    def _logits(self, Z: np.ndarray) -> np.ndarray:
        sq = ((Z[:, None, :] - self.centers[None, :, :]) ** 2).sum(axis=2)
        return -sq / (2 * self.spread)

    def predict_proba(self, Z) -> np.ndarray:
        return np.exp(_log_softmax(self._logits(check_matrix(Z, "Z", min_rows=0))))

    def predict_affine(self, offset: np.ndarray, basis: np.ndarray, V: np.ndarray) -> np.ndarray:
        """The nearest centre of ``offset + basis @ v`` per row of ``V``: ``‖a + Bv - μ_k‖²`` differs
        between centres only by ``‖a - μ_k‖² + 2 (a - μ_k)ᵀ B v``."""
        V = np.asarray(V, dtype=np.float64)
        diff = offset[None, :] - self.centers  # (K, d)
        scores = (diff ** 2).sum(axis=1)[None, :] + 2 * V @ (basis.T @ diff.T)
        return scores.argmin(axis=1).astype(np.int64)

    def log_posterior_slopes(self, Z, directions, scaled: bool = False) -> np.ndarray:
        """``d/dε log p(k | z + ε c)``, shape (n, K, R): ``Σ_{j≠k} p_j (μ_k - μ_j) · c / s²``
        (``scaled``: as :meth:`MixtureHead.log_posterior_slopes`)."""
        Z = check_matrix(Z, "Z", min_rows=0)
        C = np.atleast_2d(np.asarray(directions, dtype=np.float64))
        mc = self.centers @ C.T / self.spread  # (K, R)
        return _pairwise_slopes(_log_softmax(self._logits(Z)), np.broadcast_to(mc, (Z.shape[0], *mc.shape)), scaled)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "centers": self.centers, "spread": self.spread}


class NearestRowPredictor(_Predictor):
    """A clustering without a rule for new points: the label of the nearest of the rows it was
    fitted on (:class:`sklearn.neighbors.NearestNeighbors`, in float64; noise, -1, stays noise).
    Each of the fitted rows gets its own label back.

    Parameters
    ----------
    rows : array-like of shape (n, d)
        The rows the clustering was fitted on (float32 rows are kept so and widened exactly).
    labels : array-like of shape (n,)
        Their labels.
    """

    kind = "nearest_row"
    rule = "the label of the nearest of the rows the clustering was fitted on"

    def __init__(self, rows, labels):
        self.rows = check_matrix(rows, "the fitted rows", dtype=np.float32 if getattr(rows, "dtype", None) == np.float32
                                 else np.float64)
        self.labels = np.asarray(labels, dtype=np.int64).ravel()
        if self.labels.shape != (len(self.rows),):
            raise InvalidInputError(f"a nearest-row rule needs one label per fitted row; got {self.labels.size} labels "
                                    f"for {len(self.rows)} rows.")
        self._nn = None

    @property
    def n_clusters(self) -> int:
        return int(self.labels.max()) + 1 if self.labels.size and self.labels.max() >= 0 else 0

    def __getstate__(self) -> dict:  # picklable (Dask tasks) without the fitted neighbour index
        return {**self.__dict__, "_nn": None}

    def predict(self, Z, check_input: bool = True, block_rows: int = BLOCK_ROWS) -> np.ndarray:
        """The label of the nearest fitted row of each row of ``Z`` (n, d), int64."""
        if self._nn is None:
            from sklearn.neighbors import NearestNeighbors

            self._nn = NearestNeighbors(n_neighbors=1).fit(np.asarray(self.rows, dtype=np.float64))
        nn, labels = self._nn, self.labels
        return _in_blocks(lambda block: labels[nn.kneighbors(block, return_distance=False)[:, 0]],
                          _rows(Z, check_input), check_input, block_rows)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "rows": self.rows, "labels": self.labels}


PREDICTORS = (MixtureHead, EncoderHead, NearestCentreHead, NearestRowPredictor)


def predictor_from_dict(d: dict):
    """The predictor a ``to_dict()`` described (its ``kind`` names the class)."""
    for cls in PREDICTORS:
        if cls.kind == d.get("kind"):
            try:
                return cls.from_dict(d)
            except TypeError as exc:  # an entry missing or unknown
                raise InvalidInputError(f"a {cls.kind} cluster predictor cannot be built from {sorted(d)}: "
                                        f"{exc}.") from None
    raise InvalidInputError(f"no cluster predictor of kind {d.get('kind')!r}; the kinds are "
                            f"{[cls.kind for cls in PREDICTORS]}.")


def _mixture_of(c) -> bool:
    return c.means is not None and c.covariances is not None and np.ndim(c.covariances) == 3


def predictor_of(c, fitted_rows=None, fitted_labels=None):
    """The rule that assigns a new latent row to one of the clusters of ``c`` (a fitted
    :class:`pipeline.clustering.Clustering`).

    A Gaussian mixture (``gmm``): :class:`MixtureHead`; the encoder's head: :class:`EncoderHead`;
    k-means on the latents as given: :class:`NearestCentreHead`; any other clustering (spectral,
    DBSCAN, best_of, scaled k-means, one a user's ``_target_`` returns): :class:`NearestRowPredictor`
    over ``fitted_rows``, the rows it was fitted on (n, d), with ``fitted_labels`` (default
    ``c.labels``), which must then be given (or a function returning those rows, called only then).
    """
    if c.method == "encoder" and _mixture_of(c):
        return EncoderHead(c.weights, c.means, c.covariances, (c.scores or {}).get("head_labels"))
    if c.method == "gmm" and _mixture_of(c):
        return MixtureHead(c.weights, c.means, c.covariances)
    if c.method == "kmeans" and c.centers is not None and not (c.scores or {}).get("scaled"):
        return NearestCentreHead(c.centers)
    labels = c.labels if fitted_labels is None else fitted_labels
    fitted_rows = fitted_rows() if callable(fitted_rows) else fitted_rows
    if fitted_rows is None or len(fitted_rows) != len(labels):
        raise InvalidInputError(f"clustering {c.method!r} has no rule for new rows; assigning them needs the rows it "
                                "was fitted on.")
    return NearestRowPredictor(fitted_rows, labels)


def pooled_spread(Z, labels, centers) -> float:
    """The pooled within-cluster variance per dimension of ``Z`` around ``centers`` (labels < 0 left out)."""
    Z = np.asarray(Z, dtype=np.float64)
    labels = np.asarray(labels)
    ok = labels >= 0
    if not ok.any():
        return 1.0
    resid = Z[ok] - np.asarray(centers, dtype=np.float64)[labels[ok]]
    value = float((resid ** 2).mean())
    return value if value > 0 else 1.0


def head_of(method: str, *, weights=None, means=None, covariances=None, centers=None, scaled: bool = False,
            Z=None, labels=None) -> tuple[object | None, str]:
    """(the head of a fitted reference clustering, or None; a sentence on which rule it is or why none).

    ``method``: the clustering's name (``gmm``, ``encoder``, ``kmeans`` ...); the arrays are its
    fitted parameters; ``Z``, ``labels`` give a k-means head its spread. A head has a posterior
    (``predict_proba``): the nearest-row rule of other clusterings is none."""
    if means is not None and covariances is not None and np.ndim(covariances) == 3 and method in ("gmm", "encoder"):
        rule = "the GMM's most probable component" if method == "gmm" else "the encoder's mixture prior (its head)"
        return MixtureHead(weights, means, covariances), rule
    if method == "kmeans" and centers is not None and not scaled:
        spread = pooled_spread(Z, labels, centers) if Z is not None and labels is not None else None
        return NearestCentreHead(centers, spread), "the nearest k-means centre"
    if method == "kmeans" and scaled:
        return None, "k-means on standardised latents assigns new points in its own scaled space"
    return None, (f"{method} has no rule that assigns a new point to a cluster (only the points it was fitted on "
                  "have clusters)")
