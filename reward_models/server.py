"""The reward server behind scripts/serve_reward.py: any reward over HTTP, JSON only (never pickle).

Protocol, version 1 (every body is JSON, UTF-8; every reply carries "protocol": 1):
  POST /score  {"protocol": 1, "images": [base64 PNG, ...], "prompts": [str, ...], "metadata": [object, ...]}
               -> 200 {"protocol": 1, "scores": [float | null, ...], "info": {...}}
               "images", "prompts" and "metadata" are required and of equal length; "protocol" may be
               omitted (taken as 1), any other version is refused. Each PNG is decoded to 8-bit RGB
               (alpha dropped) and the batch is handed to the reward as a float32 tensor (B, 3, H, W)
               in [0, 1] (value / 255), so uint8 images round-trip exactly. All images of one request
               must have the same size (send one request per size). A null score is NaN ("not
               applicable to this sample"); non-finite values in "info" are sent as null as well.
               Arrays in metadata travel as nested lists (psnr / ssim read a (3, H, W) one as ground truth).
  GET /health  -> 200 {"protocol": 1, "status": "ok", "reward": NAME, "max_batch": N, "requests": n, limits...}
               (no token needed, for liveness probes; a file reward's NAME is shown without directories).
  Errors: {"protocol": 1, "error": "message naming what is wrong"} with
               400 invalid JSON, JSON nested deeper than 32 levels or with more than 2**18 arrays/objects,
                   missing / mistyped field, lengths differ, bad base64, not a PNG, undecodable PNG, mixed
                   image sizes, unsupported protocol version, a refused metadata path
               401 missing or wrong bearer token      404 unknown path     405 wrong method for a path
               408 body not received in time          411 no Content-Length (chunked bodies unsupported)
               413 body larger than --max_body_mb, an image or a request over its pixel budget
               431 headers larger than 64 KiB
               500 the reward raised or returned something that is not (scores[B], info); message inside
               503 server busy (pixel budget or all workers taken), with Retry-After; the client retries.
Requests are handled by a fixed pool of worker threads (decoding runs concurrently) but the reward itself
is called under a lock, one batch at a time, since model-based rewards are rarely thread-safe. One log
line per request: client, method, path, status, number of images, milliseconds from the request to its
answer being ready (and the error, if any).

Threat model. Trusted: the operator (the command line, --data_root and the files in it) and the reward
code (registry rewards and --reward files run with the server's rights; the server does not police what
they do with metadata, so review a custom reward that opens files). Not trusted: clients, including
those holding the token (it decides who may spend the server's resources, not that a request is benign).
What each limit protects:
  * server files: a path in metadata is refused unless --data_root is given; then it is resolved
    relative to that directory only: absolute paths and ".." components are refused, and so is a path
    whose real path (symlinks resolved) is not inside the root's real path, or not a regular file. The
    check runs where the file is opened: the reward is called inside
    ddpo_grpo.images.image_path_policy(policy), which psnr / ssim consult; local training
    runs without a policy and keeps resolving paths against ``root`` / the working directory.
  * server paths in answers: refusals name the field (metadata[3]['ground_truth']), never a path; the
    text of reward exceptions is redacted (the data root, working directory and anything path-like).
  * memory: --max_body_mb bounds the bytes received; the JSON limits bound parser recursion and object
    counts (parsing can still take ~13x a body of many small values, per connection); the pixel budgets
    bound the decoded images (about 12 bytes a pixel as float32, plus what the reward allocates),
    checked from the PNG headers before any pixel data is decoded.
  * threads and sockets: --max_connections workers (never more threads), header / body timeouts, and a
    bounded set of header-less connections, so idle or slow clients cannot pin the server.
Not covered: TLS (put a TLS proxy in front of a non-local port), per-client rate limits, the reward's
own compute time.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import io
import ipaddress
import json
import logging
import math
import os
import queue
import re
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import numpy as np

from ddpo_grpo.images import image_path_policy

from .contract import coerce_scores
from .remote import PROTOCOL, TOKEN_ENV, merge_infos, to_jsonable

#: where this package is installed: a path error messages must not reveal either
_INSTALL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MAX_BODY = 64 * 1024 * 1024  # bytes
DEFAULT_MAX_PIXELS = 4096 * 4096  # per image
DEFAULT_MAX_REQUEST_PIXELS = 2**25  # per request (32 images of 1024 x 1024)
DEFAULT_MAX_SERVER_PIXELS = 2**26  # all requests in flight
DEFAULT_MAX_CONNECTIONS = 16  # worker threads
DEFAULT_HEADER_TIMEOUT = 10.0  # seconds
DEFAULT_BODY_TIMEOUT = 60.0  # seconds
BUDGET_WAIT = 2.0  # seconds a request waits for room in --max_server_pixels before its 503
PENDING_PER_WORKER = 8  # connections still sending headers, held without a thread, per worker
MAX_HEADER_BYTES = 64 * 1024
MAX_JSON_DEPTH = 32
MAX_JSON_CONTAINERS = 2**18
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
LOG = logging.getLogger("ddpo_grpo.serve_reward")


class HTTPError(Exception):
    """A request the server refuses: ``status``, a message for the client and extra reply headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


