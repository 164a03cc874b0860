"""The documented end-to-end benchmark runs (tiny size; the real run is 1M x 512, issue 27)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_million_end_to_end_runs_both_columns_on_a_small_input(tmp_path):
    out = tmp_path / "e2e.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "million_end_to_end.py"), "--n", "3000", "--dim", "16",
           "--concepts", "4", "--threads", "1", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = json.loads(out.read_text())["runs"]
    after = runs["after"]
    assert after["cart"]["identical_tree"] and after["cart"]["same_predictions"]
    assert set(after["steps"]) >= {"clustering", "cavs", "project", "imm", "spex_clique", "mmdt", "cart"}
    assert runs["before"]["total_wall_s"] > 0 and 0 <= after["ari_sampled_vs_minibatch"] <= 1
