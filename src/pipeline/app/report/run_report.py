"""From a run's stage artifacts to what its report shows (pure: dicts in, strings / Figures out).

:func:`tree_data` gathers what annotates a tree (coordinates, reference, ground truth, class
names, the inputs for galleries); :func:`rules_text` and :func:`rules_json` give a tree's
simplified, annotated rules (and the raw ones) for ``trees/<row>.rules.txt`` / ``.json``;
:func:`tree_figure` the paper figure; :func:`run_report_html` the whole ``report.html``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from pipeline.app.data.budget import ANNOTATION_BYTES, SAMPLES
from pipeline.app.stores.artifacts import (ClusterArtifact, ConceptsArtifact, CounterfactualsArtifact, FitArtifact,
                                           LoadArtifact, ProjectArtifact)
from pipeline.app.report.stability import stability_text
from pipeline.trees.tree import ExplanationTree

if TYPE_CHECKING:  # matplotlib and pandas are imported only when a figure or report is made
    import pandas as pd
    from matplotlib.figure import Figure

    from pipeline.trees.tree import Reading

SAMPLE_ROWS = SAMPLES["annotation"]  # rows that annotate leaves when the coordinates are read from disk ...
SAMPLE_BYTES = ANNOTATION_BYTES  # ... at most this much of them as float64 (wide latents: fewer rows, at least 10,000)


def sample_rows_of(n: int, d: int) -> np.ndarray:
    """The sorted uniform sample of rows (seed 0) that annotates the trees of a run whose ``n`` × ``d``
    coordinates are read from disk: :data:`SAMPLE_ROWS` rows, fewer where they would take more than
    :data:`SAMPLE_BYTES` as float64. The report and the explainer bundle read the same rows."""
    size = min(n, SAMPLE_ROWS, max(10_000, SAMPLE_BYTES // (8 * max(d, 1))))
    return np.sort(np.random.default_rng(0).choice(n, size, replace=False))


def sampled_rows(X, rows: np.ndarray) -> np.ndarray:
    """The rows ``rows`` (sorted) of ``X`` (coordinates on disk) as float64, widened a block of
    8,192 rows at a time: no copy of the whole sample in the file's dtype beside it."""
    out = np.empty((rows.size, X.shape[1]))
    for i in range(0, rows.size, 8192):
        out[i:i + 8192] = X[rows[i:i + 8192]]
    return out


MAX_GALLERY_LEAVES = 40  # trees with more leaves get no per-leaf gallery (the page would be huge)


def tree_data(load: LoadArtifact, cluster: ClusterArtifact, project: ProjectArtifact) -> dict:
    """Keyword arguments for annotating a tree fitted on ``project.X``: ``X``, ``reference``,
    ``y``, ``class_names`` and, for galleries, ``kind``, ``data``, ``data_feature_names``.
    Entries whose length does not match the tree's rows are left out rather than misaligned."""
    from pipeline.app.data.chunked import held

    if held(project.X) is None:  # latents on disk: leaves annotated from a uniform sample of rows
        n_all = len(project.X)
        rows = sample_rows_of(n_all, project.X.shape[1])
        out = {"X": sampled_rows(project.X, rows), "reference": np.asarray(cluster.labels)[rows],
               "y": None if load.y is None else np.asarray(load.y)[rows], "sample_of": n_all,
               "class_names": list(load.class_names) if load.class_names is not None else None,
               "units": project.units, "units_kind": project.units_kind}
        return out
    X = np.asarray(project.X, dtype=float)
    n = len(X)

    def fits(v):
        return v is not None and len(v) == n

    out = {"X": X, "reference": np.asarray(cluster.labels) if fits(cluster.labels) else None,
           "y": load.y if fits(load.y) else None,
           "class_names": list(load.class_names) if load.class_names is not None else None,
           "units": project.units, "units_kind": project.units_kind}
    if project.measured is not None and fits(project.measured["values"]):
        out["measured"] = project.measured
    kind = load.kind
    images = load.images if load.images is not None else (load.X if kind == "image" else None)
    if images is not None and fits(images):  # image data, or a table that brings its images (digits)
        out.update(kind="image", data=images)
    elif kind == "text" and fits(load.texts):
        out.update(kind="text", data=load.texts)
    elif fits(load.X) and not anonymous(load.feature_names):
        # a table with named columns: each leaf shows the columns that set it apart; anonymous columns
        # (an .npy of embeddings, x0..x49) would only give means of meaningless axes, so no gallery
        out.update(kind="tabular", data=load.X, data_feature_names=load.feature_names)
    return out


