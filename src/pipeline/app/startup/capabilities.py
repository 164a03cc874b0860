"""The one capability model: what a clustering provides, what an explainer needs.

Capabilities:

``labels``   reference cluster labels (every clustering; -1 = noise, left out of fitting)
``centers``  reference centres in feature space (k-means centres, GMM means)
``mixture``  a Gaussian mixture (means + covariances) in feature space (GMM, encoder prior)
``graph``    a similarity graph over the points (the spectral clustering's affinity graph)
``cavs``     concept activation vectors plus the latent mixture (a concept set and a mixture)

A clustering config declares ``provides`` (null: known only after it ran, e.g. ``best_of``);
an explainer's needs follow from its ``fit`` protocol (:data:`pipeline.app.configuration.explainers.PROTOCOLS`).
:func:`check_capabilities` runs before any stage on the config alone (from the run plan's
:func:`pipeline.app.running.plan.validate`); :func:`check_provided` runs again in the fit stage on what
the stages actually produced (a clustering that declares ``provides: null``). Both name the clustering
options (``conf/clustering/*.yaml``) that would satisfy the request.
"""

from __future__ import annotations

from functools import lru_cache

from pipeline.validation import InvalidInputError

CAPABILITIES = ("labels", "centers", "mixture", "graph", "cavs")


@lru_cache(maxsize=1)
def clustering_options() -> dict[str, frozenset | None]:
    """``conf/clustering/<name>.yaml`` -> the capabilities it declares (None: known after it ran)."""
    import yaml

    from pipeline.app.configuration.config import CONFIG_DIR

    out = {}
    for path in sorted((CONFIG_DIR / "clustering").glob("*.yaml")):
        provides = (yaml.safe_load(path.read_text()) or {}).get("provides", ["labels"])
        out[path.stem] = None if provides is None else frozenset(provides)
    return out


def satisfying(missing: set[str]) -> list[str]:
    """Clustering options that declare every capability in ``missing`` (``cavs`` needs a mixture)."""
    want = {"mixture" if m == "cavs" else m for m in missing}
    return [name for name, have in clustering_options().items() if have is not None and want <= have]


def how_to_provide(missing: set[str], concepts_off: bool) -> str:
    parts = []
    if "cavs" in missing and concepts_off:
        parts.append("choose a concept set (concepts=<name>, e.g. concepts=mnist_geometric)")
    options = satisfying(missing - {"labels"})
    if missing - {"cavs"} or not concepts_off:
        parts.append("choose a clustering that provides it: " + (", ".join(f"clustering={o}" for o in options)
                                                                 or "none of the shipped ones does"))
    return "; ".join(parts)


def needs_of(explainer: dict) -> frozenset:
    from pipeline.app.configuration.explainers import protocol

    return protocol(explainer).needs


def check_targets(cfg: dict) -> None:
    """Every ``_target_`` the run will build imports (a misspelt class fails before any stage)."""
    from pipeline.app.configuration.instantiate import check_params, declared_params, locate, target_of

    groups = [("dataset", cfg["dataset"]), ("encoder", cfg["encoder"]), ("clustering", cfg["clustering"])]
    if cfg["concepts"].get("_target_"):
        groups += [("concepts", cfg["concepts"]), ("cav", cfg["cav"])]
    groups += [(f"explainer.{row}", spec) for row, spec in cfg["explainer"].items()]
    for group, node in groups:
        # an encoder's module may import torch (~1 s): its class is checked from the source when
        # that shows the class and its __init__, so a fully cached run never imports torch
        cheap = group == "encoder" and declared_params(target_of(node, group)) is not None
        if not cheap:
            locate(target_of(node, group), group)
        if group.startswith("explainer.") or group in ("encoder", "cav"):  # params = constructor arguments
            check_params(node, group, cheap=cheap)
    from pipeline.app.configuration.option_keys import check_keys_read

    check_keys_read(cfg)  # a dataset / encoder / clustering key or param the chosen option does not read


def check_capabilities(cfg: dict) -> None:
    """Every explainer row gets what it needs from the configured clustering and concepts (before any stage)."""
    declared = cfg["clustering"].get("provides")
    have = None if declared is None else set(declared) | {"labels"}
    from pipeline.app.configuration.config import concepts_enabled

    concepts_off = not concepts_enabled(cfg)
    for row, spec in cfg["explainer"].items():
        needs = set(needs_of(spec))
        missing = set()
        if "cavs" in needs and concepts_off:
            missing.add("cavs")
        if have is not None:
            missing |= {n for n in needs - have if n != "cavs"}
            if "cavs" in needs and "mixture" not in have:
                missing.add("cavs")
        if missing:
            _fail(row, spec, missing, f"clustering={cfg['clustering']['name']}", concepts_off)


def check_user_files(cfg: dict) -> None:
    """A user's file named in the config (dataset=files, concepts=examples/classes, encoder=torch) that
    does not exist fails now, not after the stages before the one reading it."""
    from pathlib import Path

    from pipeline.app.configuration.config import concepts_enabled

    concepts_on = concepts_enabled(cfg)
    for group, key, used in (("dataset", "path", True), ("concepts", "path", concepts_on),
                             ("encoder", "weights", True), ("encoder", "torchscript", True)):
        value = cfg.get(group, {}).get(key)
        if used and value and not Path(str(value)).expanduser().exists():
            raise InvalidInputError(f"{group}.{key}={value}: no such file or folder (relative paths are read from the "
                                    f"launch directory {Path.cwd()}). Fix the path (docs/own-data.md).")


def check_provided(
row: str, spec: dict, have: set[str], clustering: str, concepts_off: bool) -> None:
    """Raise a clear error if the finished stages do not provide what explainer ``row`` needs."""
    missing = set(needs_of(spec)) - set(have)
    if missing:
        _fail(row, spec, missing, f"clustering={clustering} and the current concepts setting", concepts_off)


def _fail(row: str, spec: dict, missing: set[str], what: str, concepts_off: bool) -> None:
    raise InvalidInputError(
        f"explainer {row!r} ({spec['name']}) needs {', '.join(sorted(missing))}, which the pipeline cannot provide "
        f"with {what}. To fix it: {how_to_provide(missing, concepts_off)}; or drop {row!r} from the explainer list."
    )
