"""Issue 29, items 6-8: typos never pass, no thread tracebacks, runs land where they are started.

Every `python -m pipeline ...` command in README.md and docs/*.md is composed and put through
the start-up checks (the cheap ones also run to the end), so the documented commands work.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pipeline.app.configuration import network
from pipeline.app.startup import checks
from pipeline.app.configuration.config import CONFIG_DIR, compose_config
from pipeline.app.running.plan import check_values
from pipeline.app.running.runner import run, to_plain
from pipeline.validation import InvalidInputError

from shared_data import skip_without_benchmarks

ROOT = Path(__file__).resolve().parents[1]
FAST = ["report.figures=false", "report.summary=false", "report.html=false"]


def cli(tmp_path: Path, *args: str, env: dict | None = None, cwd: Path | None = None):
    full = {**os.environ, "PIPELINE_CACHE_DIR": str(tmp_path / "cache"), "PIPELINE_LOG_DIR": str(tmp_path / "logs"),
            "PIPELINE_MODELS_DIR": str(tmp_path / "models"), "HYDRA_FULL_ERROR": "0", **(env or {})}
    full = {k: v for k, v in full.items() if v is not None}
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=cwd or tmp_path, env=full,
                          capture_output=True, text=True, timeout=600)


# ------------------------------------------------------------------ misspelt group options, any form
@pytest.mark.parametrize("override, group, wrong, close", [
    ("explainer=[mmdt,carrt]", "explainer", "carrt", "cart"),
    ("explainer=carrt", "explainer", "carrt", "cart"),
    ("dataset=iris,wne", "dataset", "wne", "wine"),
    ("clustering=choice(kmeans,kmenas)", "clustering", "kmenas", "kmeans"),
    ("+explainer=[tao_axes]", "explainer", "tao_axes", "tao_axis"),
])
def test_a_misspelt_group_option_lists_the_valid_ones_in_every_form(override, group, wrong, close):
    with pytest.raises(InvalidInputError, match=rf"{group} has no option '{wrong}'\. Did you mean {close}\? "
                                                rf"Valid {group} options: .*\b{close}\b"):
        checks.check_group_choices(["dataset=iris", override], CONFIG_DIR)


def test_valid_group_options_and_other_overrides_pass():
    checks.check_group_choices(["-m", "dataset=iris,wine", "explainer=[mmdt,cart],[imm]", "hydra/launcher=joblib",
                                "seed=1", "~counterfactuals", "experiment=null", "--cfg", "job"], CONFIG_DIR)


def test_misspelt_list_option_on_the_command_line_is_one_line(tmp_path):
    proc = cli(tmp_path, "dataset=iris", "explainer=[mmdt,carrt]", *FAST)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "explainer has no option 'carrt'. Did you mean cart?" in proc.stderr and "spex_knn" in proc.stderr


# ------------------------------------------------------------------ +keys nothing reads, seed, n_samples
def startup(overrides: list[str], tmp_path: Path) -> frozenset:
    cfg = compose_config(["dataset=iris", f"paths.output_dir={tmp_path / 'out'}", *overrides])
    plain = to_plain(cfg)
    return check_values(plain)


@pytest.mark.parametrize("override, nearest", [
    ("+clustering.n_cluster=5", "clustering.n_clusters"),
    ("+sed=3", "seed"),
    ("+explainer.cart.n_leaf=4", "explainer.cart.n_leaves"),
    ("+dataset.n_sample=40", "dataset.n_samples"),
    ("+report.figure=false", "report.figures"),
])
def test_a_plus_key_that_nothing_reads_names_the_nearest_valid_key(override, nearest, tmp_path):
    with pytest.raises(InvalidInputError, match=rf"nothing would read it\. Did you mean {re.escape(nearest)}\?"):
        startup([override], tmp_path)


@pytest.mark.parametrize("override, nearest", [
    ("clustering.n_cluster=5", "clustering.n_clusters"),  # a group's key
    ("sed=3", "seed"),  # a top-level key
    ("explainer.cart.n_leaf=4", "explainer.cart.n_leaves"),
])
def test_a_misspelt_key_without_plus_names_the_nearest_valid_key_at_once(override, nearest, tmp_path):
    """Issue 36 item 4: not Hydra's "Could not override ... use +clustering.n_cluster=5"."""
    with pytest.raises(InvalidInputError, match=rf"so it cannot be set\. Did you mean {re.escape(nearest)}\?"):
        checks.check_override_keys(["dataset=iris", override], CONFIG_DIR)
    checks.check_override_keys(["-m", "dataset=iris,wine", "seed=1", "clustering.params.reg_covar=1e-5",
                                "hydra.run.dir=x", "explainer=[mmdt,cart]", "hydra/launcher=joblib"], CONFIG_DIR)


def test_a_misspelt_key_on_the_command_line_is_one_line(tmp_path):
    proc = cli(tmp_path, "dataset=iris", "clustering.n_cluster=5", *FAST)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "Could not override" not in proc.stderr
    assert proc.stderr.startswith("error: clustering.n_cluster: clustering has no setting 'n_cluster', so it cannot "
                                  "be set. Did you mean clustering.n_clusters?")


