"""Remote rewards: scripts/serve_reward.py (server) and reward_models/remote.py (client), over loopback."""

import base64
import contextlib
import http.client
import http.server
import importlib.util
import io
import json
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import reward_models.remote as remote_mod
from reward_models import REGISTRY, load_reward

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "serve_reward.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("serve_reward_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


serve = _load_script()


@contextlib.contextmanager
def _running(server):
    """Serve ``server`` on a thread; yields ``(server, base_url)`` and shuts it down afterwards."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def serving(reward_fn, **kwargs):
    """Run ``make_server(reward_fn, ...)`` on a thread; yields ``(server, base_url)``."""
    return _running(serve.make_server(reward_fn, "127.0.0.1", 0, **kwargs))


def serving_handler(handler_cls):
    """A bare ThreadingHTTPServer with a test handler class; yields ``(server, base_url)``."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_cls)
    server.daemon_threads = True
    return _running(server)


def _post_raw(url, body, path="/score", headers=None, method="POST"):
    """Send raw bytes; returns ``(status, decoded JSON body)``."""
    host, port = url.rsplit("/", 1)[-1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def _png_b64(arr):
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _images(b, h=64, w=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, 3, h, w, generator=g)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Counting:
    """Wraps a reward fn and records the batch size of every call."""

    def __init__(self, fn):
        self.fn, self.calls = fn, []

    def __call__(self, images, prompts, metadata):
        self.calls.append(len(prompts))
        return self.fn(images, prompts, metadata)


JPEG = load_reward("jpeg_compressibility")


def test_registered_and_validated():
    assert REGISTRY["remote"] is remote_mod.RemoteReward
    fn = load_reward("remote", url="http://127.0.0.1:1/score/", token="t")
    assert fn.score_url == "http://127.0.0.1:1/score" and "***" in repr(fn) and "t'" not in repr(fn)
    with pytest.raises(ValueError, match="http://HOST:PORT"):
        load_reward("remote", url="127.0.0.1:8765")
    with pytest.raises(ValueError, match="max_batch"):
        load_reward("remote", url="http://x:1", max_batch=0)
    with pytest.raises(ValueError, match="retries"):
        load_reward("remote", url="http://x:1", retries=-1)


def test_png_float_roundtrip_is_exact():
    levels = np.arange(256, dtype=np.uint8).reshape(16, 16)
    arr = np.stack([levels, levels.T, 255 - levels], axis=-1)  # every level in every channel
    x = serve.decode_images([_png_b64(arr)])
    assert x.dtype == torch.float32 and x.shape == (1, 3, 16, 16)
    assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0
    from reward_models import to_uint8

    np.testing.assert_array_equal(to_uint8(x)[0], arr)


def test_remote_equals_local_and_logs(caplog):
    counting = Counting(JPEG)
    x = _images(5, 48, 40)  # non-square: catches an H/W swap
    prompts, meta = [f"p{i}" for i in range(5)], [{"i": i, "arr": np.arange(2)} for i in range(5)]
    with caplog.at_level(logging.INFO, logger="ddpo_grpo.serve_reward"), serving(counting, name="jpeg") as (srv, url):
        fn = load_reward("remote", url=url)
        scores, info = fn(x, prompts, meta)
        empty, _ = fn(x[:0], [], [])
        status, health = _post_raw(url, None, path="/health", method="GET")
    local, _ = JPEG(x, prompts, meta)
    assert scores.dtype == np.float32 and scores.shape == (5,)
    np.testing.assert_array_equal(scores, local)
    assert info == {} and empty.shape == (0,)
    assert status == 200 and health["status"] == "ok" and health["reward"] == "jpeg" and health["protocol"] == 1
    assert counting.calls == [5]
    lines = [r.getMessage() for r in caplog.records if '"POST /score" 200' in r.getMessage()]
    assert len(lines) == 1 and "images=5" in lines[0]


def test_batch_splitting_client_and_server():
    x = _images(5, seed=1)
    prompts, meta = ["a"] * 5, [{}] * 5
    local, _ = JPEG(x, prompts, meta)

    def with_info(images, prompts, metadata):
        s, _ = JPEG(images, prompts, metadata)
        return s, {"per_sample": s, "batch": len(prompts)}

    counting = Counting(with_info)
    with serving(counting) as (srv, url):
        scores, info = load_reward("remote", url=url, max_batch=2)(x, prompts, meta)
        assert srv.stats["requests"] == 3
    assert counting.calls == [2, 2, 1]
    np.testing.assert_array_equal(scores, local)
    np.testing.assert_allclose(info["per_sample"], local, rtol=1e-6)  # lists concatenated across batches
    assert info["batch"] == [2, 2, 1]

    counting = Counting(JPEG)
    with serving(counting, max_batch=2) as (srv, url):  # one request, chunked by the server
        scores, _ = load_reward("remote", url=url)(x, prompts, meta)
        assert srv.stats["requests"] == 1
    assert counting.calls == [2, 2, 1]
    np.testing.assert_array_equal(scores, local)


def test_nan_passthrough():
    def partial(images, prompts, metadata):
        s = np.array([np.nan if m.get("skip") else float(i) for i, m in enumerate(metadata)], dtype=np.float32)
        return s, {"nan_value": float("nan"), "tensor": torch.tensor([1.5, 2.5])}

    meta = [{"skip": i % 2 == 1} for i in range(4)]
    with serving(partial) as (_, url):
        scores, info = load_reward("remote", url=url)(_images(4, 8, 8), ["p"] * 4, meta)
        status, body = _post_raw(
            url,
            json.dumps(
                {
                    "images": [_png_b64(np.zeros((4, 4, 3), np.uint8))] * 2,
                    "prompts": ["a", "b"],
                    "metadata": [{}, {"skip": True}],
                }
            ),
        )
    assert scores.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(scores), [False, True, False, True])
    np.testing.assert_array_equal(scores[[0, 2]], [0.0, 2.0])
    assert info == {"nan_value": None, "tensor": [1.5, 2.5]}
    assert status == 200 and body["scores"] == [0.0, None] and body["protocol"] == 1  # strict JSON, no NaN