_ANONYMOUS = re.compile(r"^(x|f|v|z|c|col|column|feature|dim|pc|latent|component|var)[_\[]?\d+\]?$", re.IGNORECASE)


def anonymous(feature_names) -> bool:
    """True when a table's columns carry no meaning a reader could use (none, or ``x0``, ``pc_3``, ``dim12``)."""
    return feature_names is None or all(_ANONYMOUS.match(str(n)) for n in feature_names)


def tree_annotations(data: dict | None) -> dict:
    keys = ("X", "reference", "y", "class_names", "units")
    return {k: data.get(k) for k in keys} if data else {}


def render_key(data: dict | None) -> dict:
    """:func:`tree_annotations` as a figure's cache key: probability and percentile maps by their
    parameters alone, since the column they rank is the key's own ``X`` (hashing each column again
    doubled the key's cost: 20 columns of 80 MB at 10M rows)."""
    out = tree_annotations(data)
    if out.get("units") is not None:
        out["units"] = [units_key(u, len(out["X"])) for u in out["units"]]
    return out


def units_key(u, n_rows: int):
    """A display map as a cache key, given that the column it ranks is the data's own."""
    ranks = u if getattr(u, "kind", None) == "percentile" else getattr(u, "fallback", None)
    if ranks is not None and len(getattr(ranks, "column", ())) != n_rows:
        return u  # ranks other rows than the key's X: the map itself
    if getattr(u, "kind", None) == "probability":
        return ("probability", u.slope, u.intercept, ranks is not None)
    if getattr(u, "kind", None) == "percentile":
        return ("percentile",)
    return u


def read_tree(fit: FitArtifact, data: dict | None = None) -> tuple[ExplanationTree, "Reading"]:
    """The tree of ``fit`` and how it reads on the rows of ``data`` (:meth:`ExplanationTree.read`),
    computed once per tree and kept in ``data`` (every file, figure and page of the report prints
    from the same reading instead of routing the rows again)."""
    memo = data.setdefault("readings", {}) if data is not None else {}
    hit = memo.get(id(fit.tree))
    if hit is not None and hit[0] is fit.tree:
        return hit[1], hit[2]
    tree = ExplanationTree.from_dict(fit.tree)
    rows = tree_annotations(data)
    # the rows' values are checked by the first tree read on them, not again by every tree
    checked = data is not None and rows.get("X") is not None and data.get("checked_X") is rows["X"]
    # the fit stage's leaves of the same rows (every projected row; not the sample of a run on disk)
    leaves = fit.leaves if (data is not None and "sample_of" not in data and fit.leaves is not None
                            and rows.get("X") is not None and len(fit.leaves) == len(rows["X"])) else None
    reading = tree.read(**rows, check_input=not checked, leaves=leaves)
    if data is not None:
        data["checked_X"] = rows.get("X")
    memo[id(fit.tree)] = (fit.tree, tree, reading)  # the dict is held: its id stays its own
    return tree, reading


def rule_checks(fit: FitArtifact, data: dict | None) -> dict:
    """Per leaf of ``fit``'s tree, the checks of its rule's conditions on measured concepts against
    the measurements of the rows in the leaf (:func:`pipeline.concepts.measured_maths.rule_agreement`);
    empty without measured concepts. Computed once per tree and kept in ``data``."""
    measured = (data or {}).get("measured")
    if measured is None:
        return {}
    memo = data.setdefault("rule_checks", {})
    hit = memo.get(id(fit.tree))
    if hit is not None and hit[0] is fit.tree:
        return hit[1]
    from pipeline.concepts.measured_maths import rule_agreement

    tree, reading = read_tree(fit, data)
    if tree.n_features != measured["values"].shape[1]:  # a tree on the latents, not on the concepts
        return {}
    leaves = fit.leaves if fit.leaves is not None and len(fit.leaves) == len(data["X"]) else tree.apply(data["X"])
    columns = {m: (measured["values"][:, m], spec["split"]) for m, spec in enumerate(measured["measures"])
               if spec is not None}
    checks = rule_agreement(leaves, tree.rules(reading=reading), data["X"], columns)
    memo[id(fit.tree)] = (fit.tree, checks)
    return checks


