"""The reward server behind scripts/serve_reward.py: any reward over HTTP, JSON only (never pickle).

Modules, in import order: ``limits`` (limits, HTTPError, redaction, the pixel budget), ``request`` (a
/score body: JSON shape and PNG decoding), ``paths`` (the --data_root path policy), ``head`` (the
request head checked as it arrives), ``handler`` (the routes), ``connections`` (the accept loop, the
worker pool, scoring), ``build`` (make_server). Every public name is importable from here.

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
                   image sizes, unsupported protocol version, a refused metadata path, bytes that cannot
                   begin an HTTP/1.x request (a TLS ClientHello, random bytes: answered at once, see below)
               401 missing or wrong bearer token      404 unknown path     405 wrong method for a path
               408 body not received in time          411 no Content-Length (chunked bodies unsupported)
               413 body larger than --max_body_mb, an image or a request over its pixel budget
               414 request line longer than 8 KiB
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
    foundation.images.image_path_policy(policy), which psnr / ssim consult; local training
    runs without a policy and keeps resolving paths against ``root`` / the working directory.
  * server paths in answers: refusals name the field (metadata[3]['ground_truth']), never a path; the
    text of reward exceptions is redacted (the data root, working directory and anything path-like).
  * memory: --max_body_mb bounds the bytes received; the JSON limits bound parser recursion and object
    counts (parsing can still take ~13x a body of many small values, per connection); the pixel budgets
    bound the decoded images (about 12 bytes a pixel as float32, plus what the reward allocates),
    checked from the PNG headers before any pixel data is decoded.
  * threads and sockets: --max_connections workers (never more threads), header / body timeouts, and a
    bounded set of header-less connections, so idle or slow clients cannot pin the server. The header
    timeout bounds a client that is slow but speaks HTTP; a client that does not is answered (400, or
    414 / 431) and closed at the first byte that cannot begin an HTTP/1.x request (request line
    ``METHOD TARGET HTTP/d.d`` with an upper-case method, then ``Name: value`` header lines of printable
    bytes), so raw bytes get their answer within a round trip (server/head.py has the exact rule).
Not covered: TLS (put a TLS proxy in front of a non-local port), per-client rate limits, the reward's
own compute time.
"""

from .build import is_loopback, make_server, public_name
from .connections import RewardServer
from .handler import DeadlineReader, RewardHandler
from .head import RequestHead, request_line_problem
from .limits import (
    BUDGET_WAIT,
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_PIXELS,
    DEFAULT_MAX_REQUEST_PIXELS,
    DEFAULT_MAX_SERVER_PIXELS,
    LOG,
    MAX_HEADER_BYTES,
    MAX_JSON_CONTAINERS,
    MAX_JSON_DEPTH,
    MAX_REQUEST_LINE,
    PENDING_PER_WORKER,
    PNG_SIGNATURE,
    HTTPError,
    PixelBudget,
    redact,
)
from .paths import ServerPathPolicy
from .request import decode_images, json_numbers, parse_request, png_size, png_sizes

__all__ = [
    "BUDGET_WAIT",
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_MAX_BODY",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_PIXELS",
    "DEFAULT_MAX_REQUEST_PIXELS",
    "DEFAULT_MAX_SERVER_PIXELS",
    "LOG",
    "MAX_HEADER_BYTES",
    "MAX_JSON_CONTAINERS",
    "MAX_JSON_DEPTH",
    "MAX_REQUEST_LINE",
    "PENDING_PER_WORKER",
    "PNG_SIGNATURE",
    "DeadlineReader",
    "HTTPError",
    "PixelBudget",
    "RequestHead",
    "RewardHandler",
    "RewardServer",
    "ServerPathPolicy",
    "decode_images",
    "is_loopback",
    "json_numbers",
    "make_server",
    "parse_request",
    "png_size",
    "png_sizes",
    "public_name",
    "redact",
    "request_line_problem",
]
