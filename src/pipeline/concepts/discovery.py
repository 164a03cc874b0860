"""Concepts discovered in the representation itself, and their names.

When no concept examples are given, concepts come from a factorisation of the activations
``Z`` (n, m) into ``k`` parts, as in ACE (Ghorbani et al., 2019) and CRAFT (Fel et al., 2023):

* ``method="nmf"`` for non-negative activations (CNN features after a ReLU): ``Z ≈ U H``
  with ``U, H ≥ 0`` (scikit-learn ``NMF``, ``nndsvda`` start: deterministic). Parts add up,
  each a pattern that is present or absent, which is what makes NMF concepts readable.
* ``method="ica"`` for signed latents (a VAE's means, a contrastive head): FastICA
  (scikit-learn ``FastICA``, unit-variance whitening) finds the directions whose
  coordinates are most non-Gaussian and mutually independent. NMF cannot factor signed
  data, and sparse PCA / dictionary learning give sparse *codes* that are not a fixed linear
  map of ``z`` (a lasso per point), so their coordinate would not be a direction; ICA's
  sources are ``(z - mean) W`` exactly, a linear read-out like a CAV, and heavy-tailed
  independent factors are the signed analogue of NMF's "parts".

Each concept is a direction ``c_j`` (a row of ``directions_``, unit length) whose coordinate
``⟨c_j, z⟩`` feeds the trees exactly like a CAV's (:func:`pipeline.concepts.projection.project`).
For NMF the directions are the rows of the pseudo-inverse read-out ``(H⁺)ᵀ`` (the
least-squares coefficients of ``z`` on the parts); for ICA the unmixing rows. Signs are
oriented so that a larger coordinate means "more of the concept" (the heavier tail up).

:func:`name_concepts` names each concept by its strongest association with whatever binary
labels the run knows (one-vs-rest class labels, attribute or concept tables): the label
with the largest ROC AUC of the concept coordinate, e.g. ``≈sandal`` with AUC 0.93.
"""

from __future__ import annotations

from numbers import Integral
from typing import Mapping, Sequence

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from pipeline.validation import InvalidInputError, check_matrix, check_n_features

METHODS = ("auto", "nmf", "ica")


