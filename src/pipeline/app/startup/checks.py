"""Checks of the command line and of the config's values: one clear paragraph each.

Before Hydra composes: :func:`check_group_choices` and :func:`check_override_keys` (a misspelt
option or key on the command line). After: :func:`resolve_config` turns OmegaConf's resolution
errors (``PIPELINE_THREADS=abc``, a value of the wrong type) into :class:`InvalidInputError`,
and the checks of what the schema's types cannot say — no ``+key`` that nothing reads, a valid
``seed``, ``+force=`` names real stages, ``threads`` >= 1, sizes large enough for the stages
(``dataset.n_samples`` >= 2 per cluster, ...), directories creatable — are run, with every other
start-up check, by the run plan's :func:`pipeline.app.running.plan.validate`.
:func:`check_cluster_sizes` repeats the size check once the data are loaded and the number of
clusters is known.
"""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.validation import InvalidInputError

#: where each path comes from, for the error messages
_PATH_HINTS = {"cache_dir": "PIPELINE_CACHE_DIR", "models_dir": "PIPELINE_MODELS_DIR", "log_dir": "PIPELINE_LOG_DIR",
               "model_cache_dir": "PIPELINE_MODEL_CACHE", "output_dir": "hydra.run.dir"}
_ENV_OF = {"threads": "PIPELINE_THREADS", "offline": "PIPELINE_OFFLINE", "cpu_code_path": "PIPELINE_CPU_CODE_PATH"}


