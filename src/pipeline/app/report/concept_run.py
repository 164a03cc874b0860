"""Concept runs: the Table-2 row, the CAV table, and the files a notebook opens.

A run with ``concepts != none`` additionally writes ``<run>/concepts/`` (via
:func:`write_concept_run`): ``run.npz`` (concept coordinates, reference and true labels,
thumbnails) and ``run.json`` (concept names, CAV summary, Table-2 row, selection, texts).
:func:`load_concept_run` reads them back for ``notebooks/inspect_concept_tree.ipynb``.
"""

from __future__ import annotations

import json
import math
import weakref
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.app.stores.artifacts import ClusterArtifact, ConceptsArtifact, LoadArtifact, ProjectArtifact
from pipeline.app.stores.writing import atomic_write
from pipeline.concepts.units import units_from_dicts, units_to_dicts
from pipeline.trees.tree import ExplanationTree

MAX_THUMBNAILS = 20_000  # images kept for leaf thumbnails (digits / MNIST sized)
NOTEBOOK_ROWS = 1_000_000  # rows of run.npz: larger runs keep a uniform sample (and its row numbers)


def _first(df: pd.DataFrame, methods) -> pd.Series | None:
    rows = df[df["method"].isin(methods)]
    return None if rows.empty else rows.iloc[0]


def table2_row(df: pd.DataFrame, *, dataset: str, n_samples: int, n_cavs: int, model: str,
               n_independent: int | None = None) -> pd.DataFrame:
    """One row shaped like the MMDT paper's Table 2 from a run's results table.

    Columns: dataset, samples, CAVs (the concept set's concepts, as the paper counts them),
    independent CAVs (those the trees use: duplicates and complements of another concept,
    whose CAV is the same direction or its reverse, are dropped), K, model, base ARI
    (reference vs ground truth), MMDT ARI, CART ARI, MMDT time (s), CART time (s).
    """
    ref = df[df["explainer"] == "reference"].iloc[0]
    mmdt = _first(df, ["concept_mmdt", "mmdt"])
    cart = _first(df, ["cart"])

    def get(row, col):
        return math.nan if row is None else float(row[col])

    row = {"dataset": dataset, "samples": int(n_samples), "CAVs": int(n_cavs),
           "independent CAVs": int(n_cavs if n_independent is None else n_independent), "K": int(ref["n_leaves"]),
           "model": model}
    if "ari" in df.columns:  # no ground truth (a user's unlabelled data): no ARI columns
        row.update({"base ARI": float(ref["ari"]), "MMDT ARI": get(mmdt, "ari"), "CART ARI": get(cart, "ari")})
    row.update({"MMDT time (s)": get(mmdt, "fit_seconds"), "CART time (s)": get(cart, "fit_seconds")})
    return pd.DataFrame([row])


def _p_text(p: float) -> str:
    return "—" if p != p else ("<0.001" if p < 0.001 else f"{p:.2g}" if p < 0.01 else f"{p:.2f}")


def _transfer_text(t: dict | None) -> str:
    if not t or t.get("check") in (None, "none"):
        return "—"
    v = t.get("value", float("nan"))
    if v != v:
        return "n/a"
    mark = "" if t.get("passes") in (True, None) else " ✗"
    return {"tracking": f"ρ {v:.2f}", "auc": f"AUC {v:.2f}", "ece": f"ECE {v:.2f}"}[t["check"]] + mark


def check_text(checks: list[dict], measured: dict, names) -> str:
    """One line of a rule's measured checks, in the rule's own terms, e.g. ``measured: loop above 0 on
    96% · thickness in top 30% on 81%`` (empty when the rule cuts no measured concept)."""
    parts = []
    for c in checks:
        spec = measured["measures"][c["feature"]]
        name = names[c["feature"]] if names is not None else spec["name"]
        if c["n"] == 0:
            parts.append(f"{name}: not measured in this leaf")
            continue
        if c["percentiles"] is None:  # a presence concept
            what = "0" if c["side"] == "low" else "above 0"
        else:
            lo, hi = c["percentiles"]
            what = (f"in top {100 - lo:.3g}%" if c["side"] == "high" else f"in bottom {hi:.3g}%" if c["side"] == "low"
                    else f"in percentiles {lo:.3g}–{hi:.3g}")
        parts.append(f"{name} {what} on {100 * c['share']:.0f}%")
    return ("measured: " + " · ".join(parts)) if parts else ""