class ConceptDiscovery(TransformerMixin, BaseEstimator):
    """Find ``n_concepts`` concept directions in activations ``Z``.

    Parameters
    ----------
    n_concepts : int, default=10
        Number of concepts, between 1 and the dimension of ``Z``.
    method : {"auto", "nmf", "ica"}, default="auto"
        ``auto``: NMF when every activation is >= 0, else ICA.
    max_iter : int, default=1000
    random_state : int, optional

    Attributes
    ----------
    method_ : str
        The method used.
    directions_ : ndarray of shape (n_concepts, n_features)
        Unit concept directions (the CAV matrix C of the discovered concepts).
    components_ : ndarray of shape (n_concepts, n_features)
        The factors (NMF parts H, or ICA mixing columns), oriented like ``directions_``.
    importance_ : ndarray of shape (n_concepts,)
        Share of the activations' total variance along each concept's coordinate times its
        factor (NMF: share of ``‖U H‖²``; ICA: share of the reconstructed variance).
    """

    _parameter_constraints = {
        "n_concepts": [Interval(Integral, 1, None, closed="left")],
        "method": [StrOptions(set(METHODS))],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(self, n_concepts: int = 10, method: str = "auto", max_iter: int = 1000, random_state=None):
        self.n_concepts = n_concepts
        self.method = method
        self.max_iter = max_iter
        self.random_state = random_state

    def fit(self, Z, y=None) -> "ConceptDiscovery":
        """Factor ``Z`` (n_samples, n_features); ``y`` is ignored."""
        Z = check_matrix(Z, "Z", min_rows=2)
        if isinstance(self.n_concepts, Integral) and not isinstance(self.n_concepts, bool) and not (
                1 <= self.n_concepts <= Z.shape[1]):
            raise InvalidInputError(
                f"n_concepts={self.n_concepts} must be between 1 and the dimension of the activations "
                f"({Z.shape[1]}): a factorisation finds at most as many independent directions as the representation "
                f"has. Set concepts.params.n_concepts to a value in [1, {Z.shape[1]}].")
        self._validate_params()
        negative = float(Z.min()) < 0
        method = ("ica" if negative else "nmf") if self.method == "auto" else self.method
        if method == "nmf" and negative:
            raise InvalidInputError(
                f"method='nmf' (non-negative matrix factorisation) needs non-negative activations, but Z has values "
                f"down to {Z.min():.4g} (signed latents, e.g. a VAE's means). Use method='ica' (independent "
                "components, for signed latents) or method='auto', or take activations after a ReLU.")
        self.method_ = method
        self.n_features_in_ = Z.shape[1]
        self._fit_nmf(Z) if method == "nmf" else self._fit_ica(Z)
        return self

    def _fit_nmf(self, Z: np.ndarray) -> None:
        from sklearn.decomposition import NMF

        model = NMF(n_components=int(self.n_concepts), init="nndsvda", max_iter=int(self.max_iter),
                    random_state=self.random_state)
        U = model.fit_transform(Z)
        H = model.components_
        C = np.linalg.pinv(H).T  # Z Cᵀ = Z H⁺: least-squares coefficients of Z on the parts
        energy = np.array([np.linalg.norm(np.outer(U[:, j], H[j])) ** 2 for j in range(H.shape[0])])
        self._finish(C, H, energy)

    def _fit_ica(self, Z: np.ndarray) -> None:
        import warnings

        from sklearn.decomposition import FastICA
        from sklearn.exceptions import ConvergenceWarning

        model = FastICA(n_components=int(self.n_concepts), whiten="unit-variance", max_iter=int(self.max_iter),
                        random_state=self.random_state)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            S = model.fit_transform(Z)
        W, A = model.components_, model.mixing_.T  # S = (Z - mean) Wᵀ; Z - mean ≈ S A
        skew = ((S - S.mean(axis=0)) ** 3).mean(axis=0)
        sign = np.where(skew < 0, -1.0, 1.0)  # the heavier tail up: large = "expresses the concept"
        energy = (S.var(axis=0)) * (A ** 2).sum(axis=1)
        self._finish(W * sign[:, None], A * sign[:, None], energy)

    def _finish(self, C: np.ndarray, factors: np.ndarray, energy: np.ndarray) -> None:
        norms = np.linalg.norm(C, axis=1)
        norms[norms == 0] = 1.0
        self.directions_ = C / norms[:, None]
        self.components_ = factors
        total = energy.sum()
        self.importance_ = energy / total if total > 0 else np.full(len(energy), 1.0 / len(energy))

    def transform(self, Z) -> np.ndarray:
        """Concept coordinates ``Z Cᵀ``, shape (n_samples, n_concepts)."""
        check_is_fitted(self, "directions_")
        Z = check_matrix(Z, "Z", min_rows=0)
        check_n_features(Z, self.n_features_in_, "Z")
        return Z @ self.directions_.T


def top_examples(coords, n: int = 8) -> np.ndarray:
    """Row indices of the ``n`` examples expressing each concept most, shape (n_concepts, min(n, n_samples))."""
    S = check_matrix(coords, "coords")
    k = min(int(n), S.shape[0])
    return np.argsort(-S, axis=0, kind="stable")[:k].T


def label_table(y, class_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """One-vs-rest binary columns of the classes in ``y`` (negative ints = unknown, left out)."""
    y = np.asarray(y)
    known = y >= 0 if y.dtype.kind in "iu" else np.ones(len(y), dtype=bool)
    out = {}
    for c in np.unique(y[known]):
        named = class_names is not None and y.dtype.kind in "iu" and 0 <= int(c) < len(class_names)
        col = np.where(known, (y == c).astype(float), np.nan)
        out[str(class_names[int(c)]) if named else str(c)] = col
    return out


def concept_associations(coords, labels: Mapping[str, np.ndarray]) -> list[tuple[str, float]]:
    """For each concept (column of ``coords``), the label whose ROC AUC of the concept
    coordinate is largest, and that AUC. ``labels``: name -> binary column (1/0, NaN = unknown)."""
    from sklearn.metrics import roc_auc_score

    S = check_matrix(coords, "coords")
    if not labels:
        raise InvalidInputError("naming discovered concepts needs at least one label column (class labels, an "
                                "attribute table or a concept table); give names with concepts.params.names.")
    out = []
    for j in range(S.shape[1]):
        best = ("", float("nan"))
        for name, col in labels.items():
            col = np.asarray(col, dtype=float)
            if col.shape[0] != S.shape[0]:
                raise InvalidInputError(f"label column {name!r} has {col.shape[0]} rows but there are {S.shape[0]} "
                                        "concept coordinates.")
            used = np.isfinite(col)
            y = col[used]
            if np.unique(y).size < 2:
                continue
            auc = float(roc_auc_score(y, S[used, j]))
            if not best[0] or auc > best[1]:
                best = (name, auc)
        out.append(best)
    return out


# Left out of text names besides scikit-learn's English stop words: the stems of contractions that the
# tokenizer leaves behind ("don't" -> "don") and the residue of URLs, e-mail addresses and HTML (&nbsp;).
EXTRA_STOP_WORDS = ("don", "doesn", "didn", "isn", "wasn", "aren", "weren", "won", "wouldn", "couldn", "shouldn",
                    "haven", "hasn", "hadn", "ll", "ve", "com", "www", "http", "https", "html", "htm", "nbsp", "org",
                    "net", "mailto")


def distinctive_words(texts: Sequence[str], top, n_words: int = 3, stop_words="english") -> list[list[str]]:
    """The ``n_words`` most distinctive words of each concept's top documents (class-based TF-IDF).

    ``top``: per concept, the row indices of its top documents (e.g. :func:`top_examples`). Each
    concept's documents are pooled into one "class document"; a word's weight is its frequency
    there times ``log(1 + A / f)``, with ``f`` its frequency in the whole corpus and ``A`` the mean
    number of words per class document (Grootendorst 2022, BERTopic's c-TF-IDF), so words common
    everywhere ("the", a mailing list's footer) sink and words of those documents rise. Words of
    three or more letters; English stop words (``stop_words="english"``: scikit-learn's list plus
    :data:`EXTRA_STOP_WORDS`) left out; HTML entities decoded first (scikit-learn ``CountVectorizer``).
    """
    import html

    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, CountVectorizer

    if stop_words == "english":
        stop_words = sorted(ENGLISH_STOP_WORDS | set(EXTRA_STOP_WORDS))
    texts = [html.unescape(str(t)) for t in texts]
    top = [np.asarray(t, dtype=np.int64) for t in top]
    vec = CountVectorizer(stop_words=stop_words, token_pattern=r"(?u)\b[^\W\d_]{3,}\b", lowercase=True)
    try:
        counts = vec.fit_transform(texts)
    except ValueError:  # no word of three letters anywhere (empty vocabulary)
        return [[] for _ in top]
    words = vec.get_feature_names_out()
    corpus = np.asarray(counts.sum(axis=0)).ravel().astype(float)
    classes = np.vstack([np.asarray(counts[t].sum(axis=0)).ravel() for t in top]).astype(float)
    A = max(classes.sum(axis=1).mean(), 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        tf = classes / np.maximum(classes.sum(axis=1, keepdims=True), 1.0)
        score = tf * np.log1p(A / np.maximum(corpus, 1.0))[None, :]
    out = []
    for row in score:
        order = np.argsort(-row, kind="stable")
        out.append([str(words[i]) for i in order[:int(n_words)] if row[i] > 0])
    return out


def top_columns(coords, X, feature_names: Sequence[str] | None = None, n: int = 2) -> list[list[str]]:
    """The ``n`` data columns each concept coordinate correlates with most, signed: ``proline+``
    (the coordinate grows with the column), ``alcohol-`` (it falls). Constant columns are skipped."""
    S = check_matrix(coords, "coords")
    X = check_matrix(X, "X")
    if X.shape[0] != S.shape[0]:
        raise InvalidInputError(f"the data have {X.shape[0]} rows but there are {S.shape[0]} concept coordinates.")
    names = list(feature_names) if feature_names is not None else [f"x{j}" for j in range(X.shape[1])]
    Xc, Sc = X - X.mean(axis=0), S - S.mean(axis=0)
    xs, ss = np.linalg.norm(Xc, axis=0), np.linalg.norm(Sc, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = (Sc.T @ Xc) / np.outer(ss, xs)
    corr = np.where(np.isfinite(corr), corr, 0.0)
    out = []
    for row in corr:
        order = np.argsort(-np.abs(row), kind="stable")
        out.append([f"{names[j]}{'+' if row[j] > 0 else '-'}" for j in order[:int(n)] if row[j] != 0])
    return out


def unique_names(names: Sequence[str], fallback: str = "c") -> list[str]:
    """``names`` made unique (repeats get ``#2``, ``#3``); an empty name becomes ``c<j+1>``."""
    out = []
    for j, n in enumerate(names):
        base = str(n) or f"{fallback}{j + 1}"
        name, k = base, 2
        while name in out:
            name, k = f"{base}#{k}", k + 1
        out.append(name)
    return out


def association_text(label: str, auc: float, min_auc: float = 0.6) -> str:
    """``≈ Sneaker, AUC .96`` (the label a concept separates best), or ``none (best AUC .55)``."""
    if not label or auc != auc:
        return ""
    text = f"{auc:.2f}".lstrip("0") if auc < 1 else "1.00"
    return f"≈ {label}, AUC {text}" if auc >= min_auc else f"none (best: {label}, AUC {text})"


def name_concepts(automatic: Sequence[str], names: Mapping[str, str] | None = None) -> list[str]:
    """The concepts' final names: the ``automatic`` names (made unique) with the renames in
    ``names`` applied (keys: the automatic name or ``concept_j``, by position)."""
    auto = unique_names(automatic)
    names = dict(names or {})
    ids = [f"concept_{j}" for j in range(len(auto))]
    unknown = [k for k in names if k not in auto and k not in ids]
    if unknown:
        raise InvalidInputError(
            f"concepts.params.names renames {unknown}, which are not discovered concepts; the concepts are "
            f"{auto} (or by position {ids[0]}..{ids[-1]}). Use one of those names as the key, e.g. "
            f"names: {{{auto[0]!r}: my_name}}.")
    out = [str(names.get(a, names.get(i, a))) for a, i in zip(auto, ids)]
    if len(set(out)) != len(out):
        raise InvalidInputError(f"concepts.params.names gives two concepts the same name: {out}; names must be unique.")
    return out