def tree_figure(row: str, fit: FitArtifact, data: dict | None = None, dataset: str | None = None,
                ari: float | None = None, width: float | None = None) -> "Figure":
    """The paper figure of one fitted explainer (title: method, dataset, size, ARI); ``width``:
    fitted into that many inches at 7 pt (:func:`pipeline.app.report.figures.plot_tree`)."""
    from pipeline.app.report.figures import plot_tree, tree_title

    tree, reading = read_tree(fit, data)
    return plot_tree(tree, title=tree_title(row, fit.name, tree, dataset, ari), width=width, reading=reading)


def units_note(tree: ExplanationTree, data: dict | None) -> str:
    """What the printed thresholds mean: exact decimals, the concept units, oblique tests in raw units."""
    kind = (data or {}).get("units_kind") if (data or {}).get("units") is not None else None
    text = ("Thresholds are the shortest decimals that route every training point as the tree does "
            "(the exact cuts are in the JSON).")
    if kind == "probability":
        measured = (data or {}).get("measured") is not None
        text += (" P(c) is the concept's calibrated probability P(concept | z) from its CAV's logistic model (Platt "
                 "scaling on held-out examples: " + ("for a measured concept, the run's rows its CAV was not fitted "
                                                     "on, labelled by the measurement; for any other, "
                                                     if measured else "") +
                 "the concept's own examples, not the run's data); a concept with a cut where P is below 0.01 or "
                 "above 0.99, or without a probability model (a measured property split in thirds), reads in "
                 "percentiles of its coordinate instead.")
    elif kind == "percentile":
        text += " 'c in top p%' ranks the concept coordinate among the data's points."
    elif kind == "original":
        text += (" The trees were fitted on the standardised columns; thresholds read in the table's own units, "
                 "and oblique tests in z-scores.")
    if kind and kind != "original" and any(tree.is_oblique(n) for n in range(tree.n_nodes) if not tree.is_leaf(n)):
        text += " Oblique tests (weighted sums) are in raw concept coordinates ⟨c, z⟩."
    return text


def marks_note(tree: ExplanationTree) -> str:
    """What the marks on concept names mean (``laced†``), for the trees whose rules carry one."""
    from pipeline.concepts.sets import MARK_MEANING, MARKS

    names = " ".join(tree.feature_names or [])
    return "".join(f" {m} {MARK_MEANING[k]}." for k, m in MARKS.items() if m in names)


def sample_note(data: dict | None) -> str:
    """Said wherever leaves are annotated from a sample of the rows (latents read from disk)."""
    if not data or not data.get("sample_of") or len(data["X"]) >= data["sample_of"]:
        return ""  # every row counted
    return (f"leaf points, purity and majority counted on a uniform sample of {len(data['X']):,} of "
            f"{data['sample_of']:,} rows")


def rules_text(row: str, fit: FitArtifact, data: dict | None = None) -> str:
    """``trees/<row>.rules.txt``: simplified annotated rules (every term of an oblique test), the raw
    path rules, the tree drawn as text."""
    from pipeline.app.configuration.explainers import method_name  # no matplotlib: a warm run draws nothing

    tree, reading = read_tree(fit, data)
    rules = tree.rules(reading=reading)
    checks = rule_checks(fit, data)
    ann = ("each rule: one interval per feature (root first) → leaf cluster · points · purity (share in the leaf's "
           "reference cluster)" + (" · majority ground-truth class (share)" if data and data.get("y") is not None
                                   else "")) + (f"; {sample_note(data)}" if sample_note(data) else "")
    if checks:
        ann += ("; under a rule on measured concepts, the share of the leaf's items whose measurement lies on the "
                "rule's side of the concept's cut (presence: above 0; others: the median of the run)")
    full = [r.format() + _check_suffix(checks, r.leaf, data, tree, "\n  ") for r in rules]
    raws = [r.format(simplified=False) for r in rules]
    if raws != full:
        raw = "Raw path conditions (as the tree tests them):\n" + "\n".join(f"- {r}" for r in raws)
    else:
        raw = "(No path tests a feature twice: the raw path conditions read as the rules above.)"
    return (f"# {row} ({method_name(fit.name)}): {tree.n_leaves} leaves, depth {tree.depth}\n\n"
            f"{units_note(tree, data)}{marks_note(tree)}\n\n"
            f"Rules ({ann}):\n" + "\n".join(f"- {r}" for r in full) + f"\n\n{raw}\n\nTree:\n"
            + tree.to_text(reading=reading) + "\n")