def test_token(monkeypatch):
    monkeypatch.delenv(remote_mod.TOKEN_ENV, raising=False)
    x = _images(2, 8, 8)
    with serving(JPEG, token="s3cret") as (srv, url):
        with pytest.raises(ValueError, match=r"HTTP 401.*missing bearer token"):
            load_reward("remote", url=url)(x, ["a", "b"], [{}, {}])
        with pytest.raises(ValueError, match=r"HTTP 401.*wrong bearer token"):
            load_reward("remote", url=url, token="nope", retries=3)(x, ["a", "b"], [{}, {}])
        assert srv.stats["requests"] == 2  # 4xx is never retried
        scores, _ = load_reward("remote", url=url, token="s3cret")(x, ["a", "b"], [{}, {}])
        monkeypatch.setenv(remote_mod.TOKEN_ENV, "s3cret")
        from_env, _ = load_reward("remote", url=url)(x, ["a", "b"], [{}, {}])
        assert _post_raw(url, None, path="/health", method="GET")[0] == 200  # probes need no token
    np.testing.assert_array_equal(scores, JPEG(x, ["a", "b"], [{}, {}])[0])
    np.testing.assert_array_equal(from_env, scores)


GOOD = _png_b64(np.zeros((8, 8, 3), np.uint8))
SMALL = _png_b64(np.zeros((4, 8, 3), np.uint8))
TRUNCATED = base64.b64encode(base64.b64decode(GOOD)[:40]).decode()
NOT_PNG = base64.b64encode(b"hello").decode()


def _req(images=(GOOD,), prompts=("a",), metadata=({},), **extra):
    return json.dumps({"images": list(images), "prompts": list(prompts), "metadata": list(metadata), **extra})


