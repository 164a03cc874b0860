"""What a finished run prints and keeps besides its report: the terminal summary (the step after
the stage loop), the summary of a restored run, and the saved explainer (``<run>/explainer/``).

The runner (:mod:`pipeline.app.running.runner`) calls these after its loop; they read the finished stages
by name, so the runner need not.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pipeline.app.stages.framework import StageOutput
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)


def print_summary(plan, done: dict[str, StageOutput], show: bool = True) -> dict:
    """Print the terminal summary of one finished run (the step after the stage loop); ``show=False``
    prints only where the files went. Returns what was printed as :func:`show_summary` takes it
    (the text, and where the files are relative to the run folder), for the run's kept files."""
    report, load, ref = done["report"].artifact, done["load"].artifact, done["cluster"].artifact
    parts = []
    cfg = plan.config
    if show and plan.display.summary:
        from pipeline.app.report.summary import summary_text

        title = (f"{load.name} ({len(ref.labels)} samples) | encoder={cfg['encoder']['name']} | "
                 f"reference={ref.method}" + (" [chosen using labels]" if ref.uses_labels else ""))
        from pipeline.app.report.run_report import tree_data

        data = report.data if report.data is not None else tree_data(load, ref, done["project"].artifact)
        parts.append(summary_text(title, report.df, report.fits, plan.display.max_rules, data,
                                  stability=(ref.scores or {}).get("stability") if isinstance(ref.scores, dict) else None))
        # a table's own columns as latents (the identity encoder) name the trees' cuts already
        own_columns = load.kind == "tabular" and list(done["encode"].artifact.latent_names) == list(load.feature_names or [])
        if (cfg["concepts"].get("name") or "none") == "none" and not own_columns:
            from pipeline.app.concept_sets.definitions import concept_hint

            parts.append(concept_hint(load.name, load.kind))
        if report.table2 is not None:
            from pipeline.app.report.concept_run import concept_summary_text

            concepts = done["concepts"].artifact
            project = done["project"].artifact
            from pipeline.app.report.completeness_table import completeness_text

            parts.append(concept_summary_text(report.table2, concepts.cav_summary or [], concepts.cav_dropped or {},
                                              project.selection, concepts.discovery, concepts.cav_test,
                                              concepts.provenance, concepts.concept_notes,
                                              completeness=completeness_text(done["completeness"].artifact
                                                                             if "completeness" in done else None),
                                              tests=done["concept_tests"].artifact if "concept_tests" in done else None,
                                              used=project.concept_names, measures=concepts.measures))
    out_dir = Path(report.csv).parent

    def rel(path):
        return None if path is None else Path(path).relative_to(out_dir).as_posix()

    record = {"text": "\n".join(parts), "csv": rel(report.csv), "html": rel(report.html),
              "counterfactuals_csv": rel(report.counterfactuals_csv),
              "counterfactual_space": done["counterfactuals"].artifact.space if report.counterfactuals_csv else None}
    show_summary(record, out_dir)
    return record


def show_summary(record: dict, out_dir: Path) -> None:
    """Print a summary :func:`print_summary` returned, with the paths of the run folder ``out_dir``."""
    if record["text"]:
        print(record["text"])
    if record.get("counterfactuals_csv"):
        print(f"counterfactual explanations ({record['counterfactual_space']} space) written to "
              f"{Path(out_dir) / record['counterfactuals_csv']}")
    print(f"results written to {Path(out_dir) / record['csv']}")
    if record.get("html"):
        print(f"report: {Path(out_dir) / record['html']}")


def save_explainer(cfg: dict, done: dict[str, StageOutput], out_dir: Path) -> None:
    """``<run>/explainer/``, the run applied to new data (docs/explain.md). The run's results stand
    without it: a bundle that cannot be written is a warning naming why, not a failed run."""
    from pipeline.app.explainer.explainer_bundle import write_run_bundle
    from pipeline.app.stores.writing import WriteFailedError

    try:
        write_run_bundle(cfg, done, out_dir)
    except (InvalidInputError, WriteFailedError, OSError, ValueError, KeyError) as exc:
        log.warning("the run's explainer (%s) was not saved: %s: %s; python -m pipeline.explain cannot use this "
                    "run", out_dir / "explainer", type(exc).__name__, exc)
