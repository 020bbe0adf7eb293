"""scripts/serve_reward.py trusts no client: metadata paths, pixel budgets, connection limits, JSON shape.

Every server runs in-process on a loopback port 0; the whole file takes a few seconds.
"""

import base64
import contextlib
import http.client
import importlib.util
import io
import json
import os
import socket
import struct
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from foundation.images import image_path_policy
from reward_models import load_reward
from reward_models.server import MAX_HEADER_BYTES, HTTPError, RequestHead

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("serve_reward_security", REPO / "scripts" / "serve_reward.py")
serve = importlib.util.module_from_spec(spec)
spec.loader.exec_module(serve)


@contextlib.contextmanager
def serving(reward_fn, **kwargs):
    """``make_server(reward_fn, ...)`` served on a thread; yields ``(server, base_url)``."""
    server = serve.make_server(reward_fn, "127.0.0.1", 0, **kwargs)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def post(url, body, path="/score", timeout=10):
    """Raw POST; returns ``(status, JSON reply, headers)``."""
    conn = http.client.HTTPConnection("127.0.0.1", int(url.rsplit(":", 1)[1]), timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read()), dict(resp.getheaders())
    finally:
        conn.close()


def png_b64(arr):
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def header_only_png(w, h):
    """A PNG whose header claims ``w x h`` pixels, with a few bytes of compressed data."""

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = (
        serve.PNG_SIGNATURE
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(b"\0" * 16))
        + chunk(b"IEND", b"")
    )
    return base64.b64encode(raw).decode()


def body(images, metadata, prompts=None):
    return json.dumps({"images": images, "prompts": prompts or ["p"] * len(images), "metadata": metadata})


GEN = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)  # the generated image
GEN_B64 = png_b64(GEN)
PSNR = load_reward("psnr")