_PATH_LIKE = re.compile(r"(?<![\w.~/:-])~?/[^\s'\"`,;:()<>\[\]{}]+")


def redact(message: str, paths: tuple[str, ...] = ()) -> str:
    """``message`` with the server's own ``paths`` and anything that looks like an absolute path as ``<path>``."""
    for path in sorted(paths, key=len, reverse=True):
        if len(path) > 1:
            message = message.replace(path, "<path>")
    return _PATH_LIKE.sub("<path>", message)


# ------------------------------------------------------------------------------------ JSON body
def json_numbers(value: Any, depth: int = 1) -> int:
    """Numbers in the arrays of parsed JSON ``value`` (found at nesting level ``depth``); 400 past ``MAX_JSON_DEPTH``.

    Only array elements count (the pixels of an image sent as nested lists), not scalars of objects.
    """
    numbers, stack = 0, [(value, depth)] if type(value) in (list, dict) else []
    while stack:
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise HTTPError(400, f"body is nested too deeply (the server's limit is {MAX_JSON_DEPTH} levels)")
        in_array = type(value) is list
        for item in value if in_array else value.values():
            kind = type(item)
            if kind is list or kind is dict:
                stack.append((item, depth + 1))
            elif in_array and (kind is int or kind is float):
                numbers += 1
    return numbers


def parse_request(body: bytes) -> tuple[list, list, list, int]:
    """Validate a ``/score`` body; returns ``(images_b64, prompts, metadata, numbers in metadata arrays)``.

    Raises :class:`HTTPError` (400) for invalid JSON, more than ``MAX_JSON_CONTAINERS`` arrays / objects
    (counted on the raw bytes, before parsing) or nesting deeper than ``MAX_JSON_DEPTH``.
    """
    containers = body.count(b"[") + body.count(b"{")  # counts brackets inside strings too: an upper bound
    if containers > MAX_JSON_CONTAINERS:
        raise HTTPError(
            400, f"body has up to {containers} JSON arrays/objects, more than the server's limit {MAX_JSON_CONTAINERS}"
        )
    try:
        req = json.loads(body)
    except RecursionError:  # deeper than the parser's own limit (~1000)
        raise HTTPError(400, f"body is nested too deeply (the server's limit is {MAX_JSON_DEPTH} levels)") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise HTTPError(400, f"body is not valid JSON: {exc}") from None
    if not isinstance(req, dict):
        raise HTTPError(400, f"body must be a JSON object with images, prompts, metadata; got {type(req).__name__}")
    numbers = {key: json_numbers(value, 2) for key, value in req.items()}.get("metadata", 0)
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
    return images, prompts, metadata, numbers