def test_plus_force_and_params_still_pass(tmp_path):
    assert startup(["+force=fit", "+explainer.cart.params.max_depth=2"], tmp_path) == {"fit"}


@pytest.mark.parametrize("seed", ["-1", "4294967296"])  # seed=1.5: the schema refuses it, naming seed
def test_seed_errors_name_seed(seed, tmp_path):
    with pytest.raises(InvalidInputError, match=r"^seed=.* is not a valid seed"):
        startup([f"seed={seed}"], tmp_path)


def test_seed_error_on_the_command_line_names_seed(tmp_path):
    proc = cli(tmp_path, "dataset=iris", "explainer=[cart]", "seed=-1", *FAST)
    assert proc.returncode == 1 and proc.stderr.startswith("error: seed=-1 is not a valid seed")


def test_n_samples_above_the_dataset_size_is_an_error(tmp_path):
    proc = cli(tmp_path, "dataset=iris", "explainer=[cart]", "dataset.n_samples=10000000000", *FAST)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: dataset.n_samples=10000000000, but iris has only 150 samples")
    assert "Traceback" not in proc.stderr


def test_the_documented_spex_knn_parameter_works_without_a_plus(tmp_path):
    """docs/pipeline.md: `explainer.spex_knn.params.n_neighbors=30` (no `+`; spex_knn.yaml lists no params)."""
    proc = cli(tmp_path, "dataset=iris", "explainer=[spex_knn]", "explainer.spex_knn.params.n_neighbors=30", *FAST)
    assert proc.returncode == 0, proc.stderr
    config = next((tmp_path / "logs").rglob(".hydra/config.yaml")).read_text()
    assert "n_neighbors: 30" in config
    typo = cli(tmp_path, "dataset=iris", "explainer=[spex_knn]", "explainer.spex_knn.params.n_neighbor=30", *FAST)
    assert typo.returncode == 1 and "has no parameter(s) ['n_neighbor']" in typo.stderr
    assert "'n_neighbors'" in typo.stderr
    assert "explainer.spex_knn.params.n_neighbors=30" in (ROOT / "docs" / "pipeline.md").read_text()


def test_params_overrides_become_upserts_and_nothing_else():
    args = ["explainer.spex_knn.params.n_neighbors=30", "+explainer.cart.params.max_depth=2", "seed=1",
            "clustering.params.n_init=3", "hydra.job.params.x=1", "-m", "dataset=iris,wine"]
    assert checks.params_overrides_as_upserts(args) == [
        "++explainer.spex_knn.params.n_neighbors=30", "+explainer.cart.params.max_depth=2", "seed=1",
        "++clustering.params.n_init=3", "hydra.job.params.x=1", "-m", "dataset=iris,wine"]


# ------------------------------------------------------------------ every documented command
def documented_commands() -> list[tuple[str, str]]:
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```(?:bash|sh|console|shell)?\n(.*?)```", path.read_text(), flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" #")[0].strip()
                if line.startswith("python -m pipeline") and not line.startswith("python -m pipeline."):
                    out.append((path.name, line))
    return out


