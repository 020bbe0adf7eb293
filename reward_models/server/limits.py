"""The reward server's limits, its error type and the redaction of server paths from messages."""

from __future__ import annotations

import logging
import os
import re
import threading
import time

#: where this package is installed (the directory holding ``reward_models/``): a path messages must not reveal
INSTALL_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MAX_BODY = 64 * 1024 * 1024  # bytes
DEFAULT_MAX_PIXELS = 4096 * 4096  # per image
DEFAULT_MAX_REQUEST_PIXELS = 2**25  # per request (32 images of 1024 x 1024)
DEFAULT_MAX_SERVER_PIXELS = 2**26  # all requests in flight
DEFAULT_MAX_CONNECTIONS = 16  # worker threads
DEFAULT_HEADER_TIMEOUT = 10.0  # seconds
DEFAULT_BODY_TIMEOUT = 60.0  # seconds
BUDGET_WAIT = 2.0  # seconds a request waits for room in --max_server_pixels before its 503
PENDING_PER_WORKER = 8  # connections still sending headers, held without a thread, per worker
MAX_HEADER_BYTES = 64 * 1024  # request line + headers (431 beyond)
MAX_REQUEST_LINE = 8 * 1024  # "POST /score HTTP/1.1" (414 beyond; Apache's and nginx's default is about the same)
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
