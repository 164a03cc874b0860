"""``run(cfg)``: the whole pipeline from a composed config (no Hydra decorator; tests and
notebooks call it with :func:`pipeline.app.config.compose_config`).

load -> encode -> cluster -> concepts -> project -> fit (one per explainer) -> evaluate -> report.
"""

from __future__ import annotations

import copy
import os
import sys
import logging
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf
from threadpoolctl import threadpool_limits

from pipeline.app.cache import StageCache
from pipeline.app.explainers import HOW_TO_PROVIDE, get_spec
from pipeline.app.report.concept_run import report_concepts
from pipeline.app.report.summary import summary_text
from pipeline.app.report.tables import results_frame
from pipeline.app.report.writer import write_status, write_tables, write_trees
from pipeline.app.stages.base import execute
from pipeline.app.stages.cluster import CLUSTER
from pipeline.app.stages.concepts import CONCEPTS
from pipeline.app.stages.encode import execute_encode
from pipeline.app.stages.evaluate import evaluate
from pipeline.app.stages.fit import fit_stage
from pipeline.app.stages.load import LOAD
from pipeline.app.stages.project import PROJECT
from pipeline.study import compare_with_published
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

# What each clustering can hand to explainers (best_of is checked after it has chosen).
_PROVIDES = {"gmm": {"labels", "centers", "mixture"}, "kmeans": {"labels", "centers"},
             "spectral": {"labels", "graph"}, "dbscan": {"labels"}}


def to_plain(cfg: DictConfig | dict) -> dict:
    """The resolved config as plain dicts/lists; a clear error if ``paths.output_dir`` is unset."""
    if isinstance(cfg, dict):
        return copy.deepcopy(cfg)
    cfg = copy.deepcopy(cfg)
    OmegaConf.set_struct(cfg, False)
    cfg.pop("hydra", None)
    try:
        str(cfg.paths.output_dir)
    except Exception:
        raise InvalidInputError(
            "paths.output_dir is not set: outside `python -m pipeline` (compose API, notebooks) pass "
            "paths.output_dir=<dir> as an override."
        ) from None
    return OmegaConf.to_container(cfg, resolve=True)


def parse_force(value) -> frozenset:
    """``+force=encode``, ``+force=[encode,cluster]``, ``+force=all`` -> set of stage names."""
    if value is None:
        return frozenset()
    items = [value] if isinstance(value, str) else list(value)
    return frozenset(s.strip() for item in items for s in str(item).split(",") if s.strip())


def check_request(cfg: dict) -> None:
    """Fail before any expensive stage on what the config alone shows to be impossible."""
    if not cfg["explainer"]:
        raise InvalidInputError("no explainer selected; choose at least one, e.g. explainer=[mmdt,cart].")
    method = cfg["clustering"]["name"]
    provided = _PROVIDES.get(method)
    for row, spec in cfg["explainer"].items():
        needs = get_spec(spec["name"]).needs
        if cfg["concepts"]["name"] == "none" and "cavs" in needs:
            raise InvalidInputError(f"explainer {row!r} needs cavs; {HOW_TO_PROVIDE['cavs']}.")
        missing = sorted(needs - {"cavs"} - provided) if provided is not None else []
        if missing:
            hints = "; ".join(HOW_TO_PROVIDE[m] for m in missing)
            raise InvalidInputError(
                f"explainer {row!r} ({spec['name']}) needs {', '.join(missing)}, which clustering={method} cannot "
                f"provide. To fix it: {hints}; or drop {row!r} from the explainer list."
            )


def run_stages(cfg: dict, cache: StageCache, keep_going: bool = False):
    """All stages up to the fitted trees. Returns (finished stages, fits, explainer errors)."""
    done = {}
    done["load"] = execute(LOAD, cfg, cache, done)
    done["encode"] = execute_encode(cfg, cache, done["load"])
    for stage in (CLUSTER, CONCEPTS, PROJECT):
        done[stage.name] = execute(stage, cfg, cache, done)
    fits, errors = {}, {}
    for row in cfg["explainer"]:
        try:
            fits[row] = execute(fit_stage(row), cfg, cache, done).artifact
        except InvalidInputError as exc:
            if not keep_going:
                raise
            log.error("explainer %s failed: %s", row, exc)
            errors[row] = str(exc)
    return done, fits, errors