@pytest.fixture
def tree(tmp_path):
    """A data root holding gt.png (= GEN), sub/gt.png, a text file and symlinks, with files outside it."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    Image.fromarray(GEN).save(root / "gt.png")
    Image.fromarray(GEN).save(root / "sub" / "gt.png")
    (root / "notes.txt").write_text("not an image")
    Image.fromarray(255 - GEN).save(tmp_path / "outside.png")
    os.symlink(tmp_path / "outside.png", root / "out_link.png")
    os.symlink(root / "gt.png", root / "in_link.png")
    os.symlink(tmp_path, root / "out_dir")
    os.symlink(root, tmp_path / "root_link")
    return tmp_path, root


def assert_no_server_path(message, *paths):
    for p in paths:
        assert str(p) not in message, (p, message)
    assert "/tmp" not in message and "/work" not in message, message


# ------------------------------------------------------------------------------------ paths
def test_paths_refused_without_data_root(tree, monkeypatch):
    tmp_path, root = tree
    monkeypatch.chdir(root)  # relative paths used to resolve against the server's working directory
    with serving(PSNR, name="psnr") as (srv, url):
        for gt in ["gt.png", str(root / "gt.png"), "/etc/passwd", "../outside.png", "nope.png"]:
            status, reply, _ = post(url, body([GEN_B64], [{"ground_truth": gt}]))
            assert status == 400, (gt, reply)
            assert reply["error"].startswith("metadata[0]['ground_truth']: file paths in metadata are refused")
            assert_no_server_path(reply["error"], root, tmp_path)
        n = srv.stats["requests"]
        with pytest.raises(ValueError, match=r"HTTP 400.*metadata\[0\]\['ground_truth'\].*refused"):
            load_reward("remote", url=url, retries=3)(torch.zeros(1, 3, 16, 16), ["p"], [{"ground_truth": "gt.png"}])
        assert srv.stats["requests"] == n + 1  # a 4xx is not retried
        # local use in the same process (no policy in this thread) still reads paths relative to the cwd
        x = torch.from_numpy(GEN).permute(2, 0, 1)[None].float() / 255
        assert PSNR(x, ["p"], [{"ground_truth": "gt.png"}])[0][0] == 100.0


def test_data_root_confines_paths(tree):
    tmp_path, root = tree
    x_ok = torch.from_numpy(GEN).permute(2, 0, 1)[None].float() / 255
    for data_root in (str(root), str(tmp_path / "root_link")):  # the root itself may be given via a symlink
        with serving(PSNR, name="psnr", data_root=data_root, max_batch=2) as (srv, url):
            for gt in ["gt.png", "sub/gt.png", "in_link.png", "./sub//gt.png"]:
                status, reply, _ = post(url, body([GEN_B64], [{"ground_truth": gt}]))
                assert status == 200 and reply["scores"] == [100.0], (gt, reply)
            refused = {
                "../outside.png": "without '..'",
                "sub/../gt.png": "without '..'",
                str(root / "gt.png"): "relative",
                "/etc/passwd": "relative",
                "out_link.png": "outside the server's data root",
                "out_dir/outside.png": "outside the server's data root",
                "nope.png": "no such image file",
                "sub": "no such image file",
                "notes.txt": "not a readable image",
                "": "relative",
                "a\0b": "relative",
            }
            for gt, expected in refused.items():
                meta = [{}, {}, {}, {"ground_truth": gt}]  # row 3 lies in the second chunk of the server
                status, reply, _ = post(url, body([GEN_B64] * 4, meta))
                assert status == 400 and reply["error"].startswith("metadata[3]['ground_truth']: "), (gt, reply)
                assert expected in reply["error"], (gt, reply)
                assert_no_server_path(reply["error"], root, tmp_path, os.path.realpath(root))
            scores, _ = load_reward("remote", url=url)(x_ok, ["p"], [{"ground_truth": "sub/gt.png"}])
            assert scores.tolist() == [100.0]


def test_ground_truth_files_count_against_the_request_budget(tree):
    _, root = tree
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(root / "big.png")
    rows = [{"ground_truth": "gt.png"}, {"ground_truth": "big.png"}, {"ground_truth": "gt.png"}]
    need = 3 * 256 + 256 + 4096 + 256  # three 16x16 PNGs, then the files of rows 0, 1, 2
    with serving(PSNR, data_root=str(root), max_request_pixels=need) as (_, url):
        assert post(url, body([GEN_B64] * 3, rows))[0] == 200
    with serving(PSNR, data_root=str(root), max_request_pixels=need - 1) as (_, url):
        status, reply, _ = post(url, body([GEN_B64] * 3, rows))
        assert status == 413 and reply["error"] == (
            "metadata[2]['ground_truth']: the image has 16x16 pixels, more than what is left of the request's budget"
        )
    with serving(PSNR, data_root=str(root), max_pixels=32 * 32) as (_, url):
        status, reply, _ = post(url, body([GEN_B64] * 3, rows))
        assert status == 413 and reply["error"].startswith("metadata[1]['ground_truth']: the image has 64x64 pixels")
        assert "limit per image" in reply["error"]


def test_policy_only_applies_inside_its_block(tree, monkeypatch):
    tmp_path, root = tree
    monkeypatch.chdir(tmp_path)
    x = torch.from_numpy(GEN).permute(2, 0, 1)[None].float() / 255
    seen = []

    def policy(path, index, key):
        seen.append((path, index, key))
        return str(root / "gt.png")

    with image_path_policy(policy):  # the raw string goes to the policy: no root, no ~ expansion
        assert load_reward("psnr", root="/elsewhere")(x, ["p"], [{"ground_truth": "~/x.png"}])[0][0] == 100.0
    assert seen == [("~/x.png", 0, "ground_truth")]
    assert load_reward("psnr", root=str(root))(x, ["p"], [{"ground_truth": "sub/gt.png"}])[0][0] == 100.0
    assert PSNR(x, ["p"], [{"ground_truth": "root/gt.png"}])[0][0] == 100.0  # relative to the cwd, as before

    def unreadable(path, index, key):
        return str(root / "notes.txt")

    with image_path_policy(unreadable), pytest.raises(ValueError) as err:
        PSNR(x, ["p"], [{"ground_truth": "x.png"}])
    assert "cannot be read as an image" in str(err.value) and str(root) not in str(err.value)


# ------------------------------------------------------------------------------------ arrays in metadata
def test_nested_metadata_arrays_still_work():
    x = torch.from_numpy(np.stack([GEN, 255 - GEN, GEN])).permute(0, 3, 1, 2).float() / 255
    meta = [
        {"ground_truth": torch.from_numpy(GEN).permute(2, 0, 1).contiguous()},  # uint8 -> JSON ints
        {"ground_truth": x[0].numpy() * 0.5},  # float array -> JSON floats
        {"ground_truth": None},
    ]
    local, _ = PSNR(x, ["p"] * 3, meta)
    with serving(PSNR, max_batch=2) as (_, url):
        remote, info = load_reward("remote", url=url)(x, ["p"] * 3, meta)
    np.testing.assert_allclose(remote, local, rtol=1e-5)
    assert remote[0] == 100.0 and np.isnan(remote[2]) and info["missing"] == [0, 1]
    # metadata numbers count against the request's budget: 3 numbers = 1 pixel
    with serving(PSNR, max_request_pixels=16 * 16 + 16 * 16 - 1) as (_, url):
        status, reply, _ = post(url, body([GEN_B64], [{"ground_truth": GEN.transpose(2, 0, 1).tolist()}]))
        assert status == 413 and "numbers in metadata arrays" in reply["error"]
    with pytest.raises(ValueError, match="rectangular"):
        PSNR(x[:1], ["p"], [{"ground_truth": [[[0.5]], [[0.5, 0.5]], [[0.5]]]}])
    with pytest.raises(ValueError, match="0..255"):
        PSNR(x[:1], ["p"], [{"ground_truth": [[[300] * 16] * 16] * 3}])


# ------------------------------------------------------------------------------------ pixel budgets
def test_pixel_budget_is_checked_from_headers_before_decoding(monkeypatch):
    opened = []
    real_open = Image.open
    monkeypatch.setattr(Image, "open", lambda *a, **k: opened.append(1) or real_open(*a, **k))
    calls = []
    with serving(lambda i, p, m: (calls.append(1) or [0.0] * len(p), {}), max_request_pixels=2**22) as (srv, url):
        huge = header_only_png(100_000, 100_000)  # 10^10 pixels claimed, a few dozen bytes sent
        assert len(huge) < 200
        t0 = time.perf_counter()
        status, reply, _ = post(url, body([huge], [{}]))
        assert status == 413 and "images[0] has 100000x100000 pixels" in reply["error"]
        # each image within the per-image limit, the request over its budget
        status, reply, _ = post(url, body([header_only_png(1024, 1024)] * 5, [{}] * 5))
        assert status == 413 and "needs 5242880 decoded pixels" in reply["error"] and "4194304" in reply["error"]
        assert time.perf_counter() - t0 < 1.0
        assert opened == [] and calls == [] and srv.budget.used == 0  # nothing was decoded
        status, reply, _ = post(url, body([GEN_B64], [{}]))
        assert status == 200 and opened == [1] and srv.budget.used == 0


def test_server_budget_503_with_retry_after_then_client_retries():
    entered, release = threading.Event(), threading.Event()

    def slow(images, prompts, metadata):
        if metadata[0].get("slow"):
            entered.set()
            release.wait(5)
        return [1.0] * len(prompts), {}

    one = 16 * 16  # pixels of one GEN request (a scalar in metadata does not count)
    with serving(slow, max_request_pixels=one, max_server_pixels=one, budget_wait=0.1) as (srv, url):
        held = threading.Thread(target=post, args=(url, body([GEN_B64], [{"slow": 1}])))
        held.start()
        assert entered.wait(5)
        status, reply, headers = post(url, body([GEN_B64], [{}]))
        assert status == 503 and headers["Retry-After"] == "1" and "server busy" in reply["error"]
        # free the budget once the client below has had its own 503
        threading.Thread(target=lambda: (wait_until(lambda: srv.stats["busy"] >= 2), release.set())).start()
        t0 = time.perf_counter()
        scores, _ = load_reward("remote", url=url, retries=3, backoff=0.01)(torch.rand(1, 3, 16, 16), ["p"], [{}])
        assert scores.tolist() == [1.0] and 0.9 < time.perf_counter() - t0 < 5  # slept Retry-After, not 0.01 s
        held.join(5)
        assert srv.stats["busy"] >= 2 and srv.budget.used == 0


# ------------------------------------------------------------------------------------ JSON shape
def test_nested_and_oversized_json_is_400():
    with serving(PSNR, max_body=2**20) as (srv, url):
        t0 = time.perf_counter()
        status, reply, _ = post(url, b"[" * 2000)
        assert status == 400 and "nested too deeply" in reply["error"] and time.perf_counter() - t0 < 1
        deep = {"images": [GEN_B64], "prompts": ["p"], "metadata": [{"x": json.loads("[" * 40 + "]" * 40)}]}
        status, reply, _ = post(url, json.dumps(deep))
        assert status == 400 and "nested too deeply" in reply["error"]
        status, reply, _ = post(url, b'{"images": [' + b"[]," * 300_000 + b"[]]}")
        assert status == 400 and "arrays/objects" in reply["error"]
        status, reply, _ = post(url, b"[" * (2**20 + 1))
        assert status == 413
        n = srv.stats["requests"]
        deep_meta = 0
        for _ in range(40):
            deep_meta = [deep_meta]
        with pytest.raises(ValueError, match="HTTP 400.*nested too deeply"):
            load_reward("remote", url=url, retries=3)(torch.rand(1, 3, 8, 8), ["p"], [{"x": deep_meta}])
        assert srv.stats["requests"] == n + 1  # not retried


# ------------------------------------------------------------------------------------ connections
def wait_until(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def _connect(url, data=b""):
    s = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])))
    if data:
        s.sendall(data)
    return s


def test_idle_connections_do_not_grow_threads():
    kwargs = dict(max_connections=4, header_timeout=3.0, body_timeout=1.0)  # at most 8 x 4 pending; 3 s: a loaded box
    with serving(lambda i, p, m: ([1.0] * len(p), {}), **kwargs) as (srv, url):
        baseline = threading.active_count()  # the serving thread and the 4 workers
        idle = [_connect(url) for _ in range(200)]  # open, send nothing
        partial = [_connect(url, b"POST /score HTTP/1.1\r\nHost: x\r\n") for _ in range(20)]  # headers never end
        slow = [_connect(url, b"POST /score HTTP/1.1\r\nContent-Length: 100\r\n\r\n{") for _ in range(3)]  # body
        wait_until(lambda: srv.stats["requests"] == 3)  # the slow ones hold 3 workers
        assert threading.active_count() <= baseline
        status, reply, _ = post(url, body([GEN_B64], [{}]))  # the fourth worker serves a normal request
        assert status == 200
        # ... while the others are still open: the oldest idle ones were evicted to keep 32 pending (a few
        # more if later arrivals found the set full), none has timed out yet
        assert 200 + 20 - 32 <= srv.stats["dropped"] <= 200 + 20 - 32 + 4 and srv.stats["errors"] == 0
        for s in slow:  # past the body timeout: 408
            s.settimeout(5)
            assert b" 408 " in s.recv(4096).split(b"\r\n", 1)[0]
        for s in idle[-5:] + partial[-5:]:  # past the header timeout: dropped by the server
            s.settimeout(5)
            with contextlib.suppress(ConnectionResetError):
                assert s.recv(1) == b""
        assert srv.stats["dropped"] == 200 + 20 and threading.active_count() <= baseline
        assert post(url, body([GEN_B64], [{}]))[0] == 200
        for s in idle + partial + slow:
            s.close()


def test_queue_full_is_503_with_retry_after():
    with serving(lambda i, p, m: ([1.0] * len(p), {}), max_connections=1, body_timeout=1.0) as (srv, url):
        stalled = b"POST /score HTTP/1.1\r\nContent-Length: 10\r\n\r\n"
        busy = [_connect(url, stalled)]  # taken by the only worker, which waits for its body
        wait_until(lambda: srv.stats["requests"] == 1)
        busy.append(_connect(url, stalled))  # queued
        wait_until(lambda: srv._work.qsize() == 1)
        refused = _connect(url, stalled)
        refused.settimeout(2)
        reply = refused.recv(4096)
        assert reply.startswith(b"HTTP/1.0 503") and b"Retry-After: 1" in reply and b"server busy" in reply
        assert srv.stats["busy"] == 1
        for s in busy + [refused]:
            s.close()


# ------------------------------------------------------------------------------------ messages
def test_reward_errors_are_redacted(tree):
    _, root = tree

    def leaky(images, prompts, metadata):
        raise OSError(f"cannot open {root}/weights.bin nor '/etc/shadow' (cwd {os.getcwd()})")

    with serving(leaky, name="leaky", data_root=str(root)) as (_, url):
        status, reply, _ = post(url, body([GEN_B64], [{}]))
    assert status == 500 and reply["error"].startswith("reward 'leaky' raised OSError: cannot open <path>")
    assert_no_server_path(reply["error"], root, os.getcwd())
    assert "/etc/shadow" not in reply["error"]
    assert serve.redact("see http://host:1/score and a/b, 3/4") == "see http://host:1/score and a/b, 3/4"
    assert serve.public_name("/home/op/rewards/mine.py:score") == "mine.py:score"
    assert serve.public_name("psnr") == "psnr" and serve.public_name("dir/r.py") == "r.py"


def test_health_reports_limits_without_paths(tree):
    _, root = tree
    with serving(PSNR, name="psnr", data_root=str(root)) as (_, url):
        conn = http.client.HTTPConnection("127.0.0.1", int(url.rsplit(":", 1)[1]), timeout=5)
        conn.request("GET", "/health")
        health = json.loads(conn.getresponse().read())
        conn.close()
    assert health["paths"] is True and health["max_request_pixels"] == serve.DEFAULT_MAX_REQUEST_PIXELS
    assert str(root) not in json.dumps(health)


# ------------------------------------------------------------------------------------ raw bytes
def client_hello():
    """The first bytes an https:// client sends: a real TLS ClientHello, built in memory."""
    import ssl

    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


