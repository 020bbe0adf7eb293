"""Serve any reward (a registry name or ``path/to/file.py:fn``) over HTTP, JSON only (never pickle).

Usage (docs/remote_scoring.md has the walk-through):
  python scripts/serve_reward.py --reward jpeg_compressibility --port 8765
  python scripts/serve_reward.py --reward my_reward.py:score --kwargs '{"quality": 90}' --max_batch 16
  DDPO_REWARD_TOKEN=secret python scripts/serve_reward.py --reward psnr --data_root /data/gt --host 0.0.0.0

  --reward      what reward_models.load_reward(NAME, **kwargs) builds
  --host        interface to bind (default 127.0.0.1, loopback only; a warning is printed when another
                interface is bound without a token)
  --port        port (default 8765; 0 picks a free one); the bound address is printed on start-up
                as a line "serving NAME on http://HOST:PORT"
  --token       require "Authorization: Bearer TOKEN" on /score (default: $DDPO_REWARD_TOKEN; prefer the
                environment variable, since command lines are visible to other users in ``ps``)
  --kwargs      JSON object of keyword arguments for the reward factory
  --max_batch   the reward is called on at most this many images at once (larger requests are scored
                in consecutive chunks and their info dicts merged as reward_models.remote.merge_infos)
  --data_root   the directory that file paths in request metadata may name (default: none, so every
                path is refused); see "Threat model"
  --max_body_mb         largest request body in MiB (default 64); larger ones get 413
  --max_request_pixels  decoded pixels one request may cost (default 2**25, e.g. 32 images of 1024x1024):
                        its PNGs, its metadata arrays (3 numbers = 1 pixel) and the ground-truth files
                        it names under --data_root; 413 beyond
  --max_server_pixels   decoded pixels of all requests in flight together (default 2**26); a request
                        that does not fit waits up to 2 s, then gets 503 with "Retry-After: 1"
  --max_connections     worker threads = requests handled at once (default 16); as many more requests
                        may queue for a worker, further ones get 503. Connections still sending their
                        headers wait without a thread, at most 8 per worker (beyond, the oldest is dropped)
  --header_timeout      seconds for the request line and headers to arrive (default 10), else dropped
  --body_timeout        seconds for the body to arrive (default 60), else 408

Train against it with reward.fns = {"remote": 1.0}, reward.kwargs = {"remote": {"url": "http://HOST:PORT"}}
(reward_models/remote.py).

The protocol, the limits and the threat model: reward_models/server/__init__.py and docs/remote_scoring.md.
"""

from __future__ import annotations

import json
import logging
import os
import sys

from ddpo_grpo.cli import UsageError
from ddpo_grpo.script_args import run_script, script_parser
from reward_models.remote import TOKEN_ENV
from reward_models.server import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_REQUEST_PIXELS,
    DEFAULT_MAX_SERVER_PIXELS,
    LOG,
    PNG_SIGNATURE,
    decode_images,
    is_loopback,
    make_server,
    public_name,
    redact,
)

__all__ = ["PNG_SIGNATURE", "decode_images", "main", "make_server", "public_name", "redact"]


def build_parser():
    summary, details = __doc__.split("\n", 1)
    p = script_parser(__file__, summary, epilog=details)
    p.add_argument("--reward", required=True, help="registry name or path/to/file.py:fn")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (loopback only by default)")
    p.add_argument("--port", type=int, default=8765, help="port; 0 picks a free one")
    p.add_argument("--token", default=None, help=f"bearer token required on /score (default: ${TOKEN_ENV})")
    p.add_argument("--kwargs", default="{}", help="JSON object of reward factory kwargs")
    p.add_argument("--max_batch", type=int, default=64, help="images per call of the reward, at most")
    p.add_argument("--data_root", default=None, help="directory metadata paths may name (default: none)")
    p.add_argument("--max_body_mb", type=float, default=DEFAULT_MAX_BODY / 2**20, help="largest request body, MiB")
    p.add_argument(
        "--max_request_pixels", type=int, default=DEFAULT_MAX_REQUEST_PIXELS, help="decoded pixels one request may cost"
    )
    p.add_argument(
        "--max_server_pixels",
        type=int,
        default=DEFAULT_MAX_SERVER_PIXELS,
        help="decoded pixels of all requests in flight together",
    )
    p.add_argument(
        "--max_connections", type=int, default=DEFAULT_MAX_CONNECTIONS, help="worker threads (requests at once)"
    )
    p.add_argument(
        "--header_timeout", type=float, default=DEFAULT_HEADER_TIMEOUT, help="seconds for the request line and headers"
    )
    p.add_argument("--body_timeout", type=float, default=DEFAULT_BODY_TIMEOUT, help="seconds for the body")
    return p


def main(argv: list | None = None) -> int:
    """Serve until Ctrl-C; 0. A bad flag or a reward that cannot be built: one line and ``SystemExit(2)``."""
    return run_script(build_parser(), serve, argv, raise_status=True)


def serve(args) -> None:
    try:
        kwargs = json.loads(args.kwargs)
    except ValueError as exc:
        raise UsageError(f"--kwargs is not valid JSON: {exc}") from exc
    if not isinstance(kwargs, dict):
        raise UsageError(f"--kwargs must be a JSON object, got {type(kwargs).__name__}")
    if args.max_batch < 1:
        raise UsageError("--max_batch must be >= 1")
    if args.max_body_mb <= 0:
        raise UsageError("--max_body_mb must be > 0")
    if args.data_root is not None and not os.path.isdir(args.data_root):
        raise UsageError(f"--data_root {args.data_root!r} is not a directory")
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    import reward_models

    try:
        reward_fn = reward_models.load_reward(args.reward, **kwargs)
    except (ValueError, TypeError, RuntimeError, OSError) as exc:  # unknown name, bad kwargs, weights not found
        raise UsageError(str(exc)) from exc  # one line (exit status 2)
    if "root" in kwargs:
        LOG.warning(
            "the reward's 'root' does not apply to paths in requests: the server resolves them inside "
            "--data_root (or refuses them without it)"
        )
    try:
        server = make_server(
            reward_fn,
            args.host,
            args.port,
            token,
            int(args.max_body_mb * 2**20),
            max_batch=args.max_batch,
            name=public_name(args.reward),
            data_root=args.data_root,
            max_request_pixels=args.max_request_pixels,
            max_server_pixels=args.max_server_pixels,
            max_connections=args.max_connections,
            header_timeout=args.header_timeout,
            body_timeout=args.body_timeout,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    host, port = server.server_address[:2]
    if not is_loopback(args.host) and not token:
        LOG.warning(
            "binding %s without a token: anyone who can reach this port can use the reward; set %s or --token",
            args.host,
            TOKEN_ENV,
        )
    shown = f"[{host}]" if ":" in host else host
    print(f"serving {args.reward} on http://{shown}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())
