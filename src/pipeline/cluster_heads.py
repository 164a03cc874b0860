"""The reference clustering's own assignment rule as a model head (issue 48).

Yeh et al.'s completeness (2020, Def. 3.1) and TCAV (Kim et al. 2018) both ask a model *head*
about latents: which cluster a latent point falls in, and how that answer changes along a
direction. A clustering that has a rule for new points is such a head:

* :class:`MixtureHead`: a Gaussian mixture (the GMM reference, or VaDE's mixture prior for
  ``clustering=encoder``): ``p(k | z) ∝ w_k N(z; μ_k, Σ_k)``, the most probable component;
* :class:`NearestCentreHead`: k-means, the nearest centre; as a posterior, the isotropic
  equal-weight mixture that k-means is the hard limit of, ``p(k | z) ∝ exp(-‖z - μ_k‖² / (2 s²))``
  with ``s²`` the clusters' pooled within-cluster variance per dimension.

Spectral clustering, DBSCAN and a chosen ``best_of`` have no rule for new points:
:func:`head_of` returns None and says why. Pure: arrays in, arrays out.
"""

from __future__ import annotations

import numpy as np

from pipeline.validation import InvalidInputError, check_matrix


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    top = logits.max(axis=1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))


def _pairwise_slopes(post: np.ndarray, a: np.ndarray, block: int = 256) -> np.ndarray:
    """``out[n, k, r] = Σ_j post[n, j] (a[n, k, r] - a[n, j, r])`` (rows in blocks)."""
    n, K, R = a.shape
    out = np.empty((n, K, R))
    for i in range(0, n, block):
        p, x = post[i:i + block], a[i:i + block]
        for k in range(K):
            out[i:i + block, k, :] = np.einsum("nj,njr->nr", p, x[:, k:k + 1, :] - x)
    return out


class MixtureHead:
    """A full-covariance Gaussian mixture as a head.

    Parameters
    ----------
    weights : array-like of shape (K,)
    means : array-like of shape (K, d)
    covariances : array-like of shape (K, d, d)
        Symmetric positive definite.
    """

    kind = "mixture"

    def __init__(self, weights, means, covariances):
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
                low = np.linalg.cholesky(cov)
            except np.linalg.LinAlgError:
                raise InvalidInputError(f"the covariance of mixture component {k} is not positive definite, so the "
                                        "mixture assigns no point to it; refit the clustering (a larger "
                                        "clustering.params.reg_covar).") from None
            from scipy.linalg import solve_triangular

            chol[k] = solve_triangular(low, np.eye(d), lower=True).T  # precision Cholesky (scikit-learn's)
        self.covariances = covs
        self.precisions_cholesky = chol
        with np.errstate(divide="ignore"):
            self._shift = (np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(axis=1) - 0.5 * d * np.log(2 * np.pi)
                           + np.log(self.weights))

    @property
    def n_clusters(self) -> int:
        return len(self.weights)

    def _log_joint(self, Z: np.ndarray) -> np.ndarray:
        out = np.empty((Z.shape[0], self.n_clusters))
        for k in range(self.n_clusters):
            y = (Z - self.means[k]) @ self.precisions_cholesky[k]
            out[:, k] = -0.5 * np.einsum("ij,ij->i", y, y) + self._shift[k]
        return out

    def predict(self, Z) -> np.ndarray:
        """The most probable component of each row of ``Z`` (n, d), int64 (scikit-learn's answer)."""
        from sklearn.mixture import GaussianMixture

        from pipeline.clustering import mixture_predict

        Z = check_matrix(Z, "Z", min_rows=0)
        gm = GaussianMixture(n_components=self.n_clusters, covariance_type="full")
        gm.weights_, gm.means_, gm.covariances_ = self.weights, self.means, self.covariances
        gm.precisions_cholesky_, gm.n_features_in_ = self.precisions_cholesky, self.means.shape[1]
        return mixture_predict(gm, Z)

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

    def log_posterior_slopes(self, Z, directions) -> np.ndarray:
        """``d/dε log p(k | z + ε c)`` for every row ``z`` of ``Z`` (n, d), cluster k and direction ``c``
        (rows of ``directions``, (R, d)): shape (n, K, R). With ``a_j = -(z - μ_j)ᵀ Σ_j⁻¹ c`` (the
        slope of component j's log density), the slope is ``Σ_{j≠k} p(j | z) (a_k - a_j)``: summed
        term by term, so a point deep inside its cluster (``p(k | z) ≈ 1``) keeps the sign of its
        small slope instead of the rounding of ``a_k - Σ_j p_j a_j``."""
        Z = check_matrix(Z, "Z", min_rows=0)
        C = np.atleast_2d(np.asarray(directions, dtype=np.float64))
        post = self.predict_proba(Z)  # (n, K)
        a = np.empty((Z.shape[0], self.n_clusters, C.shape[0]))
        for j in range(self.n_clusters):
            L = self.precisions_cholesky[j]
            Pc = L @ (L.T @ C.T)  # Σ_j⁻¹ c, (d, R)
            a[:, j, :] = -(Z @ Pc - self.means[j] @ Pc)
        return _pairwise_slopes(post, a)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "weights": self.weights, "means": self.means, "covariances": self.covariances}


class NearestCentreHead:
    """k-means' rule as a head: the nearest centre; its posterior (for slopes) that of the isotropic
    equal-weight mixture with variance ``spread`` per dimension (k-means is its hard limit).

    Parameters
    ----------
    centers : array-like of shape (K, d)
    spread : float, optional
        The within-cluster variance per dimension (default 1).
    """

    kind = "nearest_center"

    def __init__(self, centers, spread: float | None = None):
        self.centers = check_matrix(centers, "centres")
        self.spread = float(spread) if spread is not None else 1.0
        if not (np.isfinite(self.spread) and self.spread > 0):
            raise InvalidInputError(f"the spread of a nearest-centre head must be a positive number, got {spread!r}.")

    @property
    def n_clusters(self) -> int:
        return len(self.centers)

    def predict(self, Z) -> np.ndarray:
        from pipeline.clustering import nearest_centers

        return nearest_centers(check_matrix(Z, "Z", min_rows=0), self.centers)[0]

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

    def log_posterior_slopes(self, Z, directions) -> np.ndarray:
        """``d/dε log p(k | z + ε c)``, shape (n, K, R): ``Σ_{j≠k} p_j (μ_k - μ_j) · c / s²``."""
        Z = check_matrix(Z, "Z", min_rows=0)
        C = np.atleast_2d(np.asarray(directions, dtype=np.float64))
        post = self.predict_proba(Z)
        mc = self.centers @ C.T / self.spread  # (K, R)
        return _pairwise_slopes(post, np.broadcast_to(mc, (Z.shape[0], *mc.shape)))

    def to_dict(self) -> dict:
        return {"kind": self.kind, "centers": self.centers, "spread": self.spread}


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
    fitted parameters; ``Z``, ``labels`` give a k-means head its spread."""
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