RAW = {  # bytes a client sends -> (status, start of the error); none of them can begin an HTTP/1.x request
    "telnet hello": (b"hello\r\n", 400, "not an HTTP/1.x request: it does not start with a method"),
    "no newline": (b"hello", 400, "not an HTTP/1.x request: it does not start with a method"),
    "TLS ClientHello": (client_hello(), 400, "this server speaks plain HTTP, not TLS"),
    "random bytes": (
        bytes(np.random.default_rng(1).integers(11, 256, 128, dtype=np.uint8)),
        400,
        "not an HTTP/1.x request",
    ),
    "SSH banner": (b"SSH-2.0-OpenSSH_9.6\r\n", 400, "not an HTTP/1.x request: it does not start with a method"),
    "lower-case method": (b"post /score HTTP/1.1\r\n", 400, "not an HTTP/1.x request: it does not start"),
    "control byte in target": (b"GET /\x00", 400, "not an HTTP/1.x request: the request target"),
    "HTTP/0.9": (b"GET /health\r\n", 400, "not an HTTP/1.x request: the request line has no HTTP version"),
    "request line that never ends": (b"GET /" + b"x" * 20_000, 414, "request line longer than 8192 bytes"),
    "binary header": (b"GET /health HTTP/1.1\r\n\x00\x01\xff", 400, "not an HTTP/1.x request: header line 1"),
    "header value": (b"GET /health HTTP/1.1\r\nHost: a\x07b", 400, "not an HTTP/1.x request: header line 1 holds"),
}