def _check_suffix(checks: dict, leaf: int, data: dict | None, tree: ExplanationTree, sep: str) -> str:
    from pipeline.app.report.concept_run import check_text

    text = check_text(checks.get(int(leaf), []), data["measured"], tree.feature_names) if checks else ""
    return f"{sep}{text}" if text else ""


def rules_json(fit: FitArtifact, data: dict | None = None) -> list[dict]:
    """The rules of ``trees/<row>.json``: per leaf the simplified intervals, text, raw text and annotations
    (and, on measured concepts, ``measured``: the checks of :func:`rule_checks`)."""
    tree, reading = read_tree(fit, data)
    checks = rule_checks(fit, data)
    out = []
    for r in tree.rules(reading=reading):
        d = r.to_dict()
        if checks.get(int(r.leaf)):
            d["measured"] = [{**c, "concept": tree.feature_names[c["feature"]]} for c in checks[int(r.leaf)]]
        out.append(d)
    return out


def _ari(results: "pd.DataFrame", row: str) -> float | None:
    import pandas as pd

    if "ari" not in results.columns or "explainer" not in results.columns:
        return None
    hit = results.loc[results["explainer"] == row, "ari"]
    return float(hit.iloc[0]) if len(hit) and pd.notna(hit.iloc[0]) else None


