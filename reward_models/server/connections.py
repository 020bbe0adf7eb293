"""The HTTP server: an accept loop that collects request heads without a thread, a fixed worker pool, scoring."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import selectors
import socket
import threading
import time
from http import HTTPStatus
from http.server import HTTPServer
from typing import Any

import numpy as np

from foundation.images import image_path_policy

from ..contract import coerce_scores
from ..remote import PROTOCOL, merge_infos, to_jsonable
from .head import RequestHead
from .limits import INSTALL_DIR, LOG, HTTPError, PixelBudget, redact
from .paths import ServerPathPolicy


class RewardServer(HTTPServer):
    """HTTP server holding the reward fn and the limits; see :func:`make_server` (which passes ``handler``).

    The ``serve_forever`` thread accepts connections and collects their headers without blocking (at most
    ``max_pending`` of them; the oldest is dropped beyond; each has ``header_timeout`` seconds), checking
    each chunk as it arrives (:class:`~.head.RequestHead`): bytes that cannot begin an HTTP/1.x request are
    answered (400 / 414 / 431) and closed at once, without waiting for the timeout. A
    connection with complete headers goes to a queue (``max_connections`` long, 503 beyond) served by
    ``max_connections`` worker threads started with the server. No other thread is ever created.
    """

    request_queue_size = 128

    def __init__(
        self,
        address,
        reward_fn,
        *,
        handler,
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
        super().__init__(address, handler)
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
        self.secret_paths = tuple(p for p in (data_root, os.getcwd(), INSTALL_DIR, os.path.expanduser("~")) if p)
        self.reward_lock = threading.Lock()
        self.stats_lock = threading.Lock()
        self.stats = {"requests": 0, "reward_calls": 0, "images": 0, "errors": 0, "busy": 0, "dropped": 0, "refused": 0}
        self._pending: dict[socket.socket, tuple[Any, RequestHead, float]] = {}  # insertion order = age
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
        self._pending[sock] = (addr, RequestHead(), time.monotonic() + self.header_timeout)
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
        addr, head, _ = self._pending[sock]
        try:
            chunk = sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            return self._drop(sel, sock)
        try:
            complete = head.feed(chunk)
        except HTTPError as exc:  # not HTTP (TLS, random bytes, ...), or a head over its limits: answer now
            self._pending.pop(sock)
            sel.unregister(sock)
            self.count(refused=1)
            return self._refuse(sock, addr, exc.status, exc.message)
        if not complete:
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
        self._work.put((sock, addr, bytes(head.data)))

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
        with contextlib.suppress(OSError):  # what already arrived, read (at most 1 MiB, without waiting):
            for _ in range(16):  # closing with unread input resets the connection, which may lose the answer
                if not sock.recv(65536):
                    break
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
