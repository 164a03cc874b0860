"""Stage ``concept_tests``: each concept tested on the run it explains (issue 48).

After the reference clustering, before the trees:

* **TCAV through the clustering** (:mod:`pipeline.concepts.tcav`): per concept and cluster, the
  share of the cluster's rows whose posterior under the clustering's own head
  (:func:`pipeline.app.stages.completeness.reference_head`) rises along the concept's CAV, and TCAV's
  significance test of it against CAVs fitted on random example sets (rows of the data);
* **transfer**: the value the concepts stage measured on the run's rows (a measured concept's
  tracking ρ, a class attribute's AUC on the run's classes, a labelled concept's calibration)
  against the thresholds of ``concepts.tests``.

A concept that fails either test is kept out of the trees (the project stage drops it) unless
``concepts.tests.keep_failed=true``; the run says which failed and why. Cached (its key: the
tests' config, the seed, the concepts and the clustering).
"""

from __future__ import annotations

import logging

import numpy as np

from pipeline.app.stores.artifacts import ClusterArtifact, ConceptsArtifact, ConceptTestsArtifact, EncodeArtifact
from pipeline.app.stages.framework import Stage
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

#: what each transfer check is called in the tables, and whether a larger value is better
CHECKS = {"tracking": ("tracks its measurement (Spearman ρ, held-out rows)", "min_tracking", True),
          "auc": ("separates the run's classes with and without it (ROC AUC)", "min_auc", True),
          "ece": ("calibrated on the data's labelled rows (expected calibration error)", "max_ece", False)}


def _config(cfg: dict) -> dict:
    from pipeline.app.configuration.config import concepts_enabled as enabled

    if not enabled(cfg):
        return {"concepts": "none"}
    return {"tests": dict(cfg["concepts"].get("tests") or {}), "seed": cfg["seed"]}


def check_tests_config(tests: dict) -> None:
    """Bounds of ``concepts.tests`` (its keys and types are the schema's)."""
    from pipeline.app.stages.cavs import TEST_POSITIVES

    bad = []
    if int(tests["n_random"]) < 2:
        bad.append(f"n_random={tests['n_random']} (the t-test needs >= 2 random example sets; TCAV uses 20 or more)")
    if not 2 <= int(tests["max_set"]) <= TEST_POSITIVES:
        bad.append(f"max_set={tests['max_set']} (2 to {TEST_POSITIVES} positives per test CAV)")
    if not 0 < float(tests["alpha"]) < 1:
        bad.append(f"alpha={tests['alpha']} (strictly between 0 and 1)")
    if int(tests["rows"]) < 10:
        bad.append(f"rows={tests['rows']} (at least 10 rows to count TCAV scores on)")
    if bad:
        raise InvalidInputError("concepts.tests: " + "; ".join(bad) + ".")


def _compute(cfg: dict, encode: EncodeArtifact, concepts: ConceptsArtifact,
             cluster: ClusterArtifact) -> ConceptTestsArtifact:
    from pipeline.app.configuration.config import concepts_enabled as enabled

    if not enabled(cfg) or not concepts.enabled:
        return ConceptTestsArtifact()
    from pipeline.app.stages.completeness import reference_head
    from pipeline.concepts.completeness_probe import sample_rows

    tests = cfg["concepts"]["tests"]  # checked by the run's plan (check_tests_config)
    names = list(concepts.concept_names)
    labels = np.asarray(cluster.labels)
    rows = sample_rows(labels, int(tests["rows"]), random_state=cfg["seed"])
    Zr = np.asarray(encode.Z[rows], dtype=np.float64)
    # the random example sets come from other rows where there are enough (else the same rows)
    outside = np.ones(len(labels), dtype=bool)
    outside[rows] = False
    others = np.flatnonzero(outside)  # np.setdiff1d's sorted rows without its sort (0.6 s on 1M rows)
    if others.size > 5000:
        others = np.sort(np.random.default_rng(cfg["seed"]).choice(others, 5000, replace=False))
    pool = np.asarray(encode.Z[others], dtype=np.float64) if others.size >= 4 * int(tests["n_random"]) else Zr
    head, rule = reference_head(cluster, Zr, rows)
    transfer = [_transfer(row, tests) for row in concepts.cav_summary or [{} for _ in names]]
    K = int(labels.max()) + 1 if labels.size and labels.max() >= 0 else 0
    out = dict(names=names, transfer=transfer, head=rule if head is not None else None,
               no_head=None if head is not None else rule)
    failing = {t["concept"]: t["why"] for t in transfer if t["passes"] is False}
    if head is not None and concepts.test_positives is not None and K >= 1:
        result = _tcav(cfg, tests, concepts, head, Zr, labels[rows], K, pool)
        main = head.log_posterior_slopes(Zr, concepts.cavs, scaled=True)  # the trees' CAVs
        from pipeline.concepts.tcav import tcav_scores

        out.update(tcav=tcav_scores(main, labels[rows], K), p_values=result.p_values,
                   significant=[bool(s) if t else None for s, t in zip(result.significant, result.tested)],
                   test_line=result.line(), untested=result.reasons or None, alpha=result.alpha)
        out["weak"] = {}
        weak = dict(result.weak or {})
        for name, sig, tested in zip(names, result.significant, result.tested):
            if tested and not sig and name not in weak:
                failing.setdefault(name, f"not significant: its TCAV scores do not differ from those of CAVs between "
                                         f"random example sets in any cluster (alpha {float(tests['alpha']):g}, "
                                         "Bonferroni)")
            elif tested and not sig:  # a weak test: said, and the concept stays (unless it fails to transfer)
                out["weak"][name] = f"not significant, but {weak[name]}" + ("" if name in failing else
                                                                              "; kept in the trees")
        out["weak"] = out["weak"] or None
    else:
        out["untested"] = {n: f"the reference clustering has no head: {rule}" for n in names} if head is None else None
    if failing and len(failing) == len(names) and not tests["keep_failed"]:
        log.warning("every concept failed its tests (%s); the trees use them all, since a concept tree needs "
                    "concepts: read its rules with that in mind", "; ".join(f"{k}: {v}" for k, v in failing.items()))
        out["kept_failing"] = sorted(failing)
    elif failing and tests["keep_failed"]:
        out["kept_failing"] = sorted(failing)
    elif failing:
        out["excluded"] = failing
        for n, why in failing.items():
            log.warning("concept %r kept out of the trees: %s (concepts.tests.keep_failed=true keeps it)", n, why)
    return ConceptTestsArtifact(**out)