def concept_frame(cav_summary: list[dict], tests=None, used: list[str] | None = None) -> pd.DataFrame:
    """The concept table: per concept whether the trees use it (and why not), how well it transfers
    to the data (a measured concept's tracking ρ on held-out rows, with the fitted rows' ρ beside
    it; a class attribute's AUC; a labelled concept's calibration error), TCAV's significance test
    through the clustering (the smallest adjusted p-value over the clusters), the held-out accuracy
    of one cut along its CAV with its 95% interval, and its examples."""
    by_name = {t["concept"]: t for t in ((tests.transfer if tests is not None else None) or [])}
    for c in cav_summary:  # without the tests stage's verdicts: the values the concepts stage measured
        if c["concept"] not in by_name and c.get("transfer"):
            by_name[c["concept"]] = {"check": c["transfer"], "value": c.get("transfer_value", float("nan")),
                                     "passes": None}
    names = list(tests.names) if tests is not None and tests.names else [c["concept"] for c in cav_summary]
    sig = dict(zip(names, tests.significant)) if tests is not None and tests.significant is not None else {}
    pmin = ({n: float(np.nanmin(p)) if np.isfinite(p).any() else float("nan")
             for n, p in zip(names, np.asarray(tests.p_values, dtype=float))}
            if tests is not None and tests.p_values is not None else {})
    excluded = (tests.excluded or {}) if tests is not None else {}
    kept_failing = set((tests.kept_failing or []) if tests is not None else [])
    rows = []
    for c in cav_summary:
        n = c["concept"]
        in_trees = ("no" if n in excluded else "yes (failed)" if n in kept_failing
                    else "yes" if used is None or n in used else "no (selection)")
        transfer = _transfer_text(by_name.get(n))
        if c.get("tracks_fit") == c.get("tracks_fit") and "tracks_fit" in c:
            transfer += f" (fit {c['tracks_fit']:.2f})"
        weak = (tests.weak or {}) if tests is not None else {}
        tcav = significance_word(sig.get(n)) if sig else "not tested"
        row = {"concept": n, "in trees": in_trees, "transfers": transfer,
               "TCAV": f"{tcav} (weak)" if n in weak else tcav, "p": _p_text(pmin.get(n, float("nan"))),
               "accuracy [95% CI]": (f"{c['score']:.2f} [{c['ci_low']:.2f}–{c['ci_high']:.2f}]"
                                     if c.get("score") == c.get("score") else "—"),
               "examples (+/−)": f"{c.get('n_positives', 0)}/{c.get('n_negatives', 0)}"}
        rows.append(row)
    return pd.DataFrame(rows)


def concept_legend(tests=None, measured: bool = False) -> list[str]:
    """What the concept table's columns mean, in a few lines."""
    lines = ["  in trees: whether the trees cut on the concept (a concept that fails its tests is kept out; "
             "concepts.tests.keep_failed=true keeps it)"]
    lines.append("  transfers: " + ("measured concepts: Spearman ρ of the concept coordinate with the measurement on "
                                    "the rows its CAV was not fitted on (fit: on those it was); " if measured else "")
                 + "class attributes: ROC AUC between the run's classes with and without it; labelled rows: expected "
                 "calibration error; ✗ below the threshold (concepts.tests); — nothing of the data is labelled with it")
    if tests is not None and tests.test_line:
        lines.append("  TCAV, p: " + tests.test_line[len("significance: "):])
    elif tests is not None and tests.no_head:
        lines.append(f"  TCAV: not tested, the reference clustering has no head: {tests.no_head}")
    return lines


def tcav_frame(tests) -> pd.DataFrame | None:
    """Concept × cluster: the share of each cluster's rows whose posterior under the clustering's head
    rises along the concept's CAV (``*``: significant after Bonferroni)."""
    if tests is None or tests.tcav is None:
        return None
    T = np.asarray(tests.tcav, dtype=float)
    P = np.asarray(tests.p_values, dtype=float) if tests.p_values is not None else np.full(T.shape, np.nan)
    alpha = tests.alpha if tests.alpha is not None else 0.05
    rows = []
    for m, n in enumerate(tests.names):
        row = {"concept": n}
        for k in range(T.shape[1]):
            v = T[m, k]
            row[str(k)] = "—" if v != v else f"{v:.2f}" + ("*" if P[m, k] == P[m, k] and P[m, k] < alpha else "")
        rows.append(row)
    return pd.DataFrame(rows)


