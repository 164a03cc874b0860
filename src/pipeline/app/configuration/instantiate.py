"""The one way a config names code: ``_target_`` + ``params``, built with ``hydra.utils.instantiate``.

Every pluggable piece (dataset loader, encoder, clustering, concept source, CAV fitter,
explainer) is a config node of the lightning-hydra-template shape::

    _target_: pipeline.trees.CART        # any importable callable (class or function)
    params: {max_depth: 3}               # its keyword arguments (nested _target_ nodes are built too)

:func:`factory` turns the node into ``functools.partial(target, **params)`` through
``hydra.utils.instantiate(..., _partial_=True)``, importing the target only then (so an
identity run never imports torch). The stage that owns the group then calls it with the
run-time values it offers (:func:`call`): the dataset's arrays, the seed, the number of
clusters, ... Only the offered keywords that the callable's signature accepts are passed, and
a value set in ``params`` wins over an offered one (unless it is null). Nothing is
registered anywhere: a short name (``explainer=cart``) is just a config file.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from pipeline.validation import InvalidInputError

#: The modules of ``pipeline.app`` that moved into its rooms (issue 49): old dotted path -> new. A
#: ``_target_`` written before the move (a user's config, a saved explainer's encoder) still
#: locates (:func:`current_path`), and the cache keys and the embedding store's identity keep
#: naming the old paths (:func:`stored_paths`), so no cache entry is recomputed.
MOVED = {
    "pipeline.app.runner": "pipeline.app.running.runner",
    "pipeline.app.plan": "pipeline.app.running.plan",
    "pipeline.app.run_summary": "pipeline.app.running.run_summary",
    "pipeline.app.explainer_bundle": "pipeline.app.explainer.explainer_bundle",
    "pipeline.app.bundle_checks": "pipeline.app.explainer.bundle_checks",
    "pipeline.app.concept_explainer": "pipeline.app.explainer.concept_explainer",
    "pipeline.app.explain_options": "pipeline.app.explainer.explain_options",
    "pipeline.app.input_drift": "pipeline.app.explainer.input_drift",
    "pipeline.app.executor": "pipeline.app.execution.executor",
    "pipeline.app.workers": "pipeline.app.execution.workers",
    "pipeline.app.compute": "pipeline.app.execution.compute",
    "pipeline.app.chunk_map": "pipeline.app.execution.chunk_map",
    "pipeline.app.report.encoding": "pipeline.app.execution.encoding",
    "pipeline.app.checks": "pipeline.app.startup.checks",
    "pipeline.app.settings_checks": "pipeline.app.startup.settings_checks",
    "pipeline.app.capabilities": "pipeline.app.startup.capabilities",
    "pipeline.app.weights": "pipeline.app.models.weights",
    "pipeline.app.efficientnet": "pipeline.app.models.efficientnet",
    "pipeline.app.torch_models": "pipeline.app.models.torch_models",
    "pipeline.app.cache": "pipeline.app.stores.cache",
    "pipeline.app.run_outputs": "pipeline.app.stores.run_outputs",
    "pipeline.app.embedding_store": "pipeline.app.stores.embedding_store",
    "pipeline.app.checkpoint": "pipeline.app.stores.checkpoint",
    "pipeline.app.write_errors": "pipeline.app.stores.writing",
    "pipeline.app.status": "pipeline.app.stores.status",
    "pipeline.app.artifacts": "pipeline.app.stores.artifacts",
    "pipeline.app.config": "pipeline.app.configuration.config",
    "pipeline.app.instantiate": "pipeline.app.configuration.instantiate",
    "pipeline.app.option_keys": "pipeline.app.configuration.option_keys",
    "pipeline.app.environment": "pipeline.app.configuration.environment",
    "pipeline.app.network": "pipeline.app.configuration.network",
    "pipeline.app.rundir": "pipeline.app.configuration.rundir",
    "pipeline.app.explainers": "pipeline.app.configuration.explainers",
    "pipeline.app.measured_text": "pipeline.app.concept_sets.measured_text",
}


def current_path(path: str) -> str:
    """``path`` with a module moved into a room of ``pipeline.app`` (:data:`MOVED`) at its new place."""
    if path.startswith("pipeline.app."):
        for old, new in MOVED.items():
            if path == old or path.startswith(old + "."):
                return new + path[len(old):]
    return path


def stored_paths(value):
    """``value`` (a config: dicts, lists, strings) with every dotted path of a moved module written
    as it was before the move (:data:`MOVED`): what cache keys and stored identities are made of."""
    if isinstance(value, dict):
        return {k: stored_paths(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(stored_paths(v) for v in value)
    if isinstance(value, str) and value.startswith("pipeline.app."):
        for old, new in MOVED.items():
            if value == new or value.startswith(new + "."):
                return old + value[len(new):]
    return value


def target_of(node: dict, group: str) -> str:
    target = node.get("_target_")
    if not target:
        raise InvalidInputError(f"the {group} config has no _target_; set {group}._target_=<module.callable> "
                                f"or choose one of the {group}=<name> config files.")
    return current_path(str(target))


def locate(path: str, group: str = "config") -> Any:
    """The object named by the dotted ``path`` (imported now); a clear error if there is none."""
    from hydra.utils import get_object

    try:
        return get_object(current_path(path))
    except Exception as exc:  # ImportError, AttributeError wrapped by hydra
        cause = exc.__cause__ or exc
        raise InvalidInputError(f"{group}._target_={path!r} cannot be imported ({type(cause).__name__}: {cause}); "
                                "give the dotted path of an importable callable, e.g. pipeline.trees.CART.") from None


def factory(node: dict, group: str) -> functools.partial:
    """``partial(target, **params)`` of a config node (``_target_`` + ``params``)."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    target = target_of(node, group)
    locate(target, group)  # a clear error for a misspelt target before hydra's own
    params = dict(node.get("params") or {})
    try:
        out = instantiate({"_target_": target, "_partial_": True, "_convert_": "all", **params})
    except InstantiationException as exc:
        raise InvalidInputError(f"{group}: cannot build {target} with params {params}: {exc}") from None
    return out


