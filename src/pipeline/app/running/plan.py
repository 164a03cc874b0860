"""The run plan: every start-up check once, then what the run decided from its config.

``python -m pipeline`` composes the config (Hydra); :func:`validate` then runs every check the
config alone allows, in one place and before any stage:

* the values (:mod:`pipeline.app.startup.checks`): no ``+key`` that nothing reads, ``seed``,
  ``+force=`` names real stages, ``threads``, ``cpu_code_path``, sizes, writable directories,
  the samples (``clustering.sample_rows``, ``fit.sample_rows``), ``concepts.units``,
  ``concepts.tests`` and, for a study, the explainer rows its runs name;
* the settings (:mod:`pipeline.app.startup.settings_checks`): chunk sizes, the memory budget, every
  ``compute`` setting (a Dask address answers);
* the request (:mod:`pipeline.app.startup.capabilities`, :mod:`pipeline.app.configuration.option_keys`): every
  ``_target_`` imports and takes its ``params``, every key set is read by the chosen option, the
  user's files exist, every explainer gets what it needs from the clustering. These import the
  run's libraries (~2 s); a config that passed them with the same code is not checked again
  (``checked``, :func:`pipeline.app.stores.run_outputs.checked_before`).

It returns a :class:`RunPlan`: the stage list, the row plan (memory budget, chunk rows, backend,
samples per purpose: :class:`pipeline.app.data.budget.RowPlan`), the derived settings (the
number of clusters, the display units) and the report's settings, which enter no stage's key.
The stages read the plan (offered as ``plan``) for their decisions, not raw config. What only the
data can tell (a sample larger than the data, two rows per cluster, a chunk wider than the
budget) is checked where the data are first seen, each naming its key as well.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable

from pipeline.app.data.budget import RowPlan
from pipeline.validation import InvalidInputError

#: the config's display settings: read by the report, never part of a stage's key
DISPLAY_KEYS = {"concepts": ("units",)}


@dataclass(frozen=True)
class Display:
    """How the run's results are shown (``report.*``, ``concepts.units``): report settings, in no
    stage's cache key."""

    units: str | None = None  # concepts.units (None: the concept set's default)
    figures: bool = True
    html: bool = True
    summary: bool = True
    max_rules: int = 12


@dataclass(frozen=True)
class RunPlan:
    """A checked run: what :func:`validate` returns, the runner runs and the stages read (offered as ``plan``).

    Attributes
    ----------
    cfg : dict
        The resolved config the stages compute from and key on: without ``+force`` and the display
        settings (:data:`DISPLAY_KEYS`, ``report``), which are :attr:`display`.
    config : dict
        The whole resolved config (the run's files are keyed on it).
    stages : tuple of Stage
        The stages of the run, in order (:func:`pipeline.app.stages.declared_stages`); not pickled.
    rows : RowPlan
        Memory budget, chunk rows, the backend's chunk share and the samples per purpose.
    backend : type
        The compute backend's class (``compute=``): where chunk passes run.
    force : frozenset of str
        The stages ``+force=`` recomputes.
    n_clusters : int or None
        ``clustering.n_clusters``; None: the number of classes of the data (without labels, the K
        of lowest BIC).
    display : Display
        The report's settings.
    concepts : bool
        A concept run (``concepts=`` not none).
    threads : int or None
        The run's thread cap (``threads=``).
    callbacks : tuple of RunCallback
        What the runner calls at its events (:func:`pipeline.app.stages.declared_callbacks`: a
        stage computed ahead, the figure workers started early); not pickled.
    studies : dict
        A study's runs: name -> the plan of that run.
    """

    cfg: dict
    config: dict
    stages: tuple = ()
    rows: RowPlan = field(default_factory=lambda: RowPlan(budget=1 << 62))
    backend: type | None = None
    force: frozenset = frozenset()
    n_clusters: int | None = None
    display: Display = field(default_factory=Display)
    concepts: bool = False
    threads: int | None = 1
    callbacks: tuple = ()
    studies: dict = field(default_factory=dict)

    def __getstate__(self):  # a worker process gets the plan without its stages (closures)
        state = dict(self.__dict__)
        state["stages"], state["callbacks"] = (), ()
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)


def draw_up(cfg: dict, force: frozenset = frozenset()) -> RunPlan:
    """The plan of a resolved config, without checking it (see :func:`validate`)."""
    from pipeline.app.stages import declared_callbacks, declared_stages

    config = copy.deepcopy(cfg)
    config.pop("force", None)
    compute_cfg = {k: v for k, v in config.items() if k != "report"}
    for group, keys in DISPLAY_KEYS.items():
        if isinstance(compute_cfg.get(group), dict):
            compute_cfg[group] = {k: v for k, v in compute_cfg[group].items() if k not in keys}
    report = config.get("report") or {}
    display = Display(units=(config.get("concepts") or {}).get("units"),
                      **{k: report[k] for k in ("figures", "html", "summary", "max_rules") if k in report})
    from pipeline.app.execution.compute import backend_class

    backend = backend_class(config.get("compute"))
    from pipeline.app.configuration.config import concepts_enabled

    concepts = concepts_enabled(config)
    plan = RunPlan(cfg=compute_cfg, config=config, rows=RowPlan.from_config(config, backend.chunk_share),
                   backend=backend, force=frozenset(force), n_clusters=(config.get("clustering") or {}).get("n_clusters"),
                   display=display, concepts=concepts, threads=config.get("threads"))
    stages = tuple(declared_stages(compute_cfg)) if compute_cfg.get("explainer") is not None else ()
    plan = _replace(plan, stages=stages, callbacks=tuple(declared_callbacks(compute_cfg)) if stages else ())
    runs = (config.get("study") or {}).get("runs") or {}
    if runs:
        plan = _replace(plan, studies={name: draw_up(sub) for name, sub in study_configs(config).items()})
    return plan