def cav_table(cav_summary: list[dict], tests=None, units: list | None = None, units_kind: str | None = None,
              names: list[str] | None = None, X=None) -> pd.DataFrame:
    """``concepts/cavs.csv``: every number behind the concept table — the concept table's columns as
    numbers (held-out accuracy and interval, transfer check and value, TCAV's smallest adjusted p and
    significance, whether the trees use it), the spread of the repeats' directions, the example counts,
    the CAV's own decision boundary in the rules' units and the share of the data beyond it, and where
    the examples came from."""
    df = pd.DataFrame(cav_summary)
    by_name = {t["concept"]: t for t in ((tests.transfer if tests is not None else None) or [])}
    df["transfer_check"] = [by_name.get(n, {}).get("check") for n in df["concept"]]
    df["transfer_value"] = [by_name.get(n, {}).get("value", float("nan")) for n in df["concept"]]
    df["transfer_passes"] = [by_name.get(n, {}).get("passes") for n in df["concept"]]
    if tests is not None and tests.p_values is not None:
        P = np.asarray(tests.p_values, dtype=float)
        pm = {n: float(np.nanmin(p)) if np.isfinite(p).any() else float("nan") for n, p in zip(tests.names, P)}
        sig = dict(zip(tests.names, tests.significant))
        df["tcav_p_min"] = [pm.get(n, float("nan")) for n in df["concept"]]
        df["tcav_significant"] = [significance_word(sig.get(n)) for n in df["concept"]]
    excluded = (tests.excluded or {}) if tests is not None else {}
    df["in_trees"] = [n not in excluded and (names is None or n in names) for n in df["concept"]]
    if "boundary" in df.columns:
        df[boundary_column(units_kind if units is not None else "raw")] = boundaries(cav_summary, names, units)
        if X is not None:
            df[ABOVE] = share_above(cav_summary, names, X)
        df = df.drop(columns=["boundary"])
    return df


ABOVE = "data beyond boundary (%)"


def significance_word(value) -> str:
    """yes / no for a tested concept, "not tested" where the test did not run (never "yes" beside
    an undefined accuracy)."""
    if value is None or (isinstance(value, float) and value != value):
        return "not tested"
    return "yes" if bool(value) else "no"


def provenance_lines(provenance: list[dict] | None, dropped: dict | None = None) -> list[str]:
    """The concepts learned from the run itself, one line each with their mark's meaning, and the
    option of the strict protocol when a class-attribute concept restates the run's classes."""
    from pipeline.concepts.sets import MARK_MEANING, MARKS

    marked = [p for p in provenance or [] if p.get("from_run")]
    unavailable = {k: v for k, v in (dropped or {}).items() if "exclude_run_classes" in v}
    if not marked and not unavailable:
        return []
    kinds = sorted({p["from_run"] for p in marked})
    lines = ["Concepts learned from the run itself (" + "; ".join(f"{MARKS[k]} {MARK_MEANING[k]}" for k in kinds)
             + "):"] if marked else []
    lines += [f"  {p['concept']}: {p['note']}" for p in marked]
    if any(p.get("strict_available") for p in marked):
        lines.append("  class-attribute concepts only from classes outside the run (the strict protocol): "
                     "concepts.params.exclude_run_classes=true")
    if unavailable:
        lines.append("Unavailable under exclude_run_classes=true: "
                     + "; ".join(f"{k}: {v}" for k, v in unavailable.items()))
    return lines