@pytest.mark.parametrize("case", RAW)
def test_raw_non_http_bytes_are_answered_at_once(case):
    data, status, error = RAW[case]
    with serving(lambda i, p, m: ([1.0] * len(p), {})) as (srv, url):  # default header timeout: 10 s
        s = _connect(url)
        s.settimeout(2)
        t0 = time.perf_counter()
        s.sendall(data)
        reply = s.recv(65536)
        elapsed = time.perf_counter() - t0
        head, _, payload = reply.partition(b"\r\n\r\n")
        assert head.startswith(f"HTTP/1.0 {status} ".encode()), (case, reply)
        assert json.loads(payload)["error"].startswith(error), (case, payload)
        assert s.recv(1) == b"" and elapsed < 0.5, (case, elapsed)  # answered, then closed
        assert srv.stats["refused"] == 1 and srv.stats["requests"] == 0  # no worker was taken
        s.close()


def test_https_client_fails_at_once():
    import ssl

    with serving(lambda i, p, m: ([1.0] * len(p), {})) as (_, url):
        t0 = time.perf_counter()
        with _connect(url) as s, pytest.raises(ssl.SSLError):
            s.settimeout(2)
            ssl.create_default_context().wrap_socket(s, server_hostname="localhost")
        assert time.perf_counter() - t0 < 0.5