MALFORMED = [
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe", "not valid JSON"),
    (json.dumps([1, 2]), "must be a JSON object"),
    (json.dumps({"prompts": ["a"], "metadata": [{}]}), "missing field(s) ['images']"),
    (json.dumps({"images": GOOD, "prompts": ["a"], "metadata": [{}]}), "'images' must be a list"),
    (_req(images=[GOOD, GOOD], metadata=[{}, {}]), "lengths differ: 2 images, 1 prompts"),
    (_req(prompts=[3]), "prompts[0] must be a string"),
    (_req(metadata=["x"]), "metadata[0] must be an object"),
    (_req([GOOD, "!!not base64!!"], ["a", "b"], [{}, {}]), "images[1] is not valid base64"),
    (_req([NOT_PNG]), "images[0] is not a PNG"),
    (_req([TRUNCATED]), "images[0] is not a decodable PNG"),
    (_req([GOOD, SMALL], ["a", "b"], [{}, {}]), "images must all have the same size"),
    (_req(protocol=2), "unsupported protocol version 2"),
]


def test_malformed_requests_are_4xx_with_a_message():
    counting = Counting(JPEG)
    with serving(counting, max_body=4096) as (srv, url):
        for body, expected in MALFORMED:
            status, reply = _post_raw(url, body)
            assert status == 400, (body[:60], reply)
            assert expected in reply["error"], (expected, reply)
        for size in (20_000, 3_000_000):  # both answered with a 413, never a connection reset
            status, reply = _post_raw(url, b"x" * size)
            assert status == 413 and "larger than the server's limit of 4096" in reply["error"]
        with pytest.raises(ValueError, match=r"HTTP 413"):  # the client sees the 413, not a reset
            load_reward("remote", url=url)(_images(1, 64, 64), ["a"], [{}])
        status, reply = _post_raw(url, _req([], [], []), path="/nope")
        assert status == 404 and "unknown path '/nope'" in reply["error"]
        assert _post_raw(url, None, method="GET")[0] == 405  # GET /score
        status, reply = _post_raw(url, None, path="/nope", method="GET")
        assert status == 404 and "POST /score" in reply["error"]
        status, reply = _post_raw(url, b"x", method="BREW")  # unknown method, answered by the base class
        assert status == 501 and "error" in reply
        # still serving after all that
        status, reply = _post_raw(url, _req())
        assert status == 200 and len(reply["scores"]) == 1
    assert counting.calls == [1]


def test_reward_exception_is_500_and_retries_are_bounded():
    calls = []

    def broken(images, prompts, metadata):
        calls.append(1)
        raise KeyError("no such metadata key 'label'")

    def wrong_count(images, prompts, metadata):
        return [1.0], {}

    with serving(broken, name="broken") as (_, url):
        status, reply = _post_raw(url, _req())
        assert status == 500 and "reward 'broken' raised KeyError" in reply["error"] and "label" in reply["error"]
        calls.clear()
        t0 = time.perf_counter()
        with pytest.raises(RuntimeError, match=r"failed after 3 attempts.*HTTP 500.*KeyError"):
            load_reward("remote", url=url, retries=2, backoff=0.01)(_images(1, 8, 8), ["a"], [{}])
        assert len(calls) == 3 and time.perf_counter() - t0 < 5
    with serving(wrong_count, name="short") as (_, url):
        status, reply = _post_raw(url, _req([GOOD, GOOD], ["a", "b"], [{}, {}]))
        assert status == 500 and "returned 1 scores, expected 2" in reply["error"]


def test_unreachable_server_raises_connection_error_quickly():
    port = _free_port()
    fn = load_reward("remote", url=f"http://127.0.0.1:{port}", retries=1, backoff=0.01, timeout=1)
    t0 = time.perf_counter()
    with pytest.raises(ConnectionError) as err:
        fn(_images(1, 8, 8), ["a"], [{}])
    assert time.perf_counter() - t0 < 5
    msg = str(err.value)
    assert f"http://127.0.0.1:{port}/score" in msg and "2 attempt" in msg
    assert f"python scripts/serve_reward.py --reward NAME --port {port}" in msg