def write_cav_table(out_dir: Path, df: pd.DataFrame, test: str | None) -> None:
    """``concepts/cavs.csv`` (the test as a final ``#`` line: ``pd.read_csv(..., comment="#")``) and
    ``concepts/cavs.md`` (the test under the table)."""
    from pipeline.app.report.tables import format_markdown

    out = Path(out_dir) / "concepts"
    out.mkdir(parents=True, exist_ok=True)
    tail = f"# {test}\n" if test else ""
    atomic_write(out / "cavs.csv", (df.to_csv(index=False) + tail).encode("utf-8"))
    atomic_write(out / "cavs.md", (format_markdown(df) + (f"\n{test}\n" if test else "")).encode("utf-8"))


def share_above(cav_summary: list[dict], names: list[str] | None, X) -> list[float]:
    """Percentage of the data whose concept coordinate lies beyond each CAV's own boundary (the
    points its classifier calls positive); NaN for concepts the trees do not use. One pass over
    the rows, remembered for the same array and boundaries (the CAV table, the Markdown and the
    HTML page each show it)."""
    index = {n: i for i, n in enumerate(names or [])}
    cols = [index.get(c["concept"]) for c in cav_summary]
    bounds = np.array([float(c.get("boundary", float("nan"))) for c in cav_summary])
    used = [i for i, j in enumerate(cols) if j is not None and bounds[i] == bounds[i]]
    if not used or len(X) == 0:
        return [float("nan")] * len(cav_summary)
    where = np.array([cols[i] for i in used])
    limit = np.full(X.shape[1], np.inf)  # unused columns: never above
    limit[where] = bounds[used]
    key = (id(X), limit.tobytes())
    hit = _SHARES.get(key)
    if hit is None or hit[0]() is not X:
        above = np.zeros(X.shape[1], np.int64)
        step = max(1, (8 << 20) // max(X.shape[1], 1))  # row blocks: every concept in one pass over the rows
        for start in range(0, len(X), step):
            # a bytes' sum per column (count_nonzero along rows widens every flag on its way)
            above += np.add.reduce((np.asarray(X[start:start + step], dtype=float) > limit).view(np.uint8),
                                   axis=0, dtype=np.int64)
        _SHARES.clear()
        _SHARES[key] = hit = (weakref.ref(X) if isinstance(X, np.ndarray) else (lambda: None), above)
    out = [float("nan")] * len(cav_summary)
    for i in used:
        out[i] = float(100.0 * hit[1][cols[i]] / len(X))
    return out


_SHARES: dict = {}  # (id of the coordinates, boundaries) -> (weak reference, counts above)


def boundary_column(units_kind: str | None) -> str:
    return {"probability": "boundary P(c)", "percentile": "boundary (percentile)"}.get(units_kind or "raw",
                                                                                        "boundary ⟨c, z⟩")


def boundaries(cav_summary: list[dict], names: list[str] | None, units: list | None) -> list[float]:
    """Each CAV's decision boundary (raw coordinate ``-b/a``, ``cav_summary[m]['boundary']``) in the
    display units of its concept (``units[names.index(concept)]``); NaN for a concept the trees do
    not use (left out by concept selection) when the units are not raw."""
    from pipeline.concepts.units import boundary_in_units

    raw = [float(c.get("boundary", float("nan"))) for c in cav_summary]
    if units is None:
        return raw
    index = {n: i for i, n in enumerate(names or [])}
    return [boundary_in_units(units[index[c["concept"]]], v) if v == v and c["concept"] in index else float("nan")
            for c, v in zip(cav_summary, raw)]


def discovery_frame(discovery: list[dict]) -> pd.DataFrame:
    """Discovered concepts: name, its association with the labels (``≈ Sneaker, AUC .96``: a column of
    its own, never the name), importance, and the automatic name where the user renamed it."""
    df = pd.DataFrame(discovery)
    cols = ["concept", "tracks", "association", "importance"]
    if "automatic name" in df.columns and (df["automatic name"] != df["concept"]).any():
        cols.append("automatic name")
    return df[[c for c in cols if c in df.columns]]


def _fmt(df: pd.DataFrame) -> str:
    from pipeline.app.report.tables import is_time

    times = {c: (lambda v: f"{v:.3g}") for c in df.columns if is_time(c)}
    return df.to_string(index=False, float_format=lambda v: f"{v:.4g}", formatters=times)


def table2_display(table2: pd.DataFrame) -> pd.DataFrame:
    """The Table-2 row for printing: CAVs as given and as the trees use them, e.g. ``4 (3 in the trees)``."""
    out = table2.copy()
    if "independent CAVs" in out.columns:
        out["CAVs"] = [str(g) if g == i else f"{g} ({i} in the trees)"
                       for g, i in zip(out["CAVs"], out.pop("independent CAVs"))]
    return out


def grouped_reasons(reasons: dict, count: str = r"; it has (\d+)$", unit: str = "positive examples") -> str:
    """One clause per reason: concepts whose reasons differ only in the number ``count`` matches are
    listed together with their numbers (``unit``), e.g. twelve concepts too small for the test
    read as one sentence, not twelve; a reason no other concept shares is said as it is."""
    import re

    groups: dict[str, list[tuple[str, str]]] = {}
    original: dict[str, str] = {}
    for name, why in reasons.items():
        m = re.search(count, why)
        if m is None:
            key = why
        elif m.end() == len(why):  # the number closes the reason ("...; it has 10"): said after the names
            key = why[:m.start()]
        else:
            key = why[:m.start(1)] + "N" + why[m.end(1):]
        groups.setdefault(key, []).append((name, m.group(1) if m else ""))
        original[name] = why
    parts = []
    for why, members in groups.items():
        if len(members) == 1:
            parts.append(f"{members[0][0]}: {original[members[0][0]]}")
            continue
        counts = [c for _, c in members if c]
        names = ", ".join(n for n, _ in members)
        if counts:
            names += f" ({', '.join(counts)} {unit})"
        parts.append(f"{names}: {why}")
    return "; ".join(parts)


def untested_text(untested: dict) -> str:
    """Why concepts were not tested (:func:`grouped_reasons` on the test's "...; it has N")."""
    return grouped_reasons(untested)


def weak_text(weak: dict) -> str:
    """The concepts whose tests were weak, one clause for those that share the reason (each with its
    examples per side)."""
    return grouped_reasons(weak, r"has (\d+) examples per side", "examples per side")


def concept_test_notes(tests) -> list[str]:
    """What the concept tests decided, one line each, for the console and the report alike: the
    concepts kept out of the trees and why, those that failed and were kept
    (``concepts.tests.keep_failed``), why significance was not tested, and the weak tests."""
    if tests is None:
        return []
    out = []
    if tests.excluded:
        out.append("Kept out of the trees: " + "; ".join(f"{k}: {v}" for k, v in tests.excluded.items()))
    if tests.kept_failing:
        out.append("Failed their tests but kept in the trees: " + ", ".join(tests.kept_failing))
    if tests.untested:
        out.append("Significance not tested: " + untested_text(tests.untested))
    if tests.weak:
        out.append("Weak tests: " + weak_text(tests.weak))
    return out


def concept_summary_text(table2: pd.DataFrame, cav_summary: list[dict], dropped: dict, selection: dict | None,
                         discovery: list[dict] | None = None, test: str | None = None,
                         provenance: list[dict] | None = None, notes: list[str] | None = None,
                         completeness: list[str] = (), tests=None, used: list[str] | None = None,
                         measures: list[dict] | None = None) -> str:
    """The concept part of a run's console summary: the Table-2 row, how much the concepts explain
    beside random directions, the concept table (with its legend), the TCAV table, what each
    measured concept measures, provenance and notes."""
    lines = ["", "Concept trees (MMDT paper, Table 2 layout):", _fmt(table2_display(table2)), *completeness]
    if cav_summary:
        lines += ["", "Concepts:", _fmt(concept_frame(cav_summary, tests, used))]
        lines += concept_legend(tests, measured=bool(measures))
        if test:
            lines.append("  " + test)
        lines += concept_test_notes(tests)
    tcav = tcav_frame(tests)
    if tcav is not None:
        head = tests.head or "its head"
        lines += ["", f"TCAV scores through the clustering (share of each cluster's rows whose posterior under {head} "
                      "rises along the concept; 0.5: the concept does not bear on the cluster; * significant):",
                  _fmt(tcav.rename(columns={c: f"cluster {c}" if c == "0" else c for c in tcav.columns}))]
    if measures:
        lines += ["", "What each measured concept measures (positive / negative examples of its CAV):"]
        lines += [f"  {m['name']}: {m['description']}; + {m['positive']}, − {m['negative']}" for m in measures]
    prov = provenance_lines(provenance, dropped)
    if prov:
        lines += [""] + prov
    if discovery:
        how = discovery[0].get("named by", "position")
        lines += ["", f"Discovered concepts (named by {how}; association: the class the concept coordinate separates "
                      "best, ROC AUC" + ("; tracks: the measured properties its coordinate follows, Spearman ρ"
                                          if "tracks" in discovery[0] else "") + "):", _fmt(discovery_frame(discovery))]
    if notes:
        lines += ["", "Notes:"] + [f"  {n}" for n in notes]
    dropped = {k: v for k, v in dropped.items() if "exclude_run_classes" not in v}  # listed above
    if dropped:
        lines += ["", "CAVs not used (why the independent count is lower): "
                  + "; ".join(f"{k} {v}" if v.startswith(("is ", "duplicates")) else f"{k}: {v}"
                              for k, v in dropped.items())]
    if selection:
        lines += ["", f"concept selection kept {selection['selected']} of {selection['all_concepts']} "
                      f"(q {selection['q_path'][-1]:.4g} vs {selection['q_all']:.4g} with all)"]
    return "\n".join(lines)


def write_concept_run(out_dir: Path, load: LoadArtifact, cluster: ClusterArtifact, concepts: ConceptsArtifact, project: ProjectArtifact,
                      table2: pd.DataFrame, completeness=None, tests=None) -> Path:
    """Write ``<out_dir>/concepts/run.npz`` + ``run.json`` for the inspection notebook."""
    out = Path(out_dir) / "concepts"
    out.mkdir(parents=True, exist_ok=True)
    arrays = {"X": np.asarray(project.X, dtype=np.float64), "reference": np.asarray(cluster.labels)}
    if load.y is not None:
        arrays["y"] = np.asarray(load.y)
    n = len(arrays["reference"])
    if n > NOTEBOOK_ROWS:  # a uniform sample of the rows (their numbers in "rows"): 10M x 20 would be 1.6 GB
        rows = np.sort(np.random.default_rng(0).choice(n, NOTEBOOK_ROWS, replace=False))
        arrays = {k: v[rows] for k, v in arrays.items()}
        arrays["rows"] = rows
    images = load.images if load.images is not None else (load.X if load.kind == "image"
                                                                       else None)
    if images is not None and len(images) <= MAX_THUMBNAILS:
        arrays["images"] = np.asarray(images)
    # compressing a million rows of float64 coordinates takes seconds and saves little; written
    # straight into the file (no in-memory copy of it, twice: 0.3 GB at a million rows)
    save = np.savez if len(arrays["X"]) > 100_000 else np.savez_compressed
    atomic_write(out / "run.npz", lambda fh: save(fh, **arrays))
    meta = {"dataset": load.name, "kind": load.kind, "concept_names": list(project.feature_names),
            "class_names": load.class_names, "cav_summary": concepts.cav_summary or [],
            "cav_dropped": concepts.cav_dropped or {}, "selection": project.selection,
            "table2": table2.to_dict(orient="records")[0],
            "texts": list(load.texts) if load.kind == "text" else None,
            "discovery": concepts.discovery, "discovery_method": concepts.discovery_method,
            "cav_test": concepts.cav_test, "provenance": concepts.provenance, "concept_notes": concepts.concept_notes,
            "units": project.units_kind, "display_units": units_to_dicts(project.units),
            "completeness": None if completeness is None else completeness.completeness,
            "importance": None if completeness is None else completeness.importance,
            "tree_baseline": None if completeness is None else completeness.tree_baseline,
            "measures": concepts.measures}
    if tests is not None and tests.enabled:  # each concept's tests on this run (issue 48)
        tcav = tcav_frame(tests)
        meta.update(tcav=None if tcav is None else _fmt(tcav).splitlines(),
                    tcav_scores=None if tests.tcav is None else np.asarray(tests.tcav).tolist(),
                    tcav_p_values=None if tests.p_values is None else np.asarray(tests.p_values).tolist(),
                    significant=tests.significant, transfer=tests.transfer,
                    excluded=tests.excluded, test_line=tests.test_line, head=tests.head)
    if concepts.top_examples is not None:
        meta["top_examples"] = np.asarray(concepts.top_examples).tolist()
    atomic_write(out / "run.json", json.dumps(meta, indent=1, default=float))
    return out


def write_measurements(out_dir: Path, concepts: ConceptsArtifact, ids=None) -> Path | None:
    """``concepts/measurements.parquet`` of a run with measured concepts (issue 47): one row per data
    row — its id (or row number), whether its CAVs were fitted on it (``cav_rows``: the others check
    them) and every measured value — so any rule can be checked against the inputs' measurements."""
    if concepts.measurements is None or not concepts.measures:
        return None
    values = np.asarray(concepts.measurements, dtype=np.float64)
    n = len(values)
    table = {"id": np.asarray(ids) if ids is not None and len(ids) == n else np.arange(n)}
    if concepts.fit_rows is not None:
        table["cav_rows"] = np.asarray(concepts.fit_rows, dtype=bool)
    table.update({m["name"]: values[:, j] for j, m in enumerate(concepts.measures)})
    frame = pd.DataFrame(table)
    frame.attrs = {}
    meta = json.dumps({m["name"]: {k: m[k] for k in ("description", "unit", "split", "positive", "negative")}
                       for m in concepts.measures})

    def write(fh) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        t = pa.Table.from_pandas(frame, preserve_index=False)
        pq.write_table(t.replace_schema_metadata({**(t.schema.metadata or {}), b"measures": meta.encode()}), fh)

    return atomic_write(Path(out_dir) / "concepts" / "measurements.parquet", write)


def load_concept_run(run_dir) -> dict:
    """A finished concept run: ``results`` (DataFrame), ``trees`` (row -> ExplanationTree),
    the arrays of ``concepts/run.npz``, the entries of ``concepts/run.json`` and ``units``, the
    display maps the run's rules are printed in (``tree.rules(X, ..., units=run["units"])``
    prints them as the report does: ``P(concept) > 0.8``, percentiles, or raw when None)."""
    run_dir = Path(run_dir)
    if not (run_dir / "concepts" / "run.json").exists():
        raise FileNotFoundError(f"{run_dir} is not a finished concept run (no concepts/run.json); run "
                                "`python -m pipeline` with a concept set and open the run directory it prints.")
    out = json.loads((run_dir / "concepts" / "run.json").read_text())
    with np.load(run_dir / "concepts" / "run.npz", allow_pickle=False) as data:
        out.update({k: data[k] for k in data.files})
    out["units"] = units_from_dicts(out.get("display_units"), out["X"])
    out["results"] = pd.read_csv(run_dir / "results.csv")
    out["trees"] = {p.stem: ExplanationTree.from_dict(json.loads(p.read_text())["tree"])
                    for p in sorted((run_dir / "trees").glob("*.json"))}
    return out


def table2_for_run(cfg: dict, load: LoadArtifact, cluster: ClusterArtifact, project: ProjectArtifact, df: pd.DataFrame,
                   concepts: ConceptsArtifact | None = None, tests=None) -> pd.DataFrame:
    """The Table-2 row of a concept run from its artifacts and results table; ``CAVs`` counts
    the concept set's concepts (used + dropped + kept out by their tests, e.g. 4 for mnist_geometric
    as in the paper), ``independent CAVs`` those the trees use."""
    from pipeline.app.configuration.instantiate import locate

    own_head = getattr(locate(cfg["clustering"]["_target_"], "clustering"), "labels_every_row", False)
    model = cfg["encoder"]["name"] if own_head else f"{cfg['encoder']['name']}+{cfg['clustering']['name']}"
    used = len(project.feature_names)
    given = (used + len((concepts.cav_dropped if concepts is not None else None) or {})
             + len((tests.excluded if tests is not None else None) or {}))
    return table2_row(df, dataset=load.name, n_samples=len(cluster.labels), n_cavs=given, model=model,
                      n_independent=used)


def latest_concept_run(log_dir) -> Path:
    """The most recent run directory under ``log_dir`` that holds ``concepts/run.json``."""
    runs = sorted(Path(log_dir).glob("**/concepts/run.json"), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise FileNotFoundError(f"no concept run under {log_dir}; run `python -m pipeline` first.")
    return runs[-1].parent.parent