def _as_single_run(args: list[str]) -> list[str]:
    """A sweep's first job: drop -m/--multirun and hydra/launcher settings, take each sweep's first value."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    keep = [a for a in args if a not in ("-m", "--multirun") and not a.startswith(("hydra/", "hydra."))]
    out = []
    for text, o in zip(keep, OverridesParser.create().parse_overrides(keep)):
        if o.is_sweep_override():
            first = o.value().list[0]
            value = f"[{','.join(first)}]" if isinstance(first, list) else str(first)
            out.append(f"{o.get_key_element()}={value}")
        else:
            out.append(text)
    return out


#: documented commands cheap enough to run to the end here (tabular data, no deep encoder)
RUN_TO_THE_END = {"dataset=iris explainer=[mmdt,cart]", "dataset=clustbench dataset.name=sipu/r15 clustering=dbscan",
                  "-m dataset=iris,wine explainer=[mmdt,cart] seed=0,1,2"}


def _documented_params():
    """Each documented command, marked ``benchmark_data`` when it is run here and reads the clustering benchmarks."""
    def runs_on_benchmarks(command: str) -> bool:
        return "dataset=clustbench" in command and " ".join(shlex.split(command)[3:]) in RUN_TO_THE_END

    return [pytest.param(source, command, id=command, marks=[pytest.mark.benchmark_data] * runs_on_benchmarks(command))
            for source, command in documented_commands()]


@pytest.mark.parametrize("source, command", _documented_params())
def test_every_documented_command_composes_and_passes_the_start_up_checks(source, command, tmp_path):
    args = shlex.split(command)[3:]
    if "--help" in args:
        proc = cli(tmp_path, "--help")
        assert proc.returncode == 0 and "dataset" in proc.stdout
        return
    if "--cfg" in args:
        proc = cli(tmp_path, *args)
        assert proc.returncode == 0 and "explainer:" in proc.stdout
        return
    checks.check_group_choices(args, CONFIG_DIR)
    single = _as_single_run(args)
    cfg = compose_config([*single, f"paths.output_dir={tmp_path / 'out'}", f"paths.cache_dir={tmp_path / 'cache'}",
                          f"paths.models_dir={tmp_path / 'models'}"])
    plain = checks.resolve_config(cfg)
    check_values(plain)
    from pipeline.app.configuration.option_keys import check_keys_read

    check_keys_read(plain)  # no documented key is one its option does not read (issue 50)
    for row, spec in (plain.get("explainer") or {}).items():
        from pipeline.app.configuration.instantiate import check_params

        check_params(spec, f"explainer.{row}")
    if " ".join(args) in RUN_TO_THE_END:
        if "dataset=clustbench" in args:  # composed and checked above; running it needs the files
            skip_without_benchmarks(*[a.split("=", 1)[1] for a in args if a.startswith("dataset.name=")])
        proc = cli(tmp_path, *args, *FAST)
        assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------ item 7: the hub probe's thread
def test_an_abandoned_hub_probe_never_raises_in_its_thread(monkeypatch):
    import urllib.request

    def broken(*args, **kwargs):
        raise AttributeError("'NoneType' object has no attribute 'setsockopt'")

    seen = []
    monkeypatch.setattr(urllib.request, "urlopen", broken)
    monkeypatch.setattr(threading, "excepthook", lambda info: seen.append(info))
    assert network._answers("https://hub.invalid", 1.0) is False
    assert seen == []


# ------------------------------------------------------------------ item 8: where runs land
def test_a_run_lands_under_the_directory_it_is_started_from(tmp_path):
    study = tmp_path / "home" / "me" / "study"
    study.mkdir(parents=True)
    proc = cli(tmp_path, "dataset=iris", "explainer=[cart]", *FAST, env={"PIPELINE_LOG_DIR": None}, cwd=study)
    assert proc.returncode == 0, proc.stderr
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("results written to ")][-1]
    results = Path(line.removeprefix("results written to "))
    assert results.is_relative_to(study / "outputs" / "runs")
    assert not (ROOT / "outputs").exists() or not any(p.name == results.parent.name
                                                      for p in (ROOT / "outputs").rglob("*"))
    assert list((tmp_path / "cache").iterdir())  # PIPELINE_CACHE_DIR honoured


def test_path_defaults_follow_the_docs(monkeypatch, tmp_path):
    for env in ("PIPELINE_LOG_DIR", "PIPELINE_CACHE_DIR", "PIPELINE_MODELS_DIR", "PIPELINE_ROOT"):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.chdir(tmp_path)
    paths = to_plain(compose_config(["dataset=iris", f"paths.output_dir={tmp_path}"]))["paths"]
    assert paths["log_dir"] == str(tmp_path / "outputs")  # ./outputs, Hydra's convention
    assert paths["cache_dir"] == str(ROOT / ".cache" / "pipeline")  # <root> = the source checkout
    assert paths["models_dir"] == str(ROOT / "models")
    monkeypatch.setenv("PIPELINE_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("PIPELINE_MODELS_DIR", str(tmp_path / "m"))
    monkeypatch.setenv("PIPELINE_LOG_DIR", str(tmp_path / "l"))
    paths = to_plain(compose_config(["dataset=iris", f"paths.output_dir={tmp_path}"]))["paths"]
    assert (paths["cache_dir"], paths["models_dir"], paths["log_dir"]) == tuple(str(tmp_path / x) for x in "cml")


def test_help_and_docs_tell_the_truth():
    proc = subprocess.run([sys.executable, "-m", "pipeline", "--help"], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert "default ./outputs" in proc.stdout
    docs = (ROOT / "docs" / "pipeline.md").read_text()
    assert "digits (default)" not in docs and "mnist (default" in docs
    assert "`./outputs`" in docs


def test_a_load_entry_cached_before_the_n_samples_check_no_longer_hits(tmp_path):
    """Before issue 29, dataset.n_samples above the size loaded the whole dataset and cached it
    under that key; the load stage's version moved, so such an entry is never read again."""
    import dataclasses

    from pipeline.app.stores.cache import StageCache
    from pipeline.app.stages.framework import execute
    from pipeline.app.stages.load import LOAD

    paths = [f"paths.output_dir={tmp_path / 'out'}", f"paths.cache_dir={tmp_path / 'cache'}"]
    cfg = to_plain(compose_config(["dataset=iris", "dataset.n_samples=10000000000", *paths]))
    cache = StageCache(tmp_path / "cache")
    ok = to_plain(compose_config(["dataset=iris", *paths]))
    whole = execute(LOAD, ok, cache, {}).artifact  # what the old code stored for the too-large request
    old = dataclasses.replace(LOAD, version=1)
    cache.get_or_compute("load", old.key(cfg, {}), lambda: whole.to_record())
    assert LOAD.key(cfg, {}) != old.key(cfg, {})
    with pytest.raises(InvalidInputError, match="dataset.n_samples=10000000000, but iris has only 150"):
        execute(LOAD, cfg, cache, {})