def test_slow_http_is_bounded_by_the_header_timeout_only():
    request = (
        f"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body([], []))}"
        f"\r\n\r\n{body([], [])}"
    ).encode()
    with serving(lambda i, p, m: ([1.0] * len(p), {}), header_timeout=0.4) as (srv, url):
        slow = _connect(url)
        for i in range(0, len(request), 8):  # a slow link: 8 bytes every 10 ms, the head takes ~0.1 s
            slow.sendall(request[i : i + 8])
            time.sleep(0.01)
        slow.settimeout(2)
        assert slow.recv(4096).startswith(b"HTTP/1.0 200 ")
        stalled = _connect(url, b"POST /sco")  # looks like HTTP: waits for the rest ...
        stalled.settimeout(0.2)
        with pytest.raises(TimeoutError):
            stalled.recv(1)
        stalled.settimeout(2)
        t0 = time.perf_counter()
        with contextlib.suppress(ConnectionResetError):  # ... until the header timeout drops it, unanswered
            assert stalled.recv(1) == b""
        assert time.perf_counter() - t0 < 0.5
        assert srv.stats["dropped"] == 1 and srv.stats["refused"] == 0
        for s in (slow, stalled):
            s.close()


def test_request_head_checks_each_prefix():
    head = b"POST /score HTTP/1.1\r\nHost: h\r\n folded\r\nX-Empty:\r\nX: caf\xc3\xa9\tx\r\n\r\n{}"
    reader = RequestHead()
    done = [reader.feed(head[i : i + 1]) for i in range(head.index(b"\r\n\r\n") + 4)]
    assert done[-1] and not any(done[:-1])  # every prefix may still become a request
    assert RequestHead().feed(b"GET http://h/x?a=1 HTTP/1.0\n\n")  # LF line ends, absolute target
    for raw, bad_at in [(b"Hello", 1), (b"GET /x HTTP/1.1\r\nHost x", 21), (b"GET /x HTP", 9), (b"A" * 30, 20)]:
        reader = RequestHead()
        for i in range(len(raw)):
            try:
                reader.feed(raw[i : i + 1])
            except HTTPError:
                assert i == bad_at, (raw, i)
                break
        else:
            raise AssertionError(f"{raw!r} was not refused")

    def feed_bytewise(n: int) -> float:  # seconds to feed n header bytes one at a time
        reader = RequestHead()
        reader.feed(b"GET / HTTP/1.1\r\nX: ")
        t0 = time.perf_counter()
        for _ in range(n):
            reader.feed(b"v")
        return time.perf_counter() - t0

    # one byte at a time: linear, not quadratic. 8x the bytes cost ~8x the time when linear and ~64x when quadratic;
    # a ratio (the best of 3 each) rather than a wall-clock bound, so a loaded machine does not fail it
    small = min(feed_bytewise((MAX_HEADER_BYTES - 30) // 8) for _ in range(3))
    large = min(feed_bytewise(MAX_HEADER_BYTES - 30) for _ in range(3))
    assert large / small < 24, (large, small)
    reader = RequestHead()
    reader.feed(b"GET / HTTP/1.1\r\nX: " + b"v" * (MAX_HEADER_BYTES - 30))
    with pytest.raises(HTTPError, match="larger than 65536"):
        reader.feed(b"vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv")