def run_report_html(cfg: dict, load: LoadArtifact, cluster: ClusterArtifact, project: ProjectArtifact, results: "pd.DataFrame",
                    fits: dict[str, FitArtifact], concepts: ConceptsArtifact | None = None, counterfactuals: CounterfactualsArtifact | None = None,
                    cache=None, completeness=None, data: dict | None = None, tests=None) -> str:
    """The whole ``report.html`` of one run (see :mod:`pipeline.app.report.html`); ``cache``
    (:class:`pipeline.app.report.render_cache.RenderCache`) reuses tree views and the scatter drawn
    before; ``data``: the run's :func:`tree_data`, when already gathered."""
    from pipeline.app.report.html import render_report, svg_of, tree_view
    from pipeline.app.report.render_cache import RenderCache

    cache = cache or RenderCache(None)
    concepts = concepts if concepts is not None and concepts.enabled else None
    data = data if data is not None else tree_data(load, cluster, project)
    keyed_units = render_key(data).get("units")  # the display maps as the render cache keys them
    views, drawn = [], []
    for row, fit in fits.items():
        tree, reading = read_tree(fit, data)
        gallery = data if tree.n_leaves <= MAX_GALLERY_LEAVES else {k: data[k] for k in tree_annotations(data)}
        args = dict(row=row, method=fit.name, tree=tree, X=gallery["X"], reference=gallery.get("reference"),
                    y=gallery.get("y"), class_names=gallery.get("class_names"), kind=gallery.get("kind"),
                    data=gallery.get("data"), data_feature_names=gallery.get("data_feature_names"),
                    dataset=load.name, ari=_ari(results, row), units=data.get("units"),
                    measured=gallery.get("measured"), checks=rule_checks(fit, data) or None)
        key = {**args, "tree": fit.tree, "units": keyed_units}
        view = cache.lookup("tree_view", key)
        if view is None:  # drawn now; kept in the render cache (below)
            view = tree_view(**args, reading=reading)
            drawn.append((key, view))
        view.note = units_note(tree, data) + marks_note(tree)
        views.append(view)
    scatter = None
    if concepts is not None and fits and data["reference"] is not None and project.X.shape[1] >= 2:
        first = next((r for r in fits if "concept" in fits[r].name), next(iter(fits)))

        def draw_scatter() -> str:
            from pipeline.app.report.concept_plots import plot_concept_scatter

            return svg_of(plot_concept_scatter(ExplanationTree.from_dict(fits[first].tree), data["X"],
                                               data["reference"], title=None, units=data.get("units")))

        scatter = cache.get("concept_scatter", {"tree": fits[first].tree, "X": data["X"],
                                                "reference": data["reference"], "units": keyed_units},
                            draw_scatter)
    cf_table, cf_svgs = None, []
    if counterfactuals:
        from pipeline.app.report.counterfactual_plots import counterfactual_table, plot_pair_scores

        cf_table = counterfactual_table(counterfactuals)
        cf_svgs = [svg_of(plot_pair_scores(cf_table, m, max_pairs=15)) for m in cf_table["method"].unique()]
    n = len(cluster.labels)
    subtitle = (f"{load.name} · {n} samples · encoder {cfg.get('encoder', {}).get('name')} · reference "
                f"{cluster.method}"
                + (" (chosen using the labels)" if cluster.uses_labels else ""))
    table = legend = tcav = None
    if concepts is not None and concepts.cav_summary:
        from pipeline.app.report.concept_run import concept_frame, concept_legend, tcav_frame

        table = concept_frame(concepts.cav_summary, tests, project.concept_names)
        legend = concept_legend(tests, measured=bool(concepts.measures))
        if concepts.cav_test:
            legend.append(concepts.cav_test)
        tcav = tcav_frame(tests)
    discovered = []
    if concepts is not None and concepts.discovery:
        from pipeline.app.report.html import concept_views

        discovered = cache.get(  # thumbnails need matplotlib: drawn once, then served from the render cache
            "concept_views", {"discovery": concepts.discovery, "top": concepts.top_examples, "kind": data.get("kind"),
                              "data": data.get("data"), "names": data.get("data_feature_names")},
            lambda: concept_views(concepts.discovery, concepts.top_examples, data.get("kind"), data.get("data"),
                                  data.get("data_feature_names")))
    for key, view in drawn:
        note, view.note = view.note, ""  # the cached view without the run's note, as before
        cache.store("tree_view", key, view)
        view.note = note
    tcav_caption = (f"share of each cluster's rows whose posterior under {tests.head} rises along the concept "
                    "(0.5: the concept does not bear on the cluster; * significant after Bonferroni)"
                    if tcav is not None else "")
    return render_report(page_title(cfg, load, concepts), cfg, results, views, subtitle=subtitle,
                         concept_table=table, concept_legend=legend or (), tcav_table=tcav, tcav_caption=tcav_caption,
                         scatter_svg=scatter, counterfactuals=cf_table, counterfactual_svgs=cf_svgs,
                         discovered=discovered,
                         discovery_method=concepts.discovery_method if concepts is not None else None,
                         concept_notes=concept_notes(concepts, tests),
                         completeness=_completeness_lines(completeness),
                         stability=stability_text((cluster.scores or {}).get("stability")
                                                  if isinstance(cluster.scores, dict) else None,
                                                  method=str(cluster.method).upper()))


def concept_notes(concepts: ConceptsArtifact | None, tests=None) -> list[str]:
    """What the report says under the concept table: what the concept tests decided (the console's
    lines: :func:`pipeline.app.report.concept_run.concept_test_notes`), what each measured concept measures,
    the concepts learned from the run itself (with their marks), unavailable concepts, near-parallel
    CAVs and discovery notes."""
    if concepts is None:
        return []
    from pipeline.app.report.concept_run import concept_test_notes, provenance_lines

    out = concept_test_notes(tests)
    out += [f"{m['name']}: {m['description']}; + {m['positive']}, − {m['negative']}" for m in concepts.measures or []]
    return out + provenance_lines(concepts.provenance, concepts.cav_dropped) + list(concepts.concept_notes or [])


def _completeness_lines(completeness) -> list[str]:
    from pipeline.app.report.completeness_table import completeness_text

    return completeness_text(completeness)


def page_title(cfg: dict, load: LoadArtifact, concepts: ConceptsArtifact | None) -> str:
    """The report's title: what the run explains, e.g. ``Concept trees (discovered concepts): digits``
    or ``Explanation trees: iris`` for a run without concepts."""
    if concepts is None or not concepts.enabled:
        return f"Explanation trees: {load.name}"
    source = concepts.concept_set or cfg.get("concepts", {}).get("name")
    return f"Concept trees ({'discovered concepts' if source == 'discovered' else source}): {load.name}"