# ------------------------------------------------------------------------------------ images
def png_size(item: Any, i: int) -> tuple[int, int]:
    """``(width, height)`` of base64 PNG ``images[i]`` from its IHDR chunk, decoding only its first 33 bytes."""
    if not isinstance(item, str):
        raise HTTPError(400, f"images[{i}] must be a base64 string, got {type(item).__name__}")
    try:
        head = base64.b64decode(item[:44], validate=True)  # 44 base64 characters = 33 bytes
    except (binascii.Error, ValueError) as exc:
        raise HTTPError(400, f"images[{i}] is not valid base64: {exc}") from None
    if not head.startswith(PNG_SIGNATURE):
        raise HTTPError(400, f"images[{i}] is not a PNG (starts with {head[:8]!r}); encode images as PNG")
    if len(head) < 24 or head[12:16] != b"IHDR":
        raise HTTPError(400, f"images[{i}] is not a decodable PNG: it does not start with an IHDR chunk")
    w, h = struct.unpack(">II", head[16:24])
    if not (0 < w < 2**31 and 0 < h < 2**31):
        raise HTTPError(400, f"images[{i}] is not a decodable PNG: its header claims {w}x{h} pixels")
    return w, h


def png_sizes(items: list, max_pixels: int = DEFAULT_MAX_PIXELS) -> list[tuple[int, int]]:
    """Sizes of a request's PNGs, from their headers: 413 for an image over ``max_pixels``, 400 for mixed sizes."""
    sizes: list[tuple[int, int]] = []
    for i, item in enumerate(items):
        w, h = png_size(item, i)
        if w * h > max_pixels:
            raise HTTPError(413, f"images[{i}] has {w}x{h} pixels, more than the server's limit {max_pixels}")
        if sizes and (w, h) != sizes[0]:
            w0, h0 = sizes[0]
            raise HTTPError(
                400,
                f"images must all have the same size in one request: images[0] is {w0}x{h0} "
                f"but images[{i}] is {w}x{h}; send one request per size",
            )
        sizes.append((w, h))
    return sizes


