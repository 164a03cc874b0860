"""A fully cached run reuses everything (issue 17 item 5): no torch import, no redrawn figures,
and the files it writes are those a fresh run writes."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.app.configuration.config import compose_config
from pipeline.app.configuration.instantiate import accepted, declared_params, locate
from pipeline.app.running.runner import run
from pipeline.validation import InvalidInputError

TINY_VADE = ["dataset=digits", "encoder=vade", "encoder.device=cpu", "encoder.params.hidden_dims=[16]",
             "encoder.params.latent_dim=2", "encoder.params.n_clusters=3", "encoder.params.pretrain_epochs=1",
             "encoder.params.epochs=1", "clustering=encoder", "dataset.classes=[0,1,7]",
             "dataset.n_samples=150", "concepts=none", "explainer=[mmdt,cart]", "report.summary=false"]


def overrides(tmp_path: Path, out: str) -> list[str]:
    return [f"paths.output_dir={tmp_path / out}", f"paths.cache_dir={tmp_path / 'cache'}",
            f"paths.models_dir={tmp_path / 'models'}", *TINY_VADE]


@pytest.mark.parametrize("target", ["pipeline.encoders.vade.VaDEEncoder", "pipeline.encoders.clip.CLIPEncoder",
                                    "pipeline.encoders.sbert.SBERTEncoder"])
def test_encoder_parameters_read_from_source_match_the_signature(target):
    declared = declared_params(target) if target.rpartition(".")[0] not in sys.modules else None
    cls = locate(target)
    var_kw = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(cls).parameters.values())
    assert declared in (None, (accepted(cls), var_kw))
    assert declared_params("pipeline.encoders.vade.NoSuchEncoder") is None  # falls back to importing


def test_misspelt_encoder_parameter_fails_early_without_torch(tmp_path):
    code = ("import sys; from pipeline.app.configuration.config import compose_config; "
            "from pipeline.app.running.plan import validate; from pipeline.validation import InvalidInputError\n"
            f"cfg = compose_config({overrides(tmp_path, 'x') + ['+encoder.params.latent_dimm=3']!r})\n"
            "try:\n    validate(cfg)\nexcept InvalidInputError as e:\n    print('ERR', e)\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "no parameter(s) ['latent_dimm']" in out and "latent_dim" in out
    assert out.strip().endswith("False")


def test_warm_run_imports_no_torch_and_reuses_figures(tmp_path, monkeypatch):
    run(compose_config(overrides(tmp_path, "a")))  # trains the tiny VaDE, draws the figures
    code = ("import sys; from pipeline.app.configuration.config import compose_config; from pipeline.app.running.runner import run\n"
            f"run(compose_config({overrides(tmp_path, 'b')!r}))\n"
            "print(sorted(m for m in ('torch', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
    status = json.loads((tmp_path / "b" / "status.json").read_text())
    assert all(e["hit"] for e in status["cache"])
    for sub in ("figures", "trees"):
        for f in (tmp_path / "a" / sub).iterdir():
            assert f.read_bytes() == (tmp_path / "b" / sub / f.name).read_bytes(), f.name
    strip = lambda p: "\n".join(ln for ln in p.read_text().splitlines() if "output_dir" not in ln)  # noqa: E731
    assert strip(tmp_path / "a" / "report.html") == strip(tmp_path / "b" / "report.html")

    import pipeline.app.report.figures as figures

    def no_drawing(*a, **k):
        raise AssertionError("redrawn")

    monkeypatch.setattr(figures, "plot_tree", no_drawing)
    run(compose_config(overrides(tmp_path, "c")))  # served from the render cache
    with pytest.raises(AssertionError, match="redrawn"):  # cache.enabled=false draws and keeps nothing
        run(compose_config(overrides(tmp_path, "e") + ["cache.enabled=false"]))
    with pytest.raises(AssertionError, match="redrawn"):  # +force=report redraws
        run(compose_config(overrides(tmp_path, "d") + ["+force=report"]))


def test_misspelt_encoder_parameter_still_named_in_process(tmp_path):
    from pipeline.app.running.plan import validate

    with pytest.raises(InvalidInputError, match=r"latent_dimm"):
        validate(compose_config(overrides(tmp_path, "x") + ["+encoder.params.latent_dimm=3"]))