def run_single(cfg: dict, cache: StageCache, out_dir: Path, keep_going: bool = False, summary: bool = True):
    """One dataset: stages, evaluation, report files. Returns the results DataFrame."""
    check_request(cfg)
    done, fits, errors = run_stages(cfg, cache, keep_going)
    load = done["load"].artifact
    rows = evaluate(load.get("y"), done["cluster"].artifact, fits)
    rows += [{"explainer": row, "method": cfg["explainer"][row]["name"], "error": err} for row, err in errors.items()]
    df = results_frame(rows, {"dataset": load["name"], "clustering": cfg["clustering"]["name"]})
    write_trees(out_dir, fits, cfg["report"]["figures"], None)
    csv, _ = write_tables(out_dir, df)
    if summary and cfg["report"]["summary"]:
        ref = done["cluster"].artifact
        title = (f"{load['name']} ({len(ref['labels'])} samples) | encoder={cfg['encoder']['name']} | "
                 f"reference={ref['method']}" + (" [chosen using labels]" if ref.get("uses_labels") else ""))
        print(summary_text(title, df, fits, cfg["report"]["max_rules"]))
    if cfg["concepts"]["name"] != "none":  # Table-2 row, CAV table, files for the notebook (issue 6)
        report_concepts(cfg, done, df, out_dir, summary and cfg["report"]["summary"])
    if cfg.get("counterfactuals", {}).get("name", "none") != "none":  # issue 8: TGT / DBM between clusters
        from pipeline.app.report.counterfactual_plots import write_counterfactuals
        from pipeline.app.stages.counterfactuals import counterfactuals_stage
        from pipeline.app.stages.encode import trained_encoder

        stage = counterfactuals_stage(lambda: trained_encoder(cfg, cache, done["load"],
                                                              done["encode"].artifact.get("checkpoint_sha256")))
        cf = execute(stage, cfg, cache, done).artifact
        cf_csv = write_counterfactuals(out_dir, cf, cfg["report"]["figures"])[0]
        print(f"counterfactual explanations ({cf['space']} space) written to {cf_csv}")
    print(f"results written to {csv}")
    return df


def run_study(cfg: dict, cache: StageCache, out_dir: Path) -> pd.DataFrame:
    """An experiment over several datasets (``study.runs``); writes results + the published comparison."""
    frames = []
    for name, spec in cfg["study"]["runs"].items():
        sub = copy.deepcopy(cfg)
        sub["dataset"] = spec["dataset"]
        if spec.get("clustering"):
            sub["clustering"] = spec["clustering"]
        if spec.get("explainers") is not None:
            unknown = sorted(set(spec["explainers"]) - set(cfg["explainer"]))
            if unknown:
                raise InvalidInputError(f"study run {name!r} lists explainers {unknown} that are not in the explainer "
                                        f"config {sorted(cfg['explainer'])}.")
            sub["explainer"] = {row: cfg["explainer"][row] for row in spec["explainers"]}
        log.info("study %s: run %s", cfg["study"]["name"], name)
        df = run_single(sub, cache, out_dir / name, keep_going=True, summary=False)
        df.insert(0, "run", name)
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    csv, _ = write_tables(out_dir, df)
    comparison = compare_with_published(df, cfg["study"]["published"])
    path, _ = write_tables(out_dir, comparison, "comparison")
    print(f"{cfg['study']['name']}: ours beside published ({cfg['study'].get('source', '')})")
    print(comparison.to_string(index=False, na_rep=""))
    print(f"comparison written to {path}")
    print(f"results written to {csv}")
    return df


@contextmanager
def thread_limit(n: int | None):
    """Cap BLAS/OpenMP pools and torch's intra-op threads at ``n`` during a run (None: no cap).

    threadpoolctl only reaches libraries that are already loaded, and the encode stage imports
    torch lazily, so torch is capped separately: through OMP_NUM_THREADS if it is not imported
    yet (torch reads it at import), else with ``torch.set_num_threads`` (restored afterwards).
    On a loaded 2-core machine an uncapped torch ran VaDE ~15x slower than with one thread.
    """
    if n is None:
        yield
        return
    torch = sys.modules.get("torch")
    previous = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(n)
    else:
        os.environ.setdefault("OMP_NUM_THREADS", str(n))
    try:
        with threadpool_limits(limits=n):
            yield
    finally:
        if previous is not None:
            torch.set_num_threads(previous)


def run(cfg: DictConfig | dict) -> pd.DataFrame:
    """Run the configured pipeline; returns the results table (also written to ``results.csv``)."""
    plain = to_plain(cfg)
    force = parse_force(plain.pop("force", None))
    out_dir = Path(plain["paths"]["output_dir"])
    cache = StageCache(Path(plain["paths"]["cache_dir"]), enabled=plain["cache"]["enabled"], force=force)
    if plain["paths"].get("model_cache_dir") is not None or plain.get("offline") is not None:
        from pipeline.encoders.environment import configure_model_caches

        configure_model_caches(plain["paths"].get("model_cache_dir"), offline=plain.get("offline"))
    start = time.time()
    write_status(out_dir, {"status": "running", "started": start})
    try:
        with thread_limit(plain.get("threads")):
            if plain["study"]["runs"]:
                df = run_study(plain, cache, out_dir)
            else:
                df = run_single(plain, cache, out_dir)
    except BaseException as exc:
        write_status(out_dir, {"status": "failed", "error": f"{type(exc).__name__}: {exc}",
                               "traceback": traceback.format_exc(), "seconds": time.time() - start})
        raise
    write_status(out_dir, {"status": "ok", "seconds": time.time() - start, "results": str(out_dir / "results.csv"),
                           "cache": [vars(e) for e in cache.events]})
    return df
