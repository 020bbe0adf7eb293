"""Serve any reward (a registry name or ``path/to/file.py:fn``) over HTTP, JSON only (never pickle).

Usage:
  python scripts/serve_reward.py --reward jpeg_compressibility --port 8765
  python scripts/serve_reward.py --reward my_reward.py:score --kwargs '{"quality": 90}' --max_batch 16
  DDPO_REWARD_TOKEN=secret python scripts/serve_reward.py --reward pickscore --host 0.0.0.0 --port 8765

  --reward      what reward_models.load_reward(NAME, **kwargs) builds
  --host        interface to bind (default 127.0.0.1, loopback only; a warning is printed when another
                interface is bound without a token)
  --port        port (default 8765; 0 picks a free one); the bound address is printed on start-up
                as a line "serving NAME on http://HOST:PORT"
  --token       require "Authorization: Bearer TOKEN" on /score (default: $DDPO_REWARD_TOKEN; prefer the
                environment variable, since command lines are visible to other users in `ps`)
  --kwargs      JSON object of keyword arguments for the reward factory
  --max_batch   the reward is called on at most this many images at once (larger requests are scored
                in consecutive chunks and their info dicts merged as reward_models.remote.merge_infos)
  --max_body_mb largest accepted request body in MiB (default 64); larger ones get 413

Train against it with reward.fns = {"remote": 1.0}, reward.kwargs = {"remote": {"url": "http://HOST:PORT"}}
(reward_models/remote.py).

Protocol, version 1 (every body is JSON, UTF-8; every reply carries "protocol": 1):
  POST /score  {"protocol": 1, "images": [base64 PNG, ...], "prompts": [str, ...], "metadata": [object, ...]}
               -> 200 {"protocol": 1, "scores": [float | null, ...], "info": {...}}
               "images", "prompts" and "metadata" are required and of equal length; "protocol" may be
               omitted (taken as 1), any other version is refused. Each PNG is decoded to 8-bit RGB
               (alpha dropped) and the batch is handed to the reward as a float32 tensor (B, 3, H, W)
               in [0, 1] (value / 255), so uint8 images round-trip exactly. All images of one request
               must have the same size (a request mixing sizes is refused with 400: send one request per
               size). A null score is NaN ("not applicable to this sample"); non-finite values in
               "info" are sent as null as well.
  GET /health  -> 200 {"protocol": 1, "status": "ok", "reward": NAME, "max_batch": N, "requests": n}
               (no token needed, for liveness probes).
  Errors: {"protocol": 1, "error": "message naming what is wrong"} with
               400 invalid JSON, missing / mistyped field, lengths differ, bad base64, not a PNG,
                   undecodable PNG, mixed image sizes, unsupported protocol version
               401 missing or wrong bearer token      404 unknown path     405 wrong method for a path
               408 body not received in time          411 no Content-Length (chunked bodies unsupported)
               413 body larger than --max_body_mb, or an image with too many pixels
               500 the reward raised or returned something that is not (scores[B], info); message inside.
Requests are handled on threads (decoding runs concurrently) but the reward itself is called under a
lock, one batch at a time, since model-based rewards are rarely thread-safe. One log line per request:
client, method, path, status, number of images, milliseconds from the request to its answer being
ready (and the error, if any).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hmac
import io
import ipaddress
import json
import logging
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import numpy as np  # noqa: E402

from reward_models import coerce_scores  # noqa: E402
from reward_models.remote import PROTOCOL, TOKEN_ENV, merge_infos, to_jsonable  # noqa: E402

DEFAULT_MAX_BODY = 64 * 1024 * 1024  # bytes
DEFAULT_MAX_PIXELS = 4096 * 4096  # per image
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
LOG = logging.getLogger("ddpo_grpo.serve_reward")


class HTTPError(Exception):
    """A request the server refuses: ``status`` and a message for the client."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def decode_images(items: Any, max_pixels: int = DEFAULT_MAX_PIXELS):
    """List of base64 PNG strings -> float32 tensor ``(B, 3, H, W)`` in ``[0, 1]``; raises :class:`HTTPError`."""
    from PIL import Image

    arrays = []
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise HTTPError(400, f"images[{i}] must be a base64 string, got {type(item).__name__}")
        try:
            raw = base64.b64decode(item, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise HTTPError(400, f"images[{i}] is not valid base64: {exc}") from None
        if not raw.startswith(PNG_SIGNATURE):
            raise HTTPError(400, f"images[{i}] is not a PNG (starts with {raw[:8]!r}); encode images as PNG")
        try:
            with Image.open(io.BytesIO(raw), formats=["PNG"]) as img:
                w, h = img.size
                if w * h > max_pixels:
                    raise HTTPError(413, f"images[{i}] has {w}x{h} pixels, more than the server's limit {max_pixels}")
                arr = np.asarray(img.convert("RGB"), dtype=np.uint8)
        except HTTPError:
            raise
        except Exception as exc:  # truncated / corrupt data, decompression bombs, ...
            raise HTTPError(400, f"images[{i}] is not a decodable PNG: {type(exc).__name__}: {exc}") from None
        if arrays and arr.shape != arrays[0].shape:
            h0, w0 = arrays[0].shape[:2]
            raise HTTPError(
                400,
                f"images must all have the same size in one request: images[0] is {w0}x{h0} but images[{i}] "
                f"is {w}x{h}; send one request per size",
            )
        arrays.append(arr)
    import torch

    batch = torch.from_numpy(np.stack(arrays))  # [B, H, W, 3] uint8
    return batch.permute(0, 3, 1, 2).float().div_(255.0)  # [B, 3, H, W] in [0, 1]


def parse_request(body: bytes) -> Tuple[list, list, list]:
    """Validate a ``/score`` body; returns ``(images_b64, prompts, metadata)`` or raises :class:`HTTPError`."""
    try:
        req = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise HTTPError(400, f"body is not valid JSON: {exc}") from None
    if not isinstance(req, dict):
        raise HTTPError(400, f"body must be a JSON object with images, prompts, metadata; got {type(req).__name__}")
    version = req.get("protocol", PROTOCOL)
    if version != PROTOCOL:
        raise HTTPError(400, f"unsupported protocol version {version!r}; this server speaks protocol {PROTOCOL}")
    missing = [k for k in ("images", "prompts", "metadata") if k not in req]
    if missing:
        raise HTTPError(400, f"missing field(s) {missing}; expected images, prompts, metadata")
    images, prompts, metadata = req["images"], req["prompts"], req["metadata"]
    for key, value in (("images", images), ("prompts", prompts), ("metadata", metadata)):
        if not isinstance(value, list):
            raise HTTPError(400, f"field {key!r} must be a list, got {type(value).__name__}")
    if not (len(images) == len(prompts) == len(metadata)):
        raise HTTPError(
            400,
            f"lengths differ: {len(images)} images, {len(prompts)} prompts, {len(metadata)} metadata rows",
        )
    for i, p in enumerate(prompts):
        if not isinstance(p, str):
            raise HTTPError(400, f"prompts[{i}] must be a string, got {type(p).__name__}")
    for i, m in enumerate(metadata):
        if not isinstance(m, dict):
            raise HTTPError(400, f"metadata[{i}] must be an object, got {type(m).__name__}")
    return images, prompts, metadata


class RewardServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` holding the reward fn and the limits; see :func:`make_server`."""

    daemon_threads = True

    def __init__(self, address, reward_fn, *, name, token, max_body, max_batch, max_pixels):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, RewardHandler)
        self.reward_fn = reward_fn
        self.name = name
        self.token = token
        self.max_body = int(max_body)
        self.max_batch = int(max_batch)
        self.max_pixels = int(max_pixels)
        self.reward_lock = threading.Lock()
        self.stats_lock = threading.Lock()
        self.stats = {"requests": 0, "reward_calls": 0, "images": 0, "errors": 0}

    def count(self, **inc: int) -> None:
        with self.stats_lock:
            for k, v in inc.items():
                self.stats[k] += v

    def score(self, images, prompts: list, metadata: list) -> Tuple[list, dict]:
        """Call the reward in chunks of ``max_batch``; returns JSON-ready ``(scores, info)``."""
        scores, infos = [], []
        for start in range(0, len(prompts), self.max_batch):
            end = min(start + self.max_batch, len(prompts))
            try:
                with self.reward_lock:
                    self.count(reward_calls=1)
                    out = self.reward_fn(images[start:end], prompts[start:end], metadata[start:end])
            except Exception as exc:
                LOG.exception("reward %r raised", self.name)
                raise HTTPError(500, f"reward {self.name!r} raised {type(exc).__name__}: {exc}") from None
            if not (isinstance(out, tuple) and len(out) == 2):
                raise HTTPError(500, f"reward {self.name!r} must return a (scores, info) tuple, got {type(out).__name__}")
            try:
                chunk = coerce_scores(self.name, out[0], end - start)
            except ValueError as exc:
                raise HTTPError(500, str(exc)) from None
            scores.extend(None if not np.isfinite(s) else float(s) for s in chunk)
            infos.append(to_jsonable(out[1] or {}))
        return scores, merge_infos(infos)


class RewardHandler(BaseHTTPRequestHandler):
    """Routes ``POST /score`` and ``GET /health``; every reply is JSON, every request one log line."""

    server: RewardServer
    server_version = "ddpo-reward/1"
    timeout = 60  # seconds of socket inactivity before a slow client is dropped

    # -- plumbing ------------------------------------------------------------------------------
    def log_request(self, code="-", size="-"):  # replaced by the single line in _finish
        pass

    def log_message(self, format, *args):
        LOG.info("%s %s", self.address_string(), format % args)

    def send_error(self, code, message=None, explain=None):
        """Errors raised by the base class (bad request line, unknown method) as JSON too."""
        self._log(code, 0, message)
        self._reply(code, {"error": message or self.responses.get(code, ("error",))[0]})

    def _reply(self, status: int, payload: dict) -> None:
        body = json.dumps({"protocol": PROTOCOL, **payload}, allow_nan=False).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if status == 401:
                self.send_header("WWW-Authenticate", 'Bearer realm="reward"')
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError:  # client went away; nothing left to tell it
            pass

    def _log(self, status: int, n_images: int, error: Optional[str], t0: Optional[float] = None) -> None:
        ms = (time.perf_counter() - t0) * 1e3 if t0 is not None else 0.0
        request = f'{getattr(self, "command", None) or "-"} {getattr(self, "path", None) or "-"}'
        line = f'{self.address_string()} "{request}" {status} images={n_images} {ms:.1f}ms'
        if error:
            line += f" error: {error}"
        (LOG.warning if status >= 500 else LOG.info)(line)

    def _dispatch(self, route: Callable[[], Tuple[dict, int]]) -> None:
        t0 = time.perf_counter()
        self._body_consumed = False
        self.server.count(requests=1)
        n_images, error = 0, None
        try:
            payload, n_images = route()
            status = 200
        except HTTPError as exc:
            status, error = exc.status, exc.message
            payload = {"error": exc.message}
        except Exception as exc:  # a server bug: still answer JSON and keep serving
            LOG.exception("unexpected error")
            status, error = 500, f"internal server error: {type(exc).__name__}: {exc}"
            payload = {"error": error}
        if status != 200:
            self.server.count(errors=1)
            if not self._body_consumed:
                self._discard()
        self._log(status, n_images, error, t0)  # before answering, so a client that has its answer sees the line
        self._reply(status, payload)

    # -- routes --------------------------------------------------------------------------------
    def do_GET(self):
        self._dispatch(self._get)

    def do_POST(self):
        self._dispatch(self._post)

    def do_PUT(self):
        self._dispatch(self._wrong_method)

    do_DELETE = do_PATCH = do_HEAD = do_PUT

    def _route(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/") or "/"

    def _wrong_method(self):
        route = self._route()
        if route == "/score":
            raise HTTPError(405, f"{self.command} {route} is not supported; use POST /score")
        if route == "/health":
            raise HTTPError(405, f"{self.command} {route} is not supported; use GET /health")
        raise HTTPError(404, f"unknown path {route!r}; use POST /score or GET /health")

    def _get(self):
        if self._route() == "/health":
            with self.server.stats_lock:
                requests = self.server.stats["requests"]
            return {"status": "ok", "reward": self.server.name, "max_batch": self.server.max_batch,
                    "requests": requests}, 0
        return self._wrong_method()

    def _check_token(self) -> None:
        token = self.server.token
        if not token:
            return
        got = self.headers.get("Authorization", "")
        scheme, _, value = got.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
            what = "missing" if not got else "wrong"
            raise HTTPError(401, f"{what} bearer token: send the header 'Authorization: Bearer <token>' "
                                 f"(the client reads it from {TOKEN_ENV} or its token argument)")

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise HTTPError(411, "chunked bodies are not supported; send a Content-Length header")
        length_str = self.headers.get("Content-Length")
        if length_str is None:
            raise HTTPError(411, "missing Content-Length header")
        try:
            length = int(length_str)
            if length < 0:
                raise ValueError
        except ValueError:
            raise HTTPError(400, f"invalid Content-Length {length_str!r}") from None
        if length > self.server.max_body:
            raise HTTPError(
                413, f"body of {length} bytes is larger than the server's limit of {self.server.max_body} bytes; "
                     "send fewer images per request (client max_batch) or raise --max_body_mb")
        self._body_consumed = True
        try:
            body = self.rfile.read(length)
        except (socket.timeout, TimeoutError):
            raise HTTPError(408, f"body not received within {self.timeout}s") from None
        if len(body) != length:
            raise HTTPError(400, f"body truncated: got {len(body)} of {length} bytes")
        return body

    def _discard(self) -> None:
        """Read and drop the body of a refused request (for at most 2 s).

        Closing a socket with unread input makes the kernel reset the connection, and the client
        would then see a reset instead of the answer (401, 404, 413, ...).
        """
        self._body_consumed = True
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            return
        left = length
        deadline = time.monotonic() + 2.0
        try:
            self.connection.settimeout(0.5)
            while left > 0 and time.monotonic() < deadline:
                chunk = self.rfile.read1(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)
        except OSError:
            pass

    def _post(self):
        if self._route() != "/score":
            return self._wrong_method()
        self._check_token()
        body = self._read_body()
        images_b64, prompts, metadata = parse_request(body)
        if not prompts:
            return {"scores": [], "info": {}}, 0
        images = decode_images(images_b64, self.server.max_pixels)
        scores, info = self.server.score(images, prompts, metadata)
        self.server.count(images=len(scores))
        return {"scores": scores, "info": info}, len(scores)


def make_server(
    reward_fn: Callable,
    host: str = "127.0.0.1",
    port: int = 0,
    token: Optional[str] = None,
    max_body: int = DEFAULT_MAX_BODY,
    *,
    max_batch: int = 64,
    name: str = "reward",
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> RewardServer:
    """Bind (without serving) an HTTP server for ``reward_fn``; ``server.server_address`` has the port.

    Run it with ``server.serve_forever()`` (e.g. on a thread), stop it with ``server.shutdown()``
    and ``server.server_close()``. ``token=None`` or ``""`` means no authentication.
    """
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    if max_body < 1:
        raise ValueError(f"max_body must be >= 1 byte, got {max_body}")
    return RewardServer((host, port), reward_fn, name=name, token=token or None, max_body=max_body,
                        max_batch=max_batch, max_pixels=max_pixels)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     epilog=__doc__.split("\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reward", required=True, help="registry name or path/to/file.py:fn")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--token", default=None, help=f"bearer token (default: ${TOKEN_ENV})")
    parser.add_argument("--kwargs", default="{}", help="JSON object of reward factory kwargs")
    parser.add_argument("--max_batch", type=int, default=64)
    parser.add_argument("--max_body_mb", type=float, default=DEFAULT_MAX_BODY / 2**20)
    args = parser.parse_args(argv)

    try:
        kwargs = json.loads(args.kwargs)
    except ValueError as exc:
        parser.error(f"--kwargs is not valid JSON: {exc}")
    if not isinstance(kwargs, dict):
        parser.error(f"--kwargs must be a JSON object, got {type(kwargs).__name__}")
    if args.max_batch < 1:
        parser.error("--max_batch must be >= 1")
    if args.max_body_mb <= 0:
        parser.error("--max_body_mb must be > 0")
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    import reward_models

    try:
        reward_fn = reward_models.load_reward(args.reward, **kwargs)
    except (ValueError, TypeError, RuntimeError) as exc:  # unknown name, bad kwargs, user file failed
        parser.error(str(exc))
    server = make_server(reward_fn, args.host, args.port, token, int(args.max_body_mb * 2**20),
                         max_batch=args.max_batch, name=args.reward)
    host, port = server.server_address[:2]
    if not _is_loopback(args.host) and not token:
        LOG.warning("binding %s without a token: anyone who can reach this port can use the reward; "
                    "set %s or --token", args.host, TOKEN_ENV)
    shown = f"[{host}]" if ":" in host else host
    print(f"serving {args.reward} on http://{shown}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
