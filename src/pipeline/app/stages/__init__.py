"""Pipeline stages, each a :class:`pipeline.app.stages.framework.Stage`; see docs/ARCHITECTURE.md.

load -> train -> encode -> concepts -> coordinates -> cluster -> concept_tests -> project -> [baselines] (concept
runs) -> fit.<row> (one per explainer) -> evaluate -> figures -> [completeness] (concept runs) -> [counterfactuals]
-> report.
:func:`declared_stages` is the list the runner loops over and :func:`declared_callbacks` what it
calls at its events; a new stage is one module here plus one line in that list. This package is
the one place that knows the stages by name.
"""

from __future__ import annotations

import dataclasses


def declared_stages(cfg: dict) -> list:
    """The stages of one run of ``cfg``, in execution order (each one's inputs come before it):
    the same at every size (docs/out-of-core.md). Whether a stage is cached follows from the config
    where it depends on it (an array read by row range is its own cache)."""
    from pipeline.app.stages.cluster import CLUSTER
    from pipeline.app.stages.completeness import BASELINES, completeness_stage
    from pipeline.app.stages.concept_tests import CONCEPT_TESTS
    from pipeline.app.stages.concepts import CONCEPTS, enabled
    from pipeline.app.stages.coordinates import COORDINATES
    from pipeline.app.stages.encode import ENCODE, TRAIN, passes_through
    from pipeline.app.stages.evaluate import evaluate_stage
    from pipeline.app.stages.fit import fit_stage
    from pipeline.app.stages.load import load_stage
    from pipeline.app.stages.project import PROJECT
    from pipeline.app.stages.report import figures_stage, report_stage

    rows = list(cfg["explainer"])
    concept_run = enabled(cfg)
    on_disk = passes_through(cfg)  # the latents are an array read by row range
    # the concepts (fitted on their examples) come before the clustering, whose pass over the latents
    # the coordinates ride along (the executor reads latents on disk once for both); each concept is
    # tested on the clustering it explains before the trees may use it (issue 48); the completeness
    # baselines read no tree (a worker computes them while the trees are fitted, where the run has one);
    # the figures are started once the trees are evaluated: worker processes draw them meanwhile
    stages = [load_stage(cfg), TRAIN, dataclasses.replace(ENCODE, cached=not on_disk), CONCEPTS,
              dataclasses.replace(COORDINATES, cached=on_disk and concept_run), CLUSTER,
              dataclasses.replace(CONCEPT_TESTS, cached=concept_run), PROJECT, *([BASELINES] if concept_run else []),
              *(fit_stage(row) for row in rows), evaluate_stage(rows), figures_stage(rows)]
    if concept_run:  # how much the concepts explain (issue 34)
        stages.append(completeness_stage(rows))
    counterfactuals = cfg.get("counterfactuals", {}).get("name", "none") != "none"
    if counterfactuals:  # imports torch: only when asked for
        from pipeline.app.stages.counterfactuals import COUNTERFACTUALS

        stages.append(COUNTERFACTUALS)
    stages.append(report_stage(rows, counterfactuals, completeness=concept_run))
    return stages


def declared_callbacks(cfg: dict) -> list:
    """What the runner calls at its events (:class:`pipeline.app.stages.framework.RunCallback`):
    the concepts computed ahead by a worker process when the latents exceed the memory budget (the
    worker then kept for the completeness baselines where the concept coordinates fit in it, and
    handed them as the concept tests begin), and the figure workers started as the first tree is fitted."""
    from pipeline.app.stages.completeness import BaselinesAhead, keeps_worker
    from pipeline.app.stages.concepts import AHEAD_IMPORTS, enabled, runs_ahead
    from pipeline.app.stages.framework import RunAhead
    from pipeline.app.stages.report import WarmFigures

    rows = list(cfg["explainer"])
    return [RunAhead({"concepts": runs_ahead}, AHEAD_IMPORTS, keep={"concepts": keeps_worker}),
            *([BaselinesAhead()] if enabled(cfg) else []), *([WarmFigures(f"fit.{rows[0]}")] if rows else [])]


def forceable_stages(cfg: dict) -> list[str]:
    """What ``+force=`` may name: every stage's store (and ``counterfactuals``, even when off)."""
    names = [s.store or s.name for s in declared_stages(cfg)] if cfg.get("explainer") is not None else []
    return list(dict.fromkeys([*names, "counterfactuals"]))


def through_trees(stages: list) -> list:
    """The stages up to the fitted trees (every ``fit.<row>``), for notebooks and tests; not the
    completeness baselines, which come before the trees only to be computed beside them."""
    last = max((i for i, s in enumerate(stages) if s.store == "fit"), default=len(stages) - 1)
    return [s for s in stages[:last + 1] if s.name != "baselines"]