def _transfer(row: dict, tests: dict) -> dict:
    """One concept's transfer check against its threshold: {concept, check, value, threshold, passes, why}."""
    kind = row.get("transfer", "none")
    value = float(row.get("transfer_value", float("nan")))
    out = {"concept": row.get("concept"), "check": kind, "value": value, "threshold": None, "passes": None,
           "why": row.get("transfer_note")}
    if kind not in CHECKS:
        out["why"] = out["why"] or "no rows of the data are labelled with it"
        return out
    what, key, larger = CHECKS[kind]
    limit = float(tests[key])
    out["threshold"] = limit
    if value != value:
        out["why"] = out["why"] or "not computable on this data"
        return out
    out["passes"] = bool(value >= limit if larger else value <= limit)
    if not out["passes"]:
        out["why"] = (f"does not transfer to the data: it {what.split(' (')[0]} at {value:.2f}, "
                      f"{'below' if larger else 'above'} concepts.tests.{key}={limit:g}")
    return out


def _tcav(cfg, tests, concepts: ConceptsArtifact, head, Zr, clusters, K, pool):
    """TCAV's test of every concept (random example sets: rows of the data)."""
    from pipeline.app.configuration.instantiate import call, factory
    from pipeline.app.stages.cavs import fitter_name
    from pipeline.concepts.tcav import tcav_test

    counts = list(concepts.test_positive_counts or [])
    ends = np.cumsum([0, *counts])
    positives = [np.asarray(concepts.test_positives[a:b], dtype=np.float64) for a, b in zip(ends[:-1], ends[1:])]
    fitter = call(factory(cfg["cav"], "cav"), "cav", offered={"fitter": fitter_name(cfg, concepts.cav_fitter_path),
                                                              "random_state": cfg["seed"]})
    if not hasattr(fitter, "directions"):  # a user's CAV estimator without it: its significance is not tested
        from pipeline.concepts.tcav import TCAVResult

        M = len(concepts.concept_names)
        return TCAVResult(list(concepts.concept_names), np.full((M, K), np.nan), np.full((M, K), np.nan), [None] * M,
                          [None] * M, np.zeros(M, bool), np.zeros(M, bool), float(tests["alpha"]), 0, [0] * M, 0,
                          {n: f"cav._target_ ({type(fitter).__name__}) cannot fit further CAVs (no directions())"
                           for n in concepts.concept_names})
    return tcav_test(positives, list(concepts.concept_names), pool,
                     lambda problems: fitter.directions(problems, cfg["seed"]),
                     lambda C: head.log_posterior_slopes(Zr, C, scaled=True), clusters, K,
                     n_random=int(tests["n_random"]), max_set=int(tests["max_set"]), alpha=float(tests["alpha"]), random_state=cfg["seed"])


# cached on concept runs (the plan's stage list says so; without concepts its artifact is empty)
CONCEPT_TESTS = Stage("concept_tests", ("encode", "concepts", "cluster"), _config, _compute,
                      artifact=ConceptTestsArtifact, version=5)  # 4: scaled slopes; 5: weak notes