def accepted(fn: Callable) -> set[str]:
    """Names of the parameters ``fn`` declares (a ``**kwargs`` catch-all does not count: offered
    values only go to parameters a callable names)."""
    base = fn.func if isinstance(fn, functools.partial) else fn
    try:
        sig = inspect.signature(base)
    except (TypeError, ValueError):
        return set()
    return {n for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def declared_params(path: str) -> tuple[set[str], bool] | None:
    """(parameter names, takes ``**kwargs``) of the class ``path`` read from its module's source
    without importing it, when the class is defined there with its own plain ``__init__``; None
    otherwise (then the caller imports it). Keeps a warm run from importing torch just to check
    an encoder's ``params`` (issue 17)."""
    import ast
    import importlib.util
    import sys

    module, _, name = path.rpartition(".")
    if not module or module in sys.modules:
        return None
    try:
        spec = importlib.util.find_spec(module)
        source = spec.loader.get_source(module) if spec and spec.loader else None
        tree = ast.parse(source) if source else None
    except (ImportError, ValueError, SyntaxError, AttributeError):
        return None
    cls = next((n for n in (tree.body if tree else ()) if isinstance(n, ast.ClassDef) and n.name == name), None)
    init = next((n for n in (cls.body if cls else ()) if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is None or init.decorator_list or cls.decorator_list:
        return None
    args = init.args
    return {a.arg for a in (args.args[1:] + args.kwonlyargs)}, args.kwarg is not None


def check_params(node: dict, group: str, cheap: bool = False) -> None:
    """Every key of ``node["params"]`` is a parameter of its ``_target_`` (unless it takes ``**kwargs``).

    ``cheap``: read a class's ``__init__`` from its source when its module is not imported yet
    (:func:`declared_params`) instead of importing it."""
    declared = declared_params(target_of(node, group)) if cheap else None
    if declared is not None:
        names, var_keyword = declared
    else:
        base = locate(target_of(node, group), group)
        try:
            sig = inspect.signature(base)
        except (TypeError, ValueError):
            return
        var_keyword = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
        names = accepted(base)
    if var_keyword:
        return
    control = {"_recursive_", "_convert_"}  # steer hydra.utils.instantiate (encoder=torch builds its own model node)
    unknown = sorted(set(node.get("params") or {}) - names - control)
    if unknown:
        valid = sorted(n for n in names if not n.startswith("_"))
        raise InvalidInputError(f"{group}: {node['_target_']} has no parameter(s) {unknown}; its parameters are "
                                f"{valid}. Fix {group}.params.")


def accepts(node: dict, name: str, group: str) -> bool:
    """Whether the ``_target_`` of ``node`` declares a parameter ``name`` (imports the target)."""
    return name in accepted(locate(target_of(node, group), group))


def call(fn: functools.partial, group: str, *args, offered: dict | None = None, **required):
    """``fn(*args, **required, **offered)`` keeping only the offered keywords ``fn`` accepts and
    does not already have a (non-null) value for in ``params``."""
    names = accepted(fn)
    bound = fn.keywords if isinstance(fn, functools.partial) else {}
    kwargs = dict(required)
    for k, v in (offered or {}).items():
        if k in names and bound.get(k) is None:
            kwargs[k] = v
    if isinstance(fn, functools.partial):  # null params mean "use the offered value / the default"
        fn = functools.partial(fn.func, *fn.args, **{k: v for k, v in bound.items()
                                                       if v is not None or k not in kwargs})
    func = fn.func if isinstance(fn, functools.partial) else fn
    given = {**(fn.keywords if isinstance(fn, functools.partial) else {}), **kwargs}
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):  # no signature (some builtins): just call
        sig = None
    if sig is not None:
        try:
            sig.bind(*getattr(fn, "args", ()), *args, **given)
        except TypeError as exc:
            name = getattr(func, "__qualname__", func)
            raise InvalidInputError(f"{group}: {name} does not take these arguments ({exc}); check {group}.params "
                                    f"(given: {sorted(getattr(fn, 'keywords', {}))}).") from None
    return fn(*args, **kwargs)
