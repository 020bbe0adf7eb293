"""The request handler: routes ``POST /score`` and ``GET /health``, token, body, budgets; every reply JSON."""

from __future__ import annotations

import hmac
import io
import json
import math
import socket
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING

from ..remote import PROTOCOL, TOKEN_ENV
from .limits import LOG, HTTPError, redact
from .paths import ServerPathPolicy
from .request import decode_images, parse_request, png_sizes

if TYPE_CHECKING:
    from .connections import RewardServer


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