def decode_images(items: list, max_pixels: int = DEFAULT_MAX_PIXELS):
    """List of base64 PNG strings -> float32 tensor ``(B, 3, H, W)`` in ``[0, 1]``; raises :class:`HTTPError`.

    Sizes are checked from the headers first (:func:`png_sizes`); each image is then decoded straight
    into a preallocated batch, so the peak is the batch plus one decoded image.
    """
    import torch
    from PIL import Image

    sizes = png_sizes(items, max_pixels)
    w, h = sizes[0] if sizes else (0, 0)
    out = torch.empty((len(items), 3, h, w), dtype=torch.float32)
    for i, item in enumerate(items):
        try:
            raw = base64.b64decode(item, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise HTTPError(400, f"images[{i}] is not valid base64: {exc}") from None
        try:
            with Image.open(io.BytesIO(raw), formats=["PNG"]) as img:
                if img.size != (w, h):
                    raise HTTPError(400, f"images[{i}] is not a decodable PNG: its header does not match the image")
                arr = np.array(img if img.mode == "RGB" else img.convert("RGB"), dtype=np.uint8)  # writable
        except HTTPError:
            raise
        except Exception as exc:  # truncated / corrupt data, ...
            raise HTTPError(400, f"images[{i}] is not a decodable PNG: {type(exc).__name__}: {exc}") from None
        out[i].copy_(torch.from_numpy(arr).permute(2, 0, 1))
        del raw, arr
    return out.div_(255.0)  # [B, 3, H, W] in [0, 1]


# ------------------------------------------------------------------------------------ budgets, paths
class PixelBudget:
    """Decoded pixels held by the requests in flight, at most ``limit`` together (``--max_server_pixels``)."""

    def __init__(self, limit: int):
        self.limit = int(limit)
        self.used = 0
        self._cond = threading.Condition()

    def acquire(self, pixels: int, wait: float) -> bool:
        """Reserve ``pixels``, waiting up to ``wait`` seconds for room; False if there was none."""
        deadline = time.monotonic() + wait
        with self._cond:
            while self.used + pixels > self.limit:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            self.used += pixels
            return True

    def release(self, pixels: int) -> None:
        with self._cond:
            self.used -= pixels
            self._cond.notify_all()


class ServerPathPolicy:
    """Where a file path in request metadata may lead; given to the reward via ``image_path_policy``.

    ``root=None`` refuses every path. Otherwise ``path`` is taken relative to ``root`` (a real path) and
    refused when it is absolute, has a ``..`` component, or its real path (symlinks resolved) is not inside
    ``root`` or not a regular file. The image must also fit the per-image limit and what is left of the
    request's pixel budget (``left``, read from its header). Messages name the field, never a path.
    """

    def __init__(self, root: str | None, max_pixels: int, left: int):
        self.root = root
        self.max_pixels = max_pixels
        self.left = left
        self.offset = 0  # index in the request of the first row of the chunk being scored

    def __call__(self, path: str, index: int, key: str) -> str:
        where = f"metadata[{self.offset + index}][{key!r}]"
        if self.root is None:
            raise HTTPError(
                400,
                f"{where}: file paths in metadata are refused by this server (it was started "
                "without --data_root); send the image itself as a nested (3, H, W) array",
            )
        if (
            not path
            or "\x00" in path
            or os.path.isabs(path)
            or path.startswith(("/", "\\"))
            or ".." in path.replace("\\", "/").split("/")
        ):
            raise HTTPError(
                400,
                f"{where}: only a relative path without '..' components, inside the server's data root, is accepted",
            )
        real = os.path.realpath(os.path.join(self.root, path))
        try:
            inside = os.path.commonpath([real, self.root]) == self.root
        except ValueError:
            inside = False
        if not inside:
            raise HTTPError(400, f"{where}: the path leads outside the server's data root (through a symlink)")
        if not os.path.isfile(real):
            raise HTTPError(400, f"{where}: no such image file in the server's data root")
        from PIL import Image

        try:
            with Image.open(real) as img:  # reads the header only
                w, h = img.size
        except Exception as exc:
            raise HTTPError(400, f"{where}: the file is not a readable image ({type(exc).__name__})") from None
        if w * h > min(self.max_pixels, self.left):
            limit = (
                "the server's limit per image" if w * h > self.max_pixels else "what is left of the request's budget"
            )
            raise HTTPError(413, f"{where}: the image has {w}x{h} pixels, more than {limit}")
        self.left -= w * h
        return real


# ------------------------------------------------------------------------------------ server
class DeadlineReader(io.RawIOBase):
    """Socket reader with a total deadline (``time.monotonic()``), not a per-read timeout.

    It first returns ``prefix`` (what the accept loop received with the headers), then reads the socket
    until ``deadline``, after which reads raise ``TimeoutError``.
    """

    def __init__(self, sock: socket.socket, prefix: bytes, deadline: float):
        super().__init__()
        self.sock = sock
        self.prefix = memoryview(prefix)
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if len(self.prefix):
            n = min(len(buf), len(self.prefix))
            buf[:n] = self.prefix[:n]
            self.prefix = self.prefix[n:]
            return n
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("read deadline passed")
        self.sock.settimeout(left)
        return self.sock.recv_into(buf)


class RewardServer(HTTPServer):
    """HTTP server holding the reward fn and the limits; see :func:`make_server`.

    The ``serve_forever`` thread accepts connections and collects their headers without blocking (at most
    ``max_pending`` of them; the oldest is dropped beyond; each has ``header_timeout`` seconds); a
    connection with complete headers goes to a queue (``max_connections`` long, 503 beyond) served by
    ``max_connections`` worker threads started with the server. No other thread is ever created.
    """

    request_queue_size = 128

    def __init__(
        self,
        address,
        reward_fn,
        *,
        name,
        token,
        max_body,
        max_batch,
        max_pixels,
        data_root,
        max_request_pixels,
        max_server_pixels,
        max_connections,
        header_timeout,
        body_timeout,
        budget_wait,
        max_pending,
    ):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, RewardHandler)
        self.socket.setblocking(False)
        self.reward_fn = reward_fn
        self.name = name
        self.token = token
        self.max_body = int(max_body)
        self.max_batch = int(max_batch)
        self.max_pixels = int(max_pixels)
        self.data_root = data_root
        self.max_request_pixels = int(max_request_pixels)
        self.budget = PixelBudget(max_server_pixels)
        self.max_connections = int(max_connections)
        self.header_timeout = float(header_timeout)
        self.body_timeout = float(body_timeout)
        self.budget_wait = float(budget_wait)
        self.max_pending = int(max_pending)
        self.secret_paths = tuple(p for p in (data_root, os.getcwd(), _INSTALL_DIR, os.path.expanduser("~")) if p)
        self.reward_lock = threading.Lock()
        self.stats_lock = threading.Lock()
        self.stats = {"requests": 0, "reward_calls": 0, "images": 0, "errors": 0, "busy": 0, "dropped": 0}
        self._pending: dict[socket.socket, tuple[Any, bytearray, float]] = {}  # insertion order = age
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._stop, self._stopped = threading.Event(), threading.Event()
        self._stopped.set()
        self._workers = [
            threading.Thread(target=self._work_loop, name=f"reward-worker-{i}", daemon=True)
            for i in range(self.max_connections)
        ]
        for thread in self._workers:
            thread.start()

    def count(self, **inc: int) -> None:
        with self.stats_lock:
            for k, v in inc.items():
                self.stats[k] += v

    # -- accept loop: headers are collected here, without a thread per connection ----------------
    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._stopped.clear()
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(self.socket, selectors.EVENT_READ)
                try:
                    while not self._stop.is_set():
                        for key, _ in sel.select(poll_interval):
                            if key.fileobj is self.socket:
                                self._accept(sel)
                            else:
                                self._read_headers(sel, key.fileobj)
                        now = time.monotonic()
                        while self._pending and next(iter(self._pending.values()))[2] < now:  # oldest first
                            self._drop(sel, next(iter(self._pending)))
                finally:
                    for sock in list(self._pending):
                        self._drop(sel, sock)
        finally:
            self._stop.clear()
            self._stopped.set()

    def shutdown(self) -> None:
        """Stop :meth:`serve_forever` and wait until it has returned (workers keep running: see server_close)."""
        self._stop.set()
        self._stopped.wait()

    def _accept(self, sel) -> None:
        try:
            sock, addr = self.socket.accept()
        except OSError:  # nothing to accept after all, or the client already went away
            return
        sock.setblocking(False)
        if len(self._pending) >= self.max_pending:
            self._drop(sel, next(iter(self._pending)))
        self._pending[sock] = (addr, bytearray(), time.monotonic() + self.header_timeout)
        sel.register(sock, selectors.EVENT_READ)

    def _drop(self, sel, sock: socket.socket) -> None:
        """Close a connection whose headers never came (idle, slow or evicted); counted, not logged."""
        self._pending.pop(sock, None)
        sel.unregister(sock)
        self.count(dropped=1)  # before the client can see its connection closed
        sock.close()

    def _read_headers(self, sel, sock: socket.socket) -> None:
        if sock not in self._pending:  # dropped earlier in this round of events
            return
        addr, buf, _ = self._pending[sock]
        try:
            chunk = sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            return self._drop(sel, sock)
        start = max(0, len(buf) - 3)
        buf += chunk
        if buf.find(b"\r\n\r\n", start) < 0 and buf.find(b"\n\n", start) < 0:
            if len(buf) > MAX_HEADER_BYTES:
                self._pending.pop(sock)
                sel.unregister(sock)
                self._refuse(sock, addr, 431, f"request headers larger than {MAX_HEADER_BYTES} bytes")
            return
        self._pending.pop(sock)
        sel.unregister(sock)
        if self._work.qsize() >= self.max_connections:
            self.count(busy=1)
            return self._refuse(
                sock,
                addr,
                503,
                f"server busy: all {self.max_connections} workers and queue places are taken; retry later",
                retry_after=1,
            )
        self._work.put((sock, addr, bytes(buf)))

    def _refuse(self, sock: socket.socket, addr, status: int, message: str, retry_after: int = 0) -> None:
        """Answer ``status`` from the accept loop (a short non-blocking send) and close."""
        body = json.dumps({"protocol": PROTOCOL, "error": message}).encode()
        head = (
            f"HTTP/1.0 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n"
        )
        if retry_after:
            head += f"Retry-After: {retry_after}\r\n"
        try:
            sock.send(head.encode() + b"\r\n" + body)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        sock.close()
        LOG.info('%s "-" %d images=0 0.0ms error: %s', addr[0], status, message)

    # -- workers -------------------------------------------------------------------------------
    def _work_loop(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            sock, addr, prefix = item
            try:
                self.finish_request((sock, prefix), addr)
            except Exception:
                self.handle_error(sock, addr)
            finally:
                self.shutdown_request(sock)

    def handle_error(self, request, client_address) -> None:
        LOG.exception("error while handling a connection from %s", client_address[0])

    def server_close(self) -> None:
        """Close the listening socket, drop queued connections and stop the workers."""
        super().server_close()
        while True:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].close()
        for _ in self._workers:
            self._work.put(None)
        deadline = time.monotonic() + 2.0
        for thread in self._workers:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    # -- scoring -------------------------------------------------------------------------------
    def score(self, images, prompts: list, metadata: list, policy: ServerPathPolicy) -> tuple[list, dict]:
        """Call the reward in chunks of ``max_batch`` under ``policy``; returns JSON-ready ``(scores, info)``."""
        scores, infos = [], []
        for start in range(0, len(prompts), self.max_batch):
            end = min(start + self.max_batch, len(prompts))
            policy.offset = start
            try:
                with self.reward_lock, image_path_policy(policy):
                    self.count(reward_calls=1)
                    out = self.reward_fn(images[start:end], prompts[start:end], metadata[start:end])
            except Exception as exc:
                cause: BaseException | None = exc
                for _ in range(8):  # a refusal by the path policy, maybe wrapped by the reward
                    if cause is None or isinstance(cause, HTTPError):
                        break
                    cause = cause.__cause__ or cause.__context__
                if isinstance(cause, HTTPError):
                    raise cause from None
                LOG.exception("reward %r raised", self.name)
                raise HTTPError(
                    500, redact(f"reward {self.name!r} raised {type(exc).__name__}: {exc}", self.secret_paths)
                ) from None
            if not (isinstance(out, tuple) and len(out) == 2):
                raise HTTPError(
                    500, f"reward {self.name!r} must return a (scores, info) tuple, got {type(out).__name__}"
                )
            try:
                chunk = coerce_scores(self.name, out[0], end - start)
            except ValueError as exc:
                raise HTTPError(500, redact(str(exc), self.secret_paths)) from None
            scores.extend(None if not np.isfinite(s) else float(s) for s in chunk)
            infos.append(to_jsonable(out[1] or {}))
        return scores, merge_infos(infos)


