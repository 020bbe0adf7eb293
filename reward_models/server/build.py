"""Building a server: :func:`make_server` validates the limits and binds; names shown to clients."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable

from .connections import RewardServer
from .handler import RewardHandler
from .limits import (
    BUDGET_WAIT,
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_PIXELS,
    DEFAULT_MAX_REQUEST_PIXELS,
    DEFAULT_MAX_SERVER_PIXELS,
    PENDING_PER_WORKER,
)


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
        handler=RewardHandler,
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