def _replace(plan: RunPlan, **changes) -> RunPlan:
    import dataclasses

    return dataclasses.replace(plan, **changes)


def study_configs(cfg: dict) -> dict[str, dict]:
    """A study's runs (``study.runs``) as configs of their own: each run's dataset, its clustering
    if it names one, and the explainer rows it lists (an unknown row is an error)."""
    out = {}
    for name, spec in cfg["study"]["runs"].items():
        sub = copy.deepcopy(cfg)
        sub["study"] = {**sub["study"], "runs": {}}  # a run of the study is a single run
        sub["dataset"] = spec["dataset"]
        if spec.get("clustering"):
            sub["clustering"] = spec["clustering"]
        if spec.get("explainers") is not None:
            unknown = sorted(set(spec["explainers"]) - set(cfg["explainer"]))
            if unknown:
                raise InvalidInputError(f"study run {name!r} lists explainers {unknown} that are not in the explainer "
                                        f"config {sorted(cfg['explainer'])}.")
            sub["explainer"] = {row: cfg["explainer"][row] for row in spec["explainers"]}
        out[name] = sub
    return out


def validate(cfg, checked: Callable[[dict], bool] | None = None,
             drawn: Callable[[RunPlan], None] | None = None) -> RunPlan:
    """Every start-up check of a composed config (module docstring), then its :class:`RunPlan`.

    Parameters
    ----------
    cfg : DictConfig or dict
        The composed config (resolved here: a value of the wrong type is one paragraph).
    checked : callable (config: dict) -> bool, optional
        True when this config passed the request checks before with the same code: they are skipped.
    drawn : callable (plan) -> None, optional
        Called with the plan once the config's values are checked and before the request checks
        (which import the run's libraries, ~2 s), so that workers the run will want can start meanwhile.
    """
    plain = to_plain(cfg)
    plan = draw_up(plain, check_values(plain))
    runs = list(plan.studies.values()) or [plan]
    if drawn is not None:
        drawn(plan)
    for run in runs:
        if checked is None or not checked(run.config):
            check_request(run.cfg)
    return plan


def to_plain(cfg) -> dict:
    """The resolved config as plain dicts/lists; a clear error if ``paths.output_dir`` is unset."""
    if isinstance(cfg, dict):
        return copy.deepcopy(cfg)
    from omegaconf import OmegaConf

    from pipeline.app.startup.checks import resolve_config

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
    return resolve_config(cfg)  # a bad value (PIPELINE_THREADS=abc) is one paragraph, not a traceback


def check_values(cfg: dict) -> frozenset:
    """The checks of a resolved config's values (the first part of :func:`validate`, cheap); returns
    the stages ``+force=`` names."""
    from pipeline.app.startup import checks
    from pipeline.app.data.budget import check_sample_setting
    from pipeline.app.startup.settings_checks import check_compute_settings, check_dataset_settings
    from pipeline.app.stages import forceable_stages

    checks.check_keys(cfg)
    checks.check_seed(cfg.get("seed"))
    force = checks.check_force(cfg.get("force"), forceable_stages(cfg))
    checks.check_threads(cfg.get("threads"))
    checks.check_code_path(cfg.get("cpu_code_path", "portable"))
    checks.check_sizes(cfg)
    checks.check_directories(cfg.get("paths") or {})
    check_dataset_settings(cfg.get("dataset") or {})
    check_compute_settings(cfg.get("compute"))
    # what the stages used to check when they reached it: the samples, concepts.units, a study's rows
    check_sample_setting((cfg.get("clustering") or {}).get("sample_rows"), "clustering.sample_rows")
    check_sample_setting((cfg.get("fit") or {}).get("sample_rows"), "fit.sample_rows")
    concepts = cfg.get("concepts") or {}
    units = concepts.get("units")
    if units is not None:
        from pipeline.concepts.units import UNITS

        if units not in UNITS:
            raise InvalidInputError(f"concepts.units={units!r} is not a unit; choose one of {list(UNITS)} (or null "
                                    "for the default: probability for calibrated CAVs, else percentile).")
    if (cfg.get("study") or {}).get("runs"):
        study_configs(cfg)
    return force


def check_request(cfg: dict) -> None:
    """What the config shows to be impossible before any expensive stage: an explainer, every target
    and its parameters, the keys each option reads, the user's files, the capabilities, the bounds
    of ``concepts.tests`` on a concept run."""
    from pipeline.app.startup.capabilities import check_capabilities, check_targets, check_user_files

    if not cfg["explainer"]:
        raise InvalidInputError("no explainer selected; choose at least one, e.g. explainer=[mmdt,cart].")
    check_targets(cfg)
    check_user_files(cfg)
    check_capabilities(cfg)
    concepts = cfg.get("concepts") or {}
    if concepts.get("_target_") and concepts.get("name", "none") != "none" and concepts.get("tests"):
        from pipeline.app.stages.concept_tests import check_tests_config  # imports the CAV code (scikit-learn)

        check_tests_config(concepts["tests"])


__all__ = ["DISPLAY_KEYS", "Display", "RunPlan", "check_request", "check_values", "draw_up",
           "study_configs", "to_plain", "validate"]