class RewardHandler(BaseHTTPRequestHandler):
    """Routes ``POST /score`` and ``GET /health``; every reply is JSON, every request one log line."""

    server: RewardServer
    server_version = "ddpo-reward/1"

    # -- plumbing ------------------------------------------------------------------------------
    def setup(self) -> None:
        sock, prefix = self.request  # the worker passes (socket, bytes the accept loop already read)
        self.request = sock
        sock.settimeout(self.server.body_timeout)  # blocking again (the accept loop made it non-blocking)
        super().setup()
        self.rfile.close()
        self.reader = DeadlineReader(sock, prefix, time.monotonic() + self.server.body_timeout)
        self.rfile = io.BufferedReader(self.reader, 1 << 16)

    def log_request(self, code="-", size="-"):  # replaced by the single line in _finish
        pass

    def log_message(self, format, *args):
        LOG.info("%s %s", self.address_string(), format % args)

    def send_error(self, code, message=None, explain=None):
        """Errors raised by the base class (bad request line, unknown method) as JSON too."""
        self._log(code, 0, message)
        self._reply(code, {"error": message or self.responses.get(code, ("error",))[0]})

    def _reply(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        body = json.dumps({"protocol": PROTOCOL, **payload}, allow_nan=False).encode("utf-8")
        try:
            self.connection.settimeout(self.server.body_timeout)  # a client that does not read its answer
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if status == 401:
                self.send_header("WWW-Authenticate", 'Bearer realm="reward"')
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError:  # client went away; nothing left to tell it
            pass

    def _log(self, status: int, n_images: int, error: str | None, t0: float | None = None) -> None:
        ms = (time.perf_counter() - t0) * 1e3 if t0 is not None else 0.0
        request = f"{getattr(self, 'command', None) or '-'} {getattr(self, 'path', None) or '-'}"
        line = f'{self.address_string()} "{request}" {status} images={n_images} {ms:.1f}ms'
        if error:
            line += f" error: {error}"
        (LOG.warning if status >= 500 else LOG.info)(line)

    def _dispatch(self, route: Callable[[], tuple[dict, int]]) -> None:
        t0 = time.perf_counter()
        self._body_consumed = False
        self.server.count(requests=1)
        n_images, error, headers = 0, None, {}
        try:
            payload, n_images = route()
            status = 200
        except HTTPError as exc:
            status, error, headers = exc.status, exc.message, exc.headers
            payload = {"error": exc.message}
        except Exception as exc:  # a server bug: still answer JSON and keep serving
            LOG.exception("unexpected error")
            status = 500
            error = redact(f"internal server error: {type(exc).__name__}: {exc}", self.server.secret_paths)
            payload = {"error": error}
        if status != 200:
            self.server.count(errors=1)
            if not self._body_consumed:
                self._discard()
        self._log(status, n_images, error, t0)  # before answering, so a client that has its answer sees the line
        self._reply(status, payload, headers)

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
            srv = self.server
            with srv.stats_lock:
                requests = srv.stats["requests"]
            return {
                "status": "ok",
                "reward": srv.name,
                "max_batch": srv.max_batch,
                "requests": requests,
                "max_pixels": srv.max_pixels,
                "max_request_pixels": srv.max_request_pixels,
                "max_body": srv.max_body,
                "paths": srv.data_root is not None,
            }, 0
        return self._wrong_method()

    def _check_token(self) -> None:
        token = self.server.token
        if not token:
            return
        got = self.headers.get("Authorization", "")
        scheme, _, value = got.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
            what = "missing" if not got else "wrong"
            raise HTTPError(
                401,
                f"{what} bearer token: send the header 'Authorization: Bearer <token>' "
                f"(the client reads it from {TOKEN_ENV} or its token argument)",
            )

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
                413,
                f"body of {length} bytes is larger than the server's limit of {self.server.max_body} bytes; "
                "send fewer images per request (client max_batch) or raise --max_body_mb",
            )
        self._body_consumed = True
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            raise HTTPError(408, f"body not received within {self.server.body_timeout:g}s") from None
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
            left = int(self.headers.get("Content-Length") or 0) if self.headers else 0
        except ValueError:
            return
        self.reader.deadline = time.monotonic() + 2.0
        try:
            while left > 0:
                chunk = self.rfile.read1(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)
        except OSError:  # TimeoutError included
            pass

    def _post(self):
        if self._route() != "/score":
            return self._wrong_method()
        self._check_token()
        srv = self.server
        images_b64, prompts, metadata, numbers = parse_request(self._read_body())
        if not prompts:
            return {"scores": [], "info": {}}, 0
        pixels = sum(w * h for w, h in png_sizes(images_b64, srv.max_pixels)) + math.ceil(numbers / 3)
        if pixels > srv.max_request_pixels:
            raise HTTPError(
                413,
                f"the request needs {pixels} decoded pixels (images + numbers in metadata arrays "
                f"/ 3), more than the server's limit of {srv.max_request_pixels}; send fewer "
                "images per request (client max_batch)",
            )
        if not srv.budget.acquire(pixels, srv.budget_wait):
            srv.count(busy=1)
            raise HTTPError(
                503,
                f"server busy: {srv.budget.used} of its {srv.budget.limit} pixels are held by "
                "other requests; retry later",
                {"Retry-After": "1"},
            )
        try:
            images = decode_images(images_b64, srv.max_pixels)
            images_b64.clear()  # the base64 strings are no longer needed
            policy = ServerPathPolicy(srv.data_root, srv.max_pixels, srv.max_request_pixels - pixels)
            scores, info = srv.score(images, prompts, metadata, policy)
        finally:
            srv.budget.release(pixels)
        srv.count(images=len(scores))
        return {"scores": scores, "info": info}, len(scores)


