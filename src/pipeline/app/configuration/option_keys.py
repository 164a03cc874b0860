"""Every option a user sets is read by the chosen target, or refused (issue 50, item 2).

The schema (:mod:`pipeline.app.configuration.config`) gives ``dataset``, ``encoder`` and ``clustering`` one set
of keys for every option, so ``dataset=iris dataset.split=test`` or ``dataset=digits
dataset.image_size=28`` used to compose and change nothing. A key is *read* by the chosen option when

* every option of the group reads it (:data:`GENERIC`: ``dataset.classes``, ``encoder.checkpoint``...);
* the option's target takes it as an argument the stage offers (:data:`OFFERED`: an encoder's
  ``device`` and ``batch_size``, a clustering's ``n_clusters`` and ``candidates``);
* a dataset loader declares it (:func:`pipeline.app.data.dataset.reads`: ``split``, ``root``...);
* or the option's config forwards it to the target's ``params`` under the same name
  (``dataset=files``: ``params.path: ${dataset.path}``; ``encoder=torch``: ``params.layer``).

A key set to anything but the schema's default that none of these reads is an error naming the
key, the option, its target and the keys it reads. ``params`` keys are checked against what the
target takes: a loader's arguments, the clustering method's estimator arguments
(:func:`pipeline.clustering.method_params`); an encoder's by
:func:`pipeline.app.configuration.instantiate.check_params`. A target of the user's own that takes ``**kwargs``
(or a loader that does not declare what it reads) is not second-guessed.
"""

from __future__ import annotations

import dataclasses

from pipeline.validation import InvalidInputError

#: keys every option of the group reads (the stages read them, whatever the target)
GENERIC = {
    "dataset": {"_target_", "name", "classes", "n_samples", "standardize", "params", "memory_budget", "chunk_rows"},
    "encoder": {"_target_", "name", "params", "fit_split", "checkpoint"},
    "clustering": {"_target_", "name", "params", "provides", "sample_rows"},
}
#: keys a stage offers to the target, which reads them when its signature names them
OFFERED = {"dataset": (), "encoder": ("device", "batch_size"), "clustering": ("n_clusters", "candidates")}
#: arguments a stage passes itself, never from ``params``
POSITIONAL = {"dataset": {"spec", "paths", "random_state"}, "clustering": {"X", "random_state", "y_true"}}


def _defaults(group: str) -> dict:
    from omegaconf import MISSING

    from pipeline.app.configuration.config import ClusteringConfig, DatasetConfig, EncoderConfig

    schema = {"dataset": DatasetConfig, "encoder": EncoderConfig, "clustering": ClusteringConfig}[group]
    out = {}
    for f in dataclasses.fields(schema):
        if f.default is not dataclasses.MISSING and f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _signature(node: dict, group: str) -> tuple[set[str], bool] | None:
    """(argument names, takes ``**kwargs``) of the node's target; None when unknown. An encoder
    class is read from its source when its module is not imported (no torch import at start-up)."""
    import inspect

    from pipeline.app.configuration.instantiate import accepted, declared_params, locate, target_of

    target = target_of(node, group)
    if group == "encoder":
        declared = declared_params(target)
        if declared is not None:
            return declared
    fn = locate(target, group)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    return accepted(fn), any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())


def _option(node: dict, group: str) -> str:
    return f"{node.get('_target_')} ({group} {node.get('name') or '?'})"


def read_keys(node: dict, group: str) -> set[str] | None:
    """The keys of ``node`` (a resolved ``dataset``/``encoder``/``clustering`` config) its option
    reads; None when that cannot be told (a target of the user's own)."""
    params = node.get("params") or {}
    forwarded = {k for k, v in params.items() if k in node and k != "params" and node[k] == v}
    if group == "dataset":
        declared = getattr(_target(node, group), "config_keys", None)
        if declared is None:
            return None
        return GENERIC[group] | set(declared) | forwarded
    sig = _signature(node, group)
    if sig is None:
        return None
    names, _ = sig
    return GENERIC[group] | {k for k in OFFERED[group] if k in names} | forwarded


def check_keys_read(cfg: dict, groups=("dataset", "encoder", "clustering")) -> None:
    """Refuse a key set to a non-default value that the chosen option does not read (module docstring)."""
    for group in groups:
        node = cfg.get(group) or {}
        if not node.get("_target_"):
            continue
        defaults = _defaults(group)
        read = None
        for key, value in node.items():
            if key in GENERIC[group] or key not in defaults or value == defaults[key]:
                continue
            read = read_keys(node, group) if read is None else read
            if read is None:
                return
            if key not in read:
                valid = sorted(k for k in read if k != "_target_")
                raise InvalidInputError(
                    f"{group}.{key}={value!r}: {_option(node, group)} does not read {group}.{key}, so it would change "
                    f"nothing. The {group} keys it reads: {', '.join(valid)} (its own arguments go under "
                    f"{group}.params: {', '.join(sorted(param_names(node, group) or ())) or 'none'}).")
        check_params_read(node, group)


def param_names(node: dict, group: str) -> set[str] | None:
    """What ``<group>.params`` may hold for this option (None: anything, or unknown)."""
    method = getattr(_target(node, group), "method", None) if group == "clustering" else None
    if method is not None:
        from pipeline.clustering import method_params

        return method_params(method)
    sig = _signature(node, group)
    if sig is None or sig[1]:
        return None
    return sig[0] - POSITIONAL.get(group, set()) - set(OFFERED.get(group, ()))


def check_params_read(node: dict, group: str) -> None:
    """``<group>.params`` keys the option's target does not take (datasets and clusterings; an
    encoder's are checked with its constructor, :func:`pipeline.app.configuration.instantiate.check_params`)."""
    if group == "encoder":
        return
    params = node.get("params") or {}
    method = getattr(_target(node, group), "method", None) if group == "clustering" else None
    if method is not None:
        from pipeline.clustering import check_method_params

        if method != "best_of":
            return check_method_params(method, params)
        from pipeline.clustering import METHODS

        for name, sub in params.items():  # best_of: one entry per method it may try
            if name not in METHODS or name == "best_of":
                raise InvalidInputError(
                    f"clustering.params.{name}: {_option(node, group)} takes one entry of params per "
                    f"method it may try ({', '.join(m for m in METHODS if m != 'best_of')}); {name!r} is not one.")
            check_method_params(name, sub or {}, f"clustering.params.{name}")
        return
    valid = param_names(node, group)
    unknown = sorted(set(params) - valid) if valid is not None else []
    if unknown:
        raise InvalidInputError(f"{group}.params.{unknown[0]}: {_option(node, group)} takes no parameter "
                                f"{unknown[0]!r}" + (f" (nor {unknown[1:]})" if len(unknown) > 1 else "")
                                + f"; its parameters: {', '.join(sorted(valid)) or 'none'}.")


def _target(node: dict, group: str):
    from pipeline.app.configuration.instantiate import locate, target_of

    return locate(target_of(node, group), group)
