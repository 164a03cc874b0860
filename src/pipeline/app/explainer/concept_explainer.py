"""``ConceptExplainer``: a finished run applied to new data (docs/explain.md).

    from pipeline import ConceptExplainer
    ex = ConceptExplainer.load("outputs/runs/2026-11-27/09-00-00")   # a run, or a copied explainer folder
    ex.explain(images)            # DataFrame: reference cluster, each tree's cluster, leaf, rule, ...
    ex.predict(images, tree="concept_mmdt")
    ex.transform(images)          # the coordinates the trees cut on (Z Cᵀ, or the latents)
    ex.save("my_explainer/")      # the portable bundle (pipeline.app.explainer.explainer_bundle)

scikit-learn conventions: fitted by the run (attributes end in ``_``), ``transform`` /
``predict`` take an array-like of inputs and return arrays, nothing is refitted. Inputs are
what the run's encoder takes: images (n, H, W[, C]), texts (a list of str), rows (an array,
taken in the run's column order, or a DataFrame whose columns are found by name; a mismatch is
an error naming the missing and extra columns, ``positional=True`` takes them in order), or,
with ``latents=True``, the encoder's outputs. Inputs unlike the training data (another scale,
other units) are warned about with the share of rows and the worst features
(:mod:`pipeline.app.explainer.input_drift`). The encoder is loaded on first use, from the checkpoint or
pretrained weights the bundle names, after their sha256 is checked.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from pipeline.app.explainer.explainer_bundle import Bundle, read_bundle, write_bundle
from pipeline.cluster_heads import EncoderHead
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)


class ConceptExplainer:
    """The explainer of one finished run (load it with :meth:`load`)."""

    def __init__(self, bundle: Bundle, models_dir: str | None = None):
        self.bundle_ = bundle
        self.models_dir = models_dir
        doc = bundle.doc
        self.feature_names_ = list(doc["features"]["names"])
        self.tree_names_ = list(bundle.trees)
        self.trees_ = dict(bundle.trees)
        self.has_concepts_ = doc["features"]["space"] == "concepts"
        self.units_ = self._units()
        self._encoder = None
        self._predictor = None  # the reference clustering's predictor, built on first use

    # ------------------------------------------------------------------ files
    @classmethod
    def load(cls, path, models_dir: str | None = None) -> "ConceptExplainer":
        """The explainer saved with a run (``path``: the run directory or a bundle folder, such as a
        copied ``<run>/explainer/``), every checksum verified. ``models_dir``: where to look for the
        encoder checkpoint when it is no longer at the recorded path (e.g. another machine's models/)."""
        return cls(read_bundle(path), models_dir=models_dir)

    def save(self, path, copy_weights: bool = False) -> Path:
        """Write the portable bundle to the new folder ``path``. The encoder is referenced (checkpoint
        path + sha256, or pretrained weights id + sha256), not copied, unless ``copy_weights=True``."""
        checkpoint = None
        enc = self.bundle_.doc["encoder"]
        if copy_weights and enc.get("checkpoint"):
            checkpoint = self._checkpoint_path()
        if not copy_weights and enc.get("copied"):
            # a bundle holding its weights saved without them: reference the copy it came with
            self.bundle_.doc["encoder"] = {**enc, "checkpoint": str(self._checkpoint_path()), "copied": None}
        try:
            return write_bundle(self.bundle_, Path(path), copy_weights=copy_weights, checkpoint=checkpoint)
        finally:
            self.bundle_.doc["encoder"] = enc

    def __repr__(self) -> str:
        doc = self.bundle_.doc
        return (f"ConceptExplainer({doc['run']['dataset']}, encoder={doc['encoder']['name']}, "
                f"reference={doc['reference']['method']}, trees={self.tree_names_}, "
                f"features={len(self.feature_names_)} {doc['features']['space']})")

    # ------------------------------------------------------------------ the encoder
    def _checkpoint_path(self) -> Path:
        enc = self.bundle_.doc["encoder"]
        candidates = []
        if enc.get("copied") and self.bundle_.path is not None:
            candidates.append(self.bundle_.path / enc["copied"])
        candidates.append(Path(enc["checkpoint"]))
        if self.models_dir and enc.get("checkpoint_portable"):
            from pipeline.app.stores.cache import localize

            candidates.append(Path(localize(enc["checkpoint_portable"], {"models_dir": self.models_dir})))
        for p in candidates:
            if p.is_file():
                return p
        raise InvalidInputError(
            f"the {enc['name']} encoder checkpoint this explainer needs is missing: looked for "
            f"{', '.join(str(p) for p in candidates)} (sha256 {str(enc.get('checkpoint_sha256'))[:12]}...). Copy the "
            "checkpoint there, pass models_dir=<folder holding <encoder>/<key>.pt> (ConceptExplainer.load(path, "
            "models_dir=...) or paths.models_dir=... on the command line), or save the explainer with "
            "copy_weights=True on the machine that has it. Inputs that are already latents work without it "
            "(latents=True).")

    def encoder_(self):
        """The run's encoder (loaded once; checkpoint or weights sha256 checked)."""
        if self._encoder is not None:
            return self._encoder
        from pipeline.app.stores.artifacts import EncodeArtifact
        from pipeline.app.stages.encode import build, fitted_encoder

        enc = self.bundle_.doc["encoder"]
        cfg = {"encoder": enc["config"], "paths": {"models_dir": self.models_dir or ""}}
        if enc.get("checkpoint"):
            path = self._checkpoint_path()
            art = EncodeArtifact(Z=np.zeros((0, 0)), latent_names=[], checkpoint=str(path),
                                 checkpoint_sha256=enc["checkpoint_sha256"])
            from pipeline.app.stages.encode import _checkpoint_sha

            if _checkpoint_sha(path) != enc["checkpoint_sha256"]:
                raise InvalidInputError(
                    f"the encoder checkpoint {path} is not the one this explainer was saved with: its sha256 differs "
                    f"from the recorded {enc['checkpoint_sha256'][:12]}... (retrained or replaced since). The latents "
                    "would not be the run's. Use the original checkpoint, or rerun the pipeline and explain with the "
                    "new run.")
            encoder = fitted_encoder(cfg, art)
        else:
            encoder = build(cfg)
            if getattr(encoder, "may_substitute_model", False):
                encoder.fit(None)
                used = encoder.model_used_.split(" (")[0]
                if enc.get("model_used") and used != enc["model_used"]:
                    raise InvalidInputError(
                        f"the run embedded its texts with {enc['model_used']}, but here the {enc['name']} encoder "
                        f"loads {used}; the latents would not be comparable. Install or point to the same model "
                        f"(encoder.params.model_name) and load again.")
        self._encoder = encoder
        return encoder

    # ------------------------------------------------------------------ inputs
    def _check_inputs(self, inputs, positional: bool = False, drift: bool = False):
        """The inputs as the encoder takes them, or one paragraph on what is wrong. ``drift``:
        warn when they do not look like the training data (once per call of the public method)."""
        spec = self.bundle_.doc["input"]
        kind = spec["kind"]
        try:
            import pandas as pd
        except ImportError:  # pragma: no cover
            pd = None
        if isinstance(inputs, str):
            inputs = [inputs]
        if pd is not None and isinstance(inputs, pd.Series):
            inputs = inputs.tolist()
        if kind == "text":
            if pd is not None and isinstance(inputs, pd.DataFrame):
                cols = [c for c in inputs.columns if inputs[c].dtype == object]
                if "text" in inputs.columns:
                    cols = ["text"]
                if len(cols) != 1:
                    raise InvalidInputError(f"this run's encoder ({self.bundle_.doc['encoder']['name']}) takes texts; "
                                            f"the DataFrame has {len(cols)} text columns {cols}: name one 'text'.")
                inputs = inputs[cols[0]].tolist()
            if not isinstance(inputs, (list, tuple)) or not all(isinstance(t, str) for t in inputs):
                raise InvalidInputError(self._kind_message("texts (a list of str)", inputs))
            return list(inputs)
        if pd is not None and isinstance(inputs, pd.DataFrame):
            inputs = self._by_name(inputs, positional)
        if isinstance(inputs, (list, tuple)) and inputs and all(isinstance(t, str) for t in inputs):
            raise InvalidInputError(self._kind_message(self._what(spec), inputs))
        arr = np.asarray(inputs)
        if arr.dtype.kind not in "biuf":
            raise InvalidInputError(self._kind_message(self._what(spec), inputs))
        shape = tuple(spec.get("shape") or ())
        if arr.ndim == len(shape) and arr.ndim >= 1 and tuple(arr.shape) == shape:
            arr = arr[None]  # one sample
        if kind == "image" and len(shape) == 3 and shape[-1] == 1 and arr.shape[1:] == shape[:2]:
            arr = arr[..., None]  # grey images without their channel axis
        if tuple(arr.shape[1:]) != shape:
            raise InvalidInputError(
                f"the inputs have shape {tuple(arr.shape)} (n, ...) but this run's {self.bundle_.doc['encoder']['name']} "
                f"encoder takes {self._what(spec)} of shape (n, {', '.join(map(str, shape))}). "
                + ("Resize the images to that size first (e.g. PIL's Image.resize) and keep the channels; "
                   f"python -m pipeline.explain does it with dataset.image_size={shape[0]} (dataset=files image "
                   "folders, dataset=digits). " if kind == "image" and shape else "Give the same columns, in the same order, as the run's data. ")
                + "Arrays that are already the encoder's latents go in with latents=True.")
        if spec.get("dtype") == "uint8" and arr.dtype != np.uint8:
            if arr.size and (np.nanmin(arr) < 0 or np.nanmax(arr) > 255):
                raise InvalidInputError(f"this run's images are uint8 pixel values (0..255); these inputs range "
                                        f"{np.nanmin(arr):.3g}..{np.nanmax(arr):.3g}. Scale them to 0..255.")
            if arr.size and np.nanmax(arr) <= 1.0:
                log.warning("the run's images are 0..255 but these inputs are all <= 1: if they were scaled to 0..1, "
                            "multiply by 255 first")
        if drift:  # in the units the run's data were given in (before a standardised table's z-scores)
            from pipeline.app.explainer.input_drift import check_drift

            a = self.bundle_.arrays
            check_drift(arr, a.get("input_bounds"), a.get("input_rms"), spec.get("feature_names"), "inputs")
        record = spec.get("standardized")
        if record:  # the run z-scored the table's columns (dataset.standardize): the same map, the run's mean and sd
            from pipeline.app.data.loading import apply_standardization

            arr = apply_standardization(arr, record)
        return arr

    def _by_name(self, df, positional: bool):
        """A DataFrame's columns in the run's order, found by name (the run's ``input.feature_names``);
        ``positional=True``, or a run or a DataFrame without column names, takes them in order."""
        import pandas as pd

        names = self.bundle_.doc["input"].get("feature_names")
        cols = [str(c) for c in df.columns]
        unnamed = isinstance(df.columns, pd.RangeIndex) and cols == [str(i) for i in range(len(cols))]
        if positional or unnamed or not names:
            return df.to_numpy()
        if len(set(cols)) != len(cols):
            twice = sorted({c for c in cols if cols.count(c) > 1})
            raise InvalidInputError(f"the DataFrame has the columns {twice} more than once; the run's columns are "
                                    "found by name, so each must appear once.")
        if cols == list(names):
            return df.to_numpy()
        missing, extra = [n for n in names if n not in cols], [c for c in cols if c not in names]
        if not missing and not extra:
            return df.set_axis(cols, axis=1)[list(names)].to_numpy()
        import difflib

        hints = []
        for m in missing:
            close = difflib.get_close_matches(m, extra, n=1, cutoff=0.5)
            if close:
                hints.append(f"{close[0]!r} for {m!r}?")
        raise InvalidInputError(
            "the columns of the inputs are not the run's (columns are found by name): "
            + (f"missing {missing}" if missing else "none missing")
            + (f"; not in the run {extra}" if extra else "")
            + (f" (renamed? {' '.join(hints)})" if hints else "")
            + f". The run's columns are {list(names)}. Rename or select them (a DataFrame: df.rename(columns=...), "
            "df[names]; python -m pipeline.explain: dataset.feature_names=[...] selects a table's columns), or take "
            "them in order with positional=True (positional=true on the command line) if they are the run's columns "
            "under other names.")

    @staticmethod
    def _what(spec) -> str:
        return {"image": "images", "table": "rows of a table", "tabular": "rows of a table", "text": "texts"}.get(spec["kind"], spec["kind"])

    def _kind_message(self, wanted: str, inputs) -> str:
        got = type(inputs).__name__
        if isinstance(inputs, (list, tuple)) and inputs:
            got += f" of {type(inputs[0]).__name__}"
        return (f"this run's {self.bundle_.doc['encoder']['name']} encoder takes {wanted}, but got {got}. Give inputs "
                "of the kind the run was fitted on (or the encoder's latents with latents=True).")

    # ------------------------------------------------------------------ the maths
    def embed(self, inputs, positional: bool = False) -> np.ndarray:
        """The encoder's latents (n, m) of raw ``inputs``."""
        from pipeline.app.stages.encode import embed

        return embed(self.encoder_(), self._check_inputs(inputs, positional, drift=True))["Z"]

    def _latents(self, inputs, latents: bool, positional: bool = False) -> np.ndarray:
        width = int(self.bundle_.doc["encoder"]["width"])
        if latents:  # as the encode stage hands them on (pipeline.app.stages.encode.embed): float32
            Z = np.asarray(inputs)
            if Z.dtype.kind not in "biuf":
                raise InvalidInputError(f"latents=True: expected numbers, shape (n, {width}); got {Z.dtype} values.")
            Z = Z.astype(np.float32)
        else:
            Z = self.embed(inputs, positional)
        if latents and (Z.ndim != 2 or Z.shape[1] != width):
            raise InvalidInputError(f"latents=True: expected the encoder's latents, shape (n, {width}); got "
                                    f"{Z.shape}.")
        if latents and not np.all(np.isfinite(Z)):
            raise InvalidInputError("latents=True: the latents hold NaN or inf values.")
        if latents:
            from pipeline.app.explainer.input_drift import check_drift

            a = self.bundle_.arrays
            check_drift(Z, a.get("latent_bounds"), a.get("latent_rms"), self.bundle_.doc["encoder"]["latent_names"],
                        "latents")
        return Z

    def _coordinates(self, Z: np.ndarray) -> np.ndarray:
        C = self.bundle_.arrays.get("cavs")
        if C is None:
            return np.asarray(Z, dtype=np.float64)
        from pipeline.concepts.projection import project

        return np.asarray(project(Z, C), dtype=np.float64)  # as the project stage (float32 latents stay so)

    def transform(self, inputs, latents: bool = False, positional: bool = False) -> np.ndarray:
        """The coordinates the trees cut on (n, d): concept coordinates Z Cᵀ (raw, as the trees
        use them), or the latents for a run without concepts."""
        return self._coordinates(self._latents(inputs, latents, positional))

    def reference_(self):
        """The reference clustering's predictor (:mod:`pipeline.cluster_heads`; built once), or None."""
        if self._predictor is None:
            from pipeline.app.explainer.explainer_bundle import reference_predictor

            self._predictor = reference_predictor(self.bundle_) or False
        return self._predictor or None

    def _reference(self, Z: np.ndarray, inputs=None, positional: bool = False) -> np.ndarray:
        """The reference cluster of each latent row of ``Z``: the run's own rule (an encoder head
        asks the encoder, given the raw ``inputs``); -1 where the bundle holds none."""
        predictor = self.reference_()
        if inputs is not None and self.bundle_.doc["reference"]["assign"] == EncoderHead.kind:
            raw = self._check_inputs(inputs, positional)
            if predictor is None:
                return np.asarray(self.encoder_().predict_clusters(raw), dtype=np.int64)
            return predictor.predict_inputs(self.encoder_(), raw)
        if predictor is None:
            return np.full(len(Z), -1, dtype=np.int64)
        return predictor.predict(np.asarray(Z, dtype=np.float64))

    def predict(self, inputs, tree: str | None = None, latents: bool = False, positional: bool = False) -> np.ndarray:
        """Cluster of every input: the reference clustering's (``tree=None``) or that of the tree
        named as in ``results.csv`` (``explainer`` column)."""
        Z = self._latents(inputs, latents, positional)
        if tree is None:
            return self._reference(Z, None if latents else inputs, positional)
        return self._tree(tree).predict(self._coordinates(Z))

    def _tree(self, name: str):
        if name not in self.trees_:
            raise InvalidInputError(f"this run has no tree {name!r}; its trees are {self.tree_names_}.")
        return self.trees_[name]

    def _units(self):
        from pipeline.concepts.units import units_from_dicts

        record = self.bundle_.doc["features"].get("display_units")
        if record is None:
            return None
        values = self.bundle_.arrays.get("percentile_values")
        X = values if values is not None else np.zeros((2, len(record)))
        return units_from_dicts(record, X)

    def display_values(self, X: np.ndarray) -> dict:
        """Concept columns in the run's units: ``P(name)``, ``name (percentile)`` or ``name``."""
        out = {}
        for j, name in enumerate(self.feature_names_):
            u = None if self.units_ is None else self.units_[j]
            kind = getattr(u, "kind", "raw")
            col = {"probability": f"P({name})", "percentile": f"{name} (percentile)"}.get(kind, name)
            out[col] = X[:, j] if u is None else np.asarray(u(X[:, j]), dtype=np.float64)
        return out

    def _shown(self, X: np.ndarray, units=None) -> np.ndarray:
        """``X`` in the run's display units (or ``units``, one per column), column by column."""
        units = self.units_ if units is None else units
        if units is None:
            return X
        return np.column_stack([X[:, j] if u is None else np.asarray(u(X[:, j]), dtype=np.float64)
                                for j, u in enumerate(units)]) if X.size else X

    def _change_texts(self, X: np.ndarray, delta: np.ndarray, row: str | None = None) -> list[str]:
        """Per row: ``"P(loop) 0.21 → 0.62, ..."``, largest change (in training σ) first; ``""`` for no move.
        Each concept in the units tree ``row``'s rules read it in: a concept whose cuts fall in a
        probability's tail reads in percentiles there (``vertical_line in bottom 59.8%``), and so
        does its change (``vertical_line percentile 41.2 → 60.1``)."""
        ok = np.all(np.isfinite(delta), axis=1)
        moved = np.where(ok[:, None], X + np.where(ok[:, None], delta, 0.0), X)
        tests = (self.bundle_.doc["trees"].get(row) or {}).get("printed_tests") or {} if row else {}
        fallen = {int(t["feature"]) for t in tests.values() if t.get("kind") == "units" and t.get("fallback")}
        units = None if self.units_ is None else [getattr(u, "fallback", None) or u if j in fallen else u
                                                  for j, u in enumerate(self.units_)]
        before, after = self._shown(X, units), self._shown(moved, units)
        labels = []
        for j, name in enumerate(self.feature_names_):
            kind = getattr(None if units is None else units[j], "kind", "raw")
            labels.append({"probability": f"P({name})", "percentile": f"{name} percentile"}.get(kind, name))
        size = np.abs(np.where(ok[:, None], delta, 0.0)) / self.bundle_.arrays["feature_scale"]
        order = np.argsort(-size, axis=1, kind="stable")
        out = []
        for i in range(len(X)):
            if not ok[i]:
                out.append("")
                continue
            out.append(", ".join(f"{labels[j]} {before[i, j]:.3g} → {after[i, j]:.3g}" for j in order[i]
                                 if delta[i, j] != 0))
        return out

    def _printed_rule_holds(self, row: str, X: np.ndarray, leaf: np.ndarray) -> np.ndarray:
        """Whether each sample satisfies its rule *as printed* (thresholds rounded to the shortest
        decimal that routes every training point as the tree does, in the run's units): False for a
        new sample lying between a printed threshold and the tree's exact cut (routed by the cut)."""
        from pipeline.trees.leaf_moves import leaf_paths
        from pipeline.trees.rules import weighted_sum

        tests = self.bundle_.doc["trees"][row].get("printed_tests")
        if tests is None:  # a bundle saved before the printed tests were: unknown, not "holds"
            return np.full(len(X), None, dtype=object)
        out = np.ones(len(X), dtype=bool)
        shown = self._shown(X)
        for node_leaf, path in leaf_paths(self.trees_[row]).items():
            rows = np.flatnonzero(leaf == node_leaf)
            if rows.size == 0:
                continue
            for node, right in path:
                test = tests.get(str(node))
                if test is None:
                    continue
                t = test["threshold"]
                if test["kind"] == "oblique":
                    cols = np.array([j for j, _ in test["terms"]], dtype=np.int64)
                    v = weighted_sum(X[rows], cols, np.array([w for _, w in test["terms"]], dtype=np.float64))
                elif test["kind"] == "units" and test.get("fallback"):
                    f = test["feature"]
                    v = np.asarray(self.units_[f].fallback(X[rows, f]), dtype=np.float64)
                elif test["kind"] == "units":
                    v = shown[rows, test["feature"]]
                else:
                    v = X[rows, test["feature"]]
                if test["flip"]:  # a decreasing map: left reads "> t", right "< t"
                    ok = v > t if not right else v < t
                else:
                    ok = v <= t if not right else v > t
                out[rows[~ok]] = False
        return out

    def explain(self, inputs, latents: bool = False, ids=None, positional: bool = False):
        """One row per input (a pandas DataFrame): ``row``, ``reference``, the concept values in the
        run's units, ``out_of_range`` (+ the concepts outside the training range), and per tree
        ``<tree>.cluster``, ``.leaf``, ``.rule`` (as the run printed it), ``.rule_holds`` (the sample
        satisfies the rule as printed; False: it lies between a printed decimal and the exact cut),
        ``.margin`` (distance to
        the nearest cut on the path, in training standard deviations), ``.to_cluster`` /
        ``.to_leaf`` / ``.change`` / ``.change_size`` (the smallest change of the coordinates, in
        training standard deviations, that moves the input to a leaf of another cluster).
        ``positional=True``: a DataFrame's columns are taken in order, not found by name."""
        import pandas as pd

        from pipeline.trees.leaf_moves import nearest_other_leaf, path_margins

        Z = self._latents(inputs, latents, positional)
        X = self._coordinates(Z)
        a = self.bundle_.arrays
        n = len(X)
        cols: dict = {"row": np.arange(n) if ids is None else np.asarray(ids)}
        if len(cols["row"]) != n:
            raise InvalidInputError(f"ids has {len(cols['row'])} entries for {n} inputs.")
        cols["reference"] = self._reference(Z, None if latents else inputs, positional)
        if self.has_concepts_:
            cols.update(self.display_values(X))
        outside = (X < a["feature_min"]) | (X > a["feature_max"])
        cols["out_of_range"] = outside.any(axis=1)
        cols["out_of_range_features"] = [", ".join(self.feature_names_[j] for j in np.flatnonzero(r)) for r in outside]
        scale = a["feature_scale"]
        for row in self.tree_names_:
            tree = self.trees_[row]
            rules = self.bundle_.doc["trees"][row]["rules"]
            leaf = tree.apply(X)
            cols[f"{row}.cluster"] = tree.label[leaf]
            cols[f"{row}.leaf"] = leaf
            cols[f"{row}.rule"] = [rules.get(str(int(v)), {}).get("text", "") for v in leaf]
            cols[f"{row}.rule_holds"] = self._printed_rule_holds(row, X, leaf)
            cols[f"{row}.margin"] = path_margins(tree, X, scale)[0]
            moves = nearest_other_leaf(tree, X, scale)
            cols[f"{row}.to_cluster"] = moves.label
            cols[f"{row}.to_leaf"] = moves.leaf
            cols[f"{row}.change"] = self._change_texts(X, moves.delta, row)
            cols[f"{row}.change_size"] = moves.distance
        return pd.DataFrame(cols)


__all__ = ["ConceptExplainer"]