def make_server(
    reward_fn: Callable,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    *,
    max_batch: int = 64,
    name: str = "reward",
    max_pixels: int = DEFAULT_MAX_PIXELS,
    data_root: str | None = None,
    max_request_pixels: int = DEFAULT_MAX_REQUEST_PIXELS,
    max_server_pixels: int = DEFAULT_MAX_SERVER_PIXELS,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    budget_wait: float = BUDGET_WAIT,
    max_pending: int | None = None,
) -> RewardServer:
    """Bind (without serving) an HTTP server for ``reward_fn``; ``server.server_address`` has the port.

    Run it with ``server.serve_forever()`` (e.g. on a thread), stop it with ``server.shutdown()``
    and ``server.server_close()`` (which also stops the worker threads). ``token=None`` or ``""`` means
    no authentication; ``data_root=None`` refuses every file path in metadata. ``max_pending`` defaults
    to 8 connections per worker.
    """
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    if max_body < 1:
        raise ValueError(f"max_body must be >= 1 byte, got {max_body}")
    if min(max_pixels, max_request_pixels, max_server_pixels) < 1:
        raise ValueError("pixel limits must be >= 1")
    if max_server_pixels < max_request_pixels:
        raise ValueError(
            f"max_server_pixels ({max_server_pixels}) must be >= max_request_pixels ({max_request_pixels})"
        )
    if max_connections < 1:
        raise ValueError(f"max_connections must be >= 1, got {max_connections}")
    if not (header_timeout > 0 and body_timeout > 0 and budget_wait >= 0):
        raise ValueError("header_timeout and body_timeout must be > 0 seconds, budget_wait >= 0")
    if data_root is not None:
        if not os.path.isdir(data_root):
            raise ValueError(f"data_root {data_root!r} is not a directory")
        data_root = os.path.realpath(data_root)
    return RewardServer(
        (host, port),
        reward_fn,
        name=name,
        token=token or None,
        max_body=max_body,
        max_batch=max_batch,
        max_pixels=max_pixels,
        data_root=data_root,
        max_request_pixels=max_request_pixels,
        max_server_pixels=max_server_pixels,
        max_connections=max_connections,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
        budget_wait=budget_wait,
        max_pending=max_pending or PENDING_PER_WORKER * max_connections,
    )


def public_name(spec: str) -> str:
    """The reward's name as clients see it: a ``path/to/file.py:fn`` spec loses its directories."""
    head, sep, tail = spec.rpartition(":")
    if not sep:
        head, tail = spec, ""
    return os.path.basename(head) + sep + tail


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