def resolve_config(cfg) -> dict:
    """``OmegaConf.to_container(cfg, resolve=True)`` with one-paragraph errors for bad values."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        env = _ENV_OF.get(str(key))
        source = f" (it comes from the environment variable {env}={os.environ.get(env)!r})" if env and os.environ.get(env) \
            else ""
        message = str(exc).split("\n")[0]
        raise InvalidInputError(f"config value {key} is invalid{source}: {message}. Give {key} a value of the right "
                                "type on the command line (python -m pipeline --cfg job shows the config) or fix/unset "
                                "the environment variable.") from None


def parse_force(value) -> frozenset:
    """``+force=encode``, ``+force=[encode,cluster]``, ``+force=all`` -> set of stage names."""
    if value is None:
        return frozenset()
    items = [value] if isinstance(value, str) else list(value)
    return frozenset(s.strip() for item in items for s in str(item).split(",") if s.strip())


def check_force(force, known) -> frozenset:
    """The stages named by ``+force=``; an unknown name is an error listing the known ones."""
    names = parse_force(force)
    known = list(dict.fromkeys(known))
    unknown = sorted(names - set(known) - {"all"})
    if unknown:
        raise InvalidInputError(
            f"+force={','.join(unknown)}: no such stage. Stages that can be forced: {', '.join(known)} "
            "(or all), e.g. +force=encode or +force=[cluster,fit]."
        )
    return names


def check_threads(value) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        env = os.environ.get("PIPELINE_THREADS")
        source = f" (from PIPELINE_THREADS={env!r})" if env is not None else ""
        raise InvalidInputError(f"threads={value!r}{source} is not a thread count: use an integer >= 1, or "
                                "threads=null for each library's default.")


def check_code_path(value) -> None:
    from pipeline.threads import CPU_CODE_PATHS

    if value not in CPU_CODE_PATHS:
        env = os.environ.get("PIPELINE_CPU_CODE_PATH")
        source = f" (from PIPELINE_CPU_CODE_PATH={env!r})" if env is not None else ""
        raise InvalidInputError(f"cpu_code_path={value!r}{source} is not a setting: use portable (the same numbers "
                                "on any x86-64 machine) or native (each library's fastest path on this machine).")


def check_sizes(cfg: dict) -> None:
    """Sizes the config alone shows to be too small (the data's own size is checked after loading)."""
    ds = cfg.get("dataset") or {}
    n = ds.get("n_samples")
    k = (cfg.get("clustering") or {}).get("n_clusters")
    if k is not None and (isinstance(k, bool) or int(k) < 1):
        raise InvalidInputError(f"clustering.n_clusters={k} must be >= 1 (or null: the number of classes).")
    if n is not None:
        if isinstance(n, bool) or int(n) < 4:
            raise InvalidInputError(f"dataset.n_samples={n}: a subsample needs at least 2 samples per cluster "
                                    "(so at least 4); set a larger dataset.n_samples or null for the whole dataset.")
        if k is not None and int(n) < 2 * int(k):
            raise InvalidInputError(f"dataset.n_samples={n} is too small for clustering.n_clusters={k}: at least 2 "
                                    f"samples per cluster are needed (n_samples >= {2 * int(k)}).")
    for row, spec in (cfg.get("explainer") or {}).items():
        leaves = (spec or {}).get("n_leaves")
        if leaves is not None and (isinstance(leaves, bool) or int(leaves) < 1):
            raise InvalidInputError(f"explainer.{row}.n_leaves={leaves} must be >= 1 (or null: one per cluster).")


def check_cluster_sizes(n_samples: int, n_clusters: int, what: str = "the dataset") -> None:
    """At least 2 samples per cluster; else ARI/q on a handful of points are meaningless."""
    if n_clusters < 1 or n_samples < 2 * n_clusters:
        raise InvalidInputError(
            f"{what} has {n_samples} samples for {n_clusters} clusters; at least 2 samples per cluster are needed "
            f"({2 * max(n_clusters, 1)}). Raise dataset.n_samples (or null: all samples) or lower clustering.n_clusters."
        )


def check_directories(paths: dict, keys=("cache_dir", "models_dir", "output_dir", "model_cache_dir")) -> None:
    """A clear error for a directory the run will write to that cannot be created or written.

    Nothing is created here (stages create directories when they first write): the directory,
    or the nearest part of its path that exists, must be a directory this process may write
    into. Probing by creating and removing the directory raced with concurrent sweep jobs
    sharing it (one job removed the probe while another was checking it).
    """
    for key in keys:
        value = paths.get(key)
        if value is None:
            continue
        path = Path(value).expanduser()
        hint = _PATH_HINTS.get(key, f"paths.{key}")
        probe = path
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if not probe.is_dir():
            reason = f"{probe} exists and is not a directory"
        elif not os.access(probe, os.W_OK | os.X_OK):
            reason = "it is not writable" if probe == path else f"{probe} is not writable"
        else:
            continue
        raise InvalidInputError(f"paths.{key}={path} cannot be used: {reason}. Choose a writable directory with "
                                f"paths.{key}=<dir> (or the environment variable {hint}).")


#: top-level keys the schema does not declare but the pipeline reads (``+force=<stage>``)
_EXTRA_TOP_LEVEL = {"force"}


def _schema_fields(tp):
    """``{name: type}`` of a dataclass schema type (unwrapping Optional), else None."""
    import dataclasses
    import typing

    if typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = args[0] if len(args) == 1 else tp
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return {f.name: hints[f.name] for f in dataclasses.fields(tp)}
    return None


def _unread_keys(value, tp, path: str):
    """(dotted key, valid names) for every key of ``value`` the schema type ``tp`` does not declare;
    free-form dicts (``params``, ``Dict[str, Any]``) are the targets' business (check_params)."""
    import typing

    fields = _schema_fields(tp)
    if fields is not None:
        if not isinstance(value, dict):
            return
        for key, sub in value.items():
            if key not in fields:
                yield (f"{path}.{key}" if path else str(key)), sorted(fields)
            else:
                yield from _unread_keys(sub, fields[key], f"{path}.{key}" if path else str(key))
        return
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            yield from _unread_keys(value, args[0], path)
    elif origin in (dict, typing.Dict) and isinstance(value, dict):
        item = typing.get_args(tp)[1] if typing.get_args(tp) else typing.Any
        if _schema_fields(item) is not None:
            for key, sub in value.items():
                yield from _unread_keys(sub, item, f"{path}.{key}")


def check_keys(cfg: dict) -> None:
    """Every key of the composed config is one a stage reads: a ``+key=value`` that adds an
    unknown key (``+clustering.n_cluster=5``) is an error naming the nearest valid key, instead
    of being composed in and silently ignored. Parameters under ``params`` are checked against
    their target's signature elsewhere (:func:`pipeline.app.configuration.instantiate.check_params`)."""
    from pipeline.app.configuration.config import Config

    top = {k: v for k, v in cfg.items() if k not in _EXTRA_TOP_LEVEL and k != "hydra"}
    for key, valid in _unread_keys(top, Config, ""):
        raise _unknown_key(key, valid, "so nothing would read it")


def _unknown_key(key: str, valid: list, consequence: str) -> InvalidInputError:
    """``clustering.n_cluster: clustering has no setting 'n_cluster', <consequence>. Did you mean
    clustering.n_clusters? Valid keys there: ...``"""
    import difflib

    parent, _, name = key.rpartition(".")
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    where = f"{parent} has" if parent else "the config has"
    hint = f"Did you mean {parent + '.' if parent else ''}{close[0]}? " if close else ""
    return InvalidInputError(
        f"{key}: {where} no setting {name!r}, {consequence}. {hint}Valid keys there: "
        f"{', '.join(valid)} (python -m pipeline --cfg job shows the whole config; a target's own "
        f"arguments go under its params, e.g. clustering.params.<name>)."
    )


def check_override_keys(args: list[str], config_dir) -> None:
    """A plain override of a key the schema does not have (``clustering.n_cluster=5``, ``sed=1``)
    names the nearest valid key at once, instead of Hydra's "Could not override ... To append to
    your config use +clustering.n_cluster=5" (whose advice only leads to :func:`check_keys`'
    error). Group choices (``dataset=iris``), ``+``/``++``/``~`` overrides, ``hydra.*``,
    ``+force`` and free-form ``params`` are left alone; unparsable command lines are left to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import HydraException

    from pipeline.app.configuration.config import Config

    if any(a.startswith(("--config-dir", "-cd", "--config-path", "-cp")) for a in args):
        return
    candidates = [a for a in args if "=" in a and not a.startswith(("-", "+", "~"))]
    try:
        overrides = OverridesParser.create().parse_overrides(candidates)
    except (HydraException, ValueError):
        return
    root = Path(config_dir)
    for o in overrides:
        key = o.key_or_group
        if (o.type != OverrideType.CHANGE or o.package is not None or "@" in key or "/" in key
                or key.split(".")[0] in _EXTRA_TOP_LEVEL | {"hydra"} or (root / key).is_dir()):
            continue
        nested: dict = {}
        node = nested
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = None
        for unknown, valid in _unread_keys(nested, Config, ""):
            raise _unknown_key(unknown, valid, "so it cannot be set")


def check_seed(value) -> None:
    """``seed`` seeds numpy, scikit-learn and torch: an integer in [0, 2**32 - 1]."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**32 - 1:
        raise InvalidInputError(f"seed={value!r} is not a valid seed: use an integer from 0 to {2**32 - 1} "
                                "(it seeds numpy, scikit-learn and torch), e.g. seed=0.")


def _choice_values(value):
    """The option names an override's value selects (a list, a sweep of lists, a plain name)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _choice_values(item)
    elif hasattr(value, "list") and isinstance(value.list, list):  # ChoiceSweep (a,b / choice(a,b))
        yield from _choice_values(value.list)


def check_group_choices(args: list[str], config_dir) -> None:
    """Every option a command line picks for one of the pipeline's config groups exists, in every
    form: ``explainer=carrt``, ``explainer=[mmdt,carrt]``, ``-m dataset=iris,wne``.

    Hydra lists the valid options only for the bare form; a list or a sweep gets "Could not load
    'explainer/carrt'". Runs before Hydra composes; command lines that add config directories
    (``--config-dir``, ``hydra.searchpath``) or that Hydra cannot parse are left to Hydra.
    """
    import difflib

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    if any(a.startswith(("--config-dir", "-cd", "--config-path", "-cp")) for a in args):
        return
    candidates = [a for a in args if "=" in a and not a.startswith("-")]
    try:
        overrides = OverridesParser.create().parse_overrides(candidates)
    except (HydraException, ValueError):
        return
    if any(o.key_or_group.startswith("hydra.searchpath") for o in overrides):
        return
    root = Path(config_dir)
    for o in overrides:
        group = o.key_or_group.split("@")[0]
        folder = root / group
        if o.is_delete() or "." in group or not folder.is_dir():
            continue
        options = sorted(p.stem for p in folder.glob("*.yaml"))
        for name in _choice_values(o.value()):
            if name in options:
                continue
            close = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
            hint = f" Did you mean {close[0]}?" if close else ""
            raise InvalidInputError(
                f"{o.input_line}: {group} has no option {name!r}.{hint} Valid {group} options: {', '.join(options)} "
                f"(python -m pipeline --help lists every group)."
            )


def params_overrides_as_upserts(args: list[str]) -> list[str]:
    """``group.params.name=value`` -> ``++group.params.name=value``: a target's arguments can be
    set on the command line whether or not its config file lists them
    (``explainer.spex_knn.params.n_neighbors=30``, as the docs write it). Only ``params``
    (free-form, checked against the target's signature before any stage runs, so a misspelt
    name still fails) are treated so; every other key keeps Hydra's strict rules."""
    out = []
    for a in args:
        key = a.split("=", 1)[0]
        if ("=" in a and not a.startswith(("-", "+", "~")) and ".params." in f".{key}"
                and not key.startswith("hydra") and "@" not in key):
            a = "++" + a
        out.append(a)
    return out
