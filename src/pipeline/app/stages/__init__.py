"""Pipeline stages, each a :class:`pipeline.app.stages.framework.Stage`; see docs/ARCHITECTURE.md.

load -> train -> encode -> concepts -> cluster -> concept_tests -> project -> fit.<row> (one per explainer)
-> evaluate -> [completeness] (concept runs) -> [counterfactuals] -> report. :func:`declared_stages` is the list the runner
loops over; a new stage is one module here plus one line in that list.
"""

from __future__ import annotations


def declared_stages(cfg: dict) -> list:
    """The stages of one run of ``cfg``, in execution order (each one's inputs come before it):
    the same at every size (docs/out-of-core.md)."""
    from pipeline.app.stages.cluster import CLUSTER
    from pipeline.app.stages.completeness import completeness_stage
    from pipeline.app.stages.concept_tests import CONCEPT_TESTS
    from pipeline.app.stages.concepts import CONCEPTS
    from pipeline.app.stages.encode import ENCODE, TRAIN
    from pipeline.app.stages.evaluate import evaluate_stage
    from pipeline.app.stages.fit import fit_stage
    from pipeline.app.stages.load import LOAD
    from pipeline.app.stages.project import PROJECT
    from pipeline.app.stages.report import figures_stage, report_stage

    rows = list(cfg["explainer"])
    # the concepts (fitted on their examples) come before the clustering, whose pass over latents on
    # disk then also projects them on the CAVs (a by-product for the project stage: one read, not two)
    # the figures are started once the trees are evaluated: worker processes draw them meanwhile
    # each concept is tested on the clustering it explains before the trees may use it (issue 48)
    stages = [LOAD, TRAIN, ENCODE, CONCEPTS, CLUSTER, CONCEPT_TESTS, PROJECT, *(fit_stage(row) for row in rows),
              evaluate_stage(rows), figures_stage(rows)]
    from pipeline.app.stages.concepts import enabled

    concept_run = enabled(cfg)
    if concept_run:  # how much the concepts explain (issue 34)
        stages.append(completeness_stage(rows))
    counterfactuals = cfg.get("counterfactuals", {}).get("name", "none") != "none"
    if counterfactuals:  # imports torch: only when asked for
        from pipeline.app.stages.counterfactuals import COUNTERFACTUALS

        stages.append(COUNTERFACTUALS)
    stages.append(report_stage(rows, counterfactuals, completeness=concept_run))
    return stages
