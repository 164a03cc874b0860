"""Keys do not depend on where things live: moving models/ and the cache costs nothing (issue 16)."""

from __future__ import annotations

import json
import shutil

import pandas as pd

from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run

TINY_VADE = ["dataset=digits", "encoder=vade", "encoder.device=cpu", "encoder.params.hidden_dims=[16]",
             "encoder.params.latent_dim=2", "encoder.params.n_clusters=3", "encoder.params.pretrain_epochs=1",
             "encoder.params.epochs=2", "clustering=encoder", "dataset.classes=[0,1,7]",
             "dataset.n_samples=150", "concepts=none", "explainer=[mmdt,cart]", "report.figures=false",
             "report.summary=false"]


def config(base, out):
    return compose_config([f"paths.output_dir={base / out}", f"paths.cache_dir={base / 'cache'}",
                           f"paths.models_dir={base / 'models'}", *TINY_VADE])


def events(out_dir):
    status = json.loads((out_dir / "status.json").read_text())
    assert status["status"] == "ok"
    return [(e["stage"], e["hit"]) for e in status["cache"]]


def test_moving_models_and_cache_recomputes_nothing(tmp_path):
    first = run(config(tmp_path / "a", "out"))
    assert ("encode", False) in events(tmp_path / "a" / "out")
    # each stage once, even the run that trains the encoder on the loaded data (issue 50: it logged
    # "computed: load", then "cache hit: load" when the training read the same data again)
    assert [stage for stage, _ in events(tmp_path / "a" / "out")].count("load") == 1
    checkpoints = sorted(p.name for p in (tmp_path / "a" / "models").rglob("*.pt"))
    assert not any(".partial" in c or c.endswith(".tmp") for c in checkpoints)
    assert checkpoints and not any("/" in json.dumps(c) and str(tmp_path) in c for c in checkpoints)
    for name in ("models", "cache"):  # a user reorganises their disk
        shutil.move(tmp_path / "a" / name, tmp_path / "b" / name)
    second = run(config(tmp_path / "b", "out"))
    assert all(hit for _, hit in events(tmp_path / "b" / "out"))  # every cached stage read back, nothing trained
    assert sorted(p.name for p in (tmp_path / "b" / "models").rglob("*.pt")) == checkpoints
    assert not (tmp_path / "a" / "models").exists()  # and nothing was written at the old place
    cols = [c for c in first.columns if "seconds" not in c]
    pd.testing.assert_frame_equal(first[cols], second[cols])
    for meta in (tmp_path / "b" / "cache").glob("*/*/meta.json"):
        assert str(tmp_path) not in meta.read_text()  # no absolute path stored in any artifact