def test_retry_after_transient_503():
    hits = []

    class Flaky(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            hits.append(len(req["images"]))
            if len(hits) == 1:
                status, reply = 503, {"error": "warming up"}
            else:
                status, reply = 200, {"scores": [1.0, None], "info": {"k": 1}}
            body = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serving_handler(Flaky) as (_, url):
        scores, info = load_reward("remote", url=url, retries=2, backoff=0.01)(_images(2, 8, 8), ["a", "b"], [{}, {}])
    assert hits == [2, 2]
    assert scores[0] == 1.0 and np.isnan(scores[1]) and info == {"k": 1}


def test_retry_after_is_honoured_and_capped(monkeypatch):
    """A 5xx with Retry-After: N waits max(backoff * 2**k, N) seconds, N capped at 60; an HTTP date is ignored."""
    answers = [(503, "2"), (503, "9999"), (503, "Wed, 21 Oct 2015 07:28:00 GMT"), (200, None)]
    sleeps = []
    monkeypatch.setattr(remote_mod, "time", type("FakeTime", (), {"sleep": staticmethod(sleeps.append)}))

    class Busy(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            status, retry_after = answers.pop(0)
            body = json.dumps({"scores": [1.0]} if status == 200 else {"error": "busy"}).encode()
            self.send_response(status)
            if retry_after:
                self.send_header("Retry-After", retry_after)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serving_handler(Busy) as (_, url):
        scores, _ = load_reward("remote", url=url, retries=3, backoff=0.01)(_images(1, 8, 8), ["a"], [{}])
    assert scores.tolist() == [1.0] and not answers
    assert sleeps == [2.0, remote_mod.MAX_RETRY_AFTER, 0.04]


def test_timeout_is_retried_then_connection_error():
    hits = []

    class Slow(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            hits.append(1)
            self.rfile.read(int(self.headers["Content-Length"]))
            time.sleep(1.0)

    with serving_handler(Slow) as (_, url):
        t0 = time.perf_counter()
        with pytest.raises(ConnectionError, match=r"after 2 attempt.*timeout 0.2s"):
            load_reward("remote", url=url, retries=1, backoff=0.01, timeout=0.2)(_images(1, 8, 8), ["a"], [{}])
        assert time.perf_counter() - t0 < 3
    assert len(hits) == 2


def test_cli_errors(monkeypatch, capsys):
    monkeypatch.setattr(logging, "basicConfig", lambda **kw: None)  # keep pytest's logging as it is
    with pytest.raises(SystemExit):
        serve.main(["--reward", "no_such_reward", "--port", "0"])
    assert "unknown reward 'no_such_reward'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        serve.main(["--reward", "jpeg_compressibility", "--kwargs", "[1]"])


def test_serve_reward_subprocess(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", remote_mod.TOKEN_ENV: "tok"}
    stderr = open(tmp_path / "stderr.txt", "w+")
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--reward", "jpeg_compressibility", "--port", "0", "--kwargs", '{"quality": 90}'],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    try:
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
        try:
            line = lines.get(timeout=30)
        except queue.Empty:
            stderr.seek(0)
            pytest.fail(f"no start-up line within 30 s; stderr:\n{stderr.read()}")
        assert line.startswith("serving jpeg_compressibility on http://127.0.0.1:"), line
        url = line.split(" on ", 1)[1].strip()
        x = _images(3, 16, 16)
        scores, _ = load_reward("remote", url=url, token="tok", timeout=10)(x, ["a"] * 3, [{}] * 3)
        local, _ = load_reward("jpeg_compressibility", quality=90)(x, ["a"] * 3, [{}] * 3)
        np.testing.assert_array_equal(scores, local)
        deadline = time.monotonic() + 10  # the server logs right after answering: give it a moment
        while '"POST /score" 200 images=3' not in (tmp_path / "stderr.txt").read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        stderr.close()
    log = (tmp_path / "stderr.txt").read_text()
    assert '"POST /score" 200 images=3' in log, log
