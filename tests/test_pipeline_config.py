"""Config schema: every option of every group composes; typos and wrong types fail at start-up."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError

from omegaconf import OmegaConf

from pipeline.app.startup.capabilities import CAPABILITIES
from pipeline.app.configuration.config import CONFIG_DIR, Config, compose_config
from pipeline.app.configuration.explainers import protocol
from pipeline.app.configuration.instantiate import factory
from pipeline.app.running.runner import parse_force, to_plain

GROUPS = ["dataset", "encoder", "clustering", "concepts", "cav", "explainer", "experiment"]


def options(group):
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


def load_option(group: str, option: str) -> dict:
    """The option merged onto the schema: directly (fast) unless the file has a defaults list."""
    node = OmegaConf.load(CONFIG_DIR / group / f"{option}.yaml")
    if "defaults" in node or group == "experiment" or "${" in (CONFIG_DIR / group / f"{option}.yaml").read_text():
        value = f"[{option}]" if group == "explainer" else option
        cfg = to_plain(compose_config([f"{group}={value}", "paths.output_dir=/tmp/unused"]))
        return cfg if group in ("experiment", "explainer") else cfg[group]
    merged = OmegaConf.merge(OmegaConf.structured(Config), {group: node})  # validates keys and types
    return OmegaConf.to_container(merged[group] if group != "explainer" else merged, resolve=False)


def check_instantiates(node: dict, group: str) -> None:
    """The node's _target_ imports and hydra builds ``partial(target, **params)`` from it."""
    built = factory(node, group)
    # hydra control keys (_recursive_, _convert_) steer instantiate and are not keywords of the target
    assert callable(built) and built.keywords == {k: v for k, v in (node.get("params") or {}).items()
                                                  if not (k.startswith("_") and k.endswith("_"))}


@pytest.mark.parametrize("group", GROUPS)
def test_every_option_of_every_group_fits_the_schema_and_instantiates(group):
    assert options(group), f"no options in conf/{group}"
    for option in options(group):
        cfg = load_option(group, option)
        if group in ("dataset", "encoder", "cav"):
            check_instantiates(cfg, group)
        elif group == "concepts":
            if option == "none":
                assert cfg["_target_"] is None
            else:
                check_instantiates({**cfg, "params": {}}, group)  # params go to the source with the dataset
        elif group == "clustering":
            check_instantiates({**cfg, "params": {}}, group)  # best_of: params per candidate
            assert cfg["provides"] is None or set(cfg["provides"]) <= set(CAPABILITIES)
        elif group == "explainer":
            assert list(cfg["explainer"]) == [option]  # the row name is the option name
            check_instantiates(cfg["explainer"][option], group)
            protocol(cfg["explainer"][option])  # a known fit protocol
        elif group == "experiment":  # a study (several datasets + published values) or a one-run preset
            runs = cfg["study"]["runs"]
            check_instantiates(cfg["dataset"], "dataset")
            for row in cfg["explainer"].values():
                check_instantiates(row, "explainer")
            published_runs = {p["run"] for p in cfg["study"]["published"]}
            assert published_runs <= set(runs), "published values name runs the experiment does not have"
            for run in runs.values():
                check_instantiates(run["dataset"], "dataset")
                if run.get("clustering"):
                    check_instantiates(run["clustering"], "clustering")
                assert set(run.get("explainers") or []) <= set(cfg["explainer"])


def test_default_config_is_the_papers_mnist_concept_run():
    cfg = to_plain(compose_config(["paths.output_dir=/tmp/unused"]))
    assert cfg["dataset"]["name"] == "mnist" and cfg["dataset"]["root"] is None  # the bundled real digits
    assert cfg["encoder"]["name"] == "vade" and cfg["encoder"]["params"]["hidden_dims"] == [500, 500, 2000]
    # GMM on latents; concepts measured on the pixels (issue 47), the paper's class-defined ones one option away
    assert cfg["clustering"]["name"] == "gmm" and cfg["concepts"]["name"] == "mnist_measured"
    assert list(cfg["explainer"]) == ["concept_mmdt", "concept_cart"]
    table2 = to_plain(compose_config(["experiment=mmdt_table2", "paths.output_dir=/tmp/unused"]))
    assert table2["concepts"]["name"] == "mnist_geometric" and table2["dataset"]["name"] == "mnist"
    digits = to_plain(compose_config(["dataset=digits", "paths.output_dir=/tmp/unused"]))  # still a choice
    assert digits["dataset"]["name"] == "digits" and digits["encoder"]["name"] == "vade"


def test_tabular_datasets_default_to_raw_features_and_the_command_line_wins():
    cfg = to_plain(compose_config(["dataset=iris", "paths.output_dir=/tmp/unused"]))
    assert cfg["encoder"]["name"] == "identity" and cfg["clustering"]["name"] == "gmm"
    assert cfg["concepts"]["name"] == "none" and list(cfg["explainer"]) == ["mmdt", "cart"]
    cfg = to_plain(compose_config(["encoder=identity", "clustering=kmeans", "paths.output_dir=/tmp/unused"]))
    assert cfg["encoder"]["name"] == "identity" and cfg["clustering"]["name"] == "kmeans"
    assert cfg["concepts"]["name"] == "mnist_measured"
    cfg = to_plain(compose_config(["experiment=raw_features", "paths.output_dir=/tmp/unused"]))
    assert cfg["dataset"]["name"] == "digits" and cfg["encoder"]["name"] == "identity"
    assert cfg["concepts"]["name"] == "none" and list(cfg["explainer"]) == ["mmdt", "cart"]


def test_unknown_option_lists_valid_choices():
    with pytest.raises(ConfigCompositionException) as err:
        compose_config(["dataset=digitz"])
    message = str(err.value) + str(err.value.__cause__)
    assert "digitz" in message and "iris" in message and "clustbench" in message


def test_misspelt_key_fails():
    with pytest.raises(ConfigCompositionException) as err:
        compose_config(["clustering.n_cluster=3"])
    assert isinstance(err.value.__cause__, ConfigKeyError) or "n_cluster" in str(err.value)


def test_wrong_type_fails():
    with pytest.raises(ConfigCompositionException) as err:
        compose_config(["seed=abc"])
    assert isinstance(err.value.__cause__, ValidationError) or "seed" in str(err.value)


def test_paths_follow_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PIPELINE_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("PIPELINE_BENCHMARK_DIR", str(tmp_path / "b"))
    cfg = to_plain(compose_config(["paths.output_dir=/tmp/unused"]))
    assert cfg["paths"]["cache_dir"] == str(tmp_path / "c")
    assert cfg["paths"]["benchmark_dir"] == str(tmp_path / "b")
    cfg = to_plain(compose_config(["paths.output_dir=/tmp/unused", "paths.cache_dir=/x"]))
    assert cfg["paths"]["cache_dir"] == "/x"


def test_output_dir_required_outside_hydra():
    from pipeline.validation import InvalidInputError

    with pytest.raises(InvalidInputError, match="paths.output_dir"):
        to_plain(compose_config([]))


def test_parse_force():
    assert parse_force(None) == frozenset()
    assert parse_force("encode") == {"encode"}
    assert parse_force(["encode", "cluster"]) == {"encode", "cluster"}
    assert parse_force("encode,fit") == {"encode", "fit"}
