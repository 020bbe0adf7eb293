"""Client for a reward served over HTTP by ``scripts/serve_reward.py`` (JSON only, never pickle).

Use it like any other reward::

    reward.fns = {"remote": 1.0}
    reward.kwargs = {"remote": {"url": "http://127.0.0.1:8765"}}

after starting a server (on the GPU box, or in a second environment with the reward's heavy
dependencies)::

    python scripts/serve_reward.py --reward pickscore --port 8765

Protocol version 1 (the full reference is the docstring of ``scripts/serve_reward.py``; limits, flags
and the threat model are in ``docs/remote_scoring.md``):
``POST /score`` with ``{"protocol": 1, "images": [base64 PNG], "prompts": [str], "metadata": [object]}``
-> ``200 {"protocol": 1, "scores": [float | null], "info": {...}}``, where ``null`` means NaN
("not applicable"); every error is ``{"error": "..."}`` with a 4xx (the request is wrong) or 5xx
(the server or the reward failed) status.

Client semantics (:class:`RemoteReward`):

* images are sent as lossless PNGs of :func:`reward_models.to_uint8`'s rounding, so a reward
  that itself rounds to uint8 (every PIL-based one) scores exactly what it would score locally;
* a batch is split into requests of at most ``max_batch`` images, sent one after another;
* connection errors, timeouts and 5xx answers are retried ``retries`` times (so at most
  ``retries + 1`` attempts per request), sleeping ``backoff * 2**k`` seconds before retry ``k``
  (k = 0, 1, ...), or longer when a 5xx answer carries ``Retry-After: SECONDS`` (honoured up to
  60 s; the server sends ``503`` + ``Retry-After`` when it is busy); 4xx answers are never retried
  and raise ``ValueError`` with the server's message; a server that stays unreachable raises
  ``ConnectionError`` naming the URL and the number of attempts; a server that keeps answering 5xx
  raises ``RuntimeError`` with its message;
* the bearer token comes from ``token`` or else the ``DDPO_REWARD_TOKEN`` environment variable;
* connections go straight to the URL: ``http_proxy``-style environment variables are ignored.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import math
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import numpy as np

from .contract import to_pil
from .registry import register

#: Version of the JSON protocol spoken by this client and ``scripts/serve_reward.py``.
PROTOCOL = 1
#: Environment variable holding the bearer token (client and server).
TOKEN_ENV = "DDPO_REWARD_TOKEN"


def to_jsonable(obj: Any) -> Any:
    """Recursively turn ``obj`` into strict JSON values.

    numpy / torch arrays and scalars become lists / Python numbers, tuples and sets become lists,
    non-finite floats (NaN, ±inf) become ``None`` (JSON ``null``), dict keys become strings and
    anything else unknown becomes ``str(obj)``.
    """
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "detach"):  # torch tensor, without importing torch
        obj = obj.detach().cpu().numpy()
    if hasattr(obj, "tolist"):  # numpy array or scalar
        return to_jsonable(obj.tolist())
    return str(obj)


def merge_infos(infos: list[dict]) -> dict:
    """Merge the info dicts of consecutive sub-batches into one.

    One dict is returned unchanged. Otherwise, key by key: lists are concatenated (per-sample
    diagnostics stay aligned with the samples), dicts are merged recursively, and any other
    value becomes the list of the per-batch values.
    """
    infos = [i for i in infos if i]
    if len(infos) <= 1:
        return dict(infos[0]) if infos else {}
    merged: dict[str, Any] = {}
    keys = list(dict.fromkeys(k for info in infos for k in info))
    for key in keys:
        values = [info[key] for info in infos if key in info]
        if all(isinstance(v, list) for v in values):
            merged[key] = [x for v in values for x in v]
        elif all(isinstance(v, dict) for v in values):
            merged[key] = merge_infos(values)
        else:
            merged[key] = values
    return merged


def encode_png(image: Any) -> str:
    """A PIL image -> base64 string of its lossless PNG encoding."""
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=1)  # lossless at any level; 1 is the fastest
    return base64.b64encode(buf.getvalue()).decode("ascii")


#: the longest ``Retry-After`` the client honours, seconds
MAX_RETRY_AFTER = 60.0


def _retry_after(exc: urllib.error.HTTPError) -> float:
    """Seconds asked for by a ``Retry-After: N`` header (0 if absent or not a number; at most 60)."""
    try:
        value = float((exc.headers or {}).get("Retry-After") or 0)
    except (TypeError, ValueError):  # an HTTP date: not sent by serve_reward.py, ignored
        return 0.0
    return min(max(value, 0.0), MAX_RETRY_AFTER) if math.isfinite(value) else 0.0


def _error_message(exc: urllib.error.HTTPError) -> str:
    """The ``error`` field of an HTTP error's JSON body, or its raw text (truncated)."""
    try:
        raw = exc.read()
    except Exception:  # the body itself may be unreadable
        raw = b""
    try:
        obj = json.loads(raw)
        if isinstance(obj, dict) and "error" in obj:
            return str(obj["error"])
    except (ValueError, RecursionError):  # not JSON, or absurdly nested
        pass
    text = raw.decode("utf-8", "replace").strip()
    return text[:500] or (exc.reason if isinstance(exc.reason, str) else "") or "(empty body)"


class RemoteReward:
    """Reward fn ``(images, prompts, metadata) -> (scores, info)`` that asks a reward server.

    See the module docstring for the protocol and the retry semantics; build it with
    ``load_reward("remote", url=...)``.

    Args:
        url: the server's base URL, e.g. ``"http://127.0.0.1:8765"`` (a trailing ``/score`` is accepted).
        token: bearer token; defaults to the ``DDPO_REWARD_TOKEN`` environment variable (none if unset).
        timeout: seconds allowed per HTTP attempt (connect + the server's scoring time + transfer).
        retries: retries after the first attempt on connection errors, timeouts and 5xx answers.
        backoff: seconds before the first retry; doubles on each further retry.
        max_batch: most images per request; a larger batch is sent as several sequential requests.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_batch: int = 32,
    ):
        parsed = urllib.parse.urlsplit(str(url))
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"remote reward: url {url!r} must look like 'http://HOST:PORT' (http or https)")
        if not float(timeout) > 0:
            raise ValueError(f"remote reward: timeout must be > 0 seconds, got {timeout!r}")
        if int(retries) != retries or retries < 0:
            raise ValueError(f"remote reward: retries must be an integer >= 0, got {retries!r}")
        if not float(backoff) >= 0:
            raise ValueError(f"remote reward: backoff must be >= 0 seconds, got {backoff!r}")
        if int(max_batch) != max_batch or max_batch < 1:
            raise ValueError(f"remote reward: max_batch must be an integer >= 1, got {max_batch!r}")
        base = str(url).rstrip("/")
        if base.endswith("/score"):
            base = base[: -len("/score")]
        self.url = base
        self.score_url = base + "/score"
        self.port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self.token = token if token is not None else (os.environ.get(TOKEN_ENV) or None)
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.max_batch = int(max_batch)
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def __repr__(self) -> str:
        auth = ", token=***" if self.token else ""
        return f"RemoteReward({self.url!r}{auth}, max_batch={self.max_batch}, retries={self.retries})"

    def __call__(self, images: Any, prompts: list[str], metadata: list[dict]):
        pil = to_pil(images)
        batch = len(pil)
        prompts = list(prompts)
        metadata = [{} for _ in range(batch)] if metadata is None else list(metadata)
        if len(prompts) != batch or len(metadata) != batch:
            raise ValueError(
                f"remote reward: got {batch} images but {len(prompts)} prompts and {len(metadata)} metadata rows"
            )
        scores: list[np.ndarray] = []
        infos: list[dict] = []
        for start in range(0, batch, self.max_batch):
            end = min(start + self.max_batch, batch)
            s, info = self._score(pil[start:end], prompts[start:end], metadata[start:end])
            scores.append(s)
            infos.append(info)
        out = np.concatenate(scores) if scores else np.zeros((0,), dtype=np.float32)
        return out.astype(np.float32, copy=False), merge_infos(infos)

    def _score(self, pil: list, prompts: list[str], metadata: list[dict]):
        payload = {
            "protocol": PROTOCOL,
            "images": [encode_png(im) for im in pil],
            "prompts": [str(p) for p in prompts],
            "metadata": to_jsonable(metadata),
        }
        body = json.dumps(payload, allow_nan=False).encode("utf-8")
        reply = self._post(body)
        raw = reply.get("scores") if isinstance(reply, dict) else None
        if not isinstance(raw, list) or len(raw) != len(pil):
            got = f"{len(raw)} scores" if isinstance(raw, list) else f"no 'scores' list ({str(reply)[:200]})"
            raise RuntimeError(f"remote reward {self.score_url} answered {got} for {len(pil)} images")
        try:
            scores = np.asarray([np.nan if v is None else float(v) for v in raw], dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise RuntimeError(f"remote reward {self.score_url} answered non-numeric scores: {exc}") from None
        info = reply.get("info") or {}
        return scores, info if isinstance(info, dict) else {"info": info}

    def _post(self, body: bytes) -> dict:
        """POST ``body`` to ``/score`` with retries; returns the decoded JSON reply."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        attempts = self.retries + 1
        last_error = ""
        last_was_http = False
        wait_hint = 0.0  # Retry-After of the last answer
        for k in range(attempts):
            if k:
                time.sleep(max(self.backoff * 2 ** (k - 1), wait_hint))
            wait_hint = 0.0
            request = urllib.request.Request(self.score_url, data=body, headers=headers, method="POST")
            try:
                with self._opener.open(request, timeout=self.timeout) as resp:
                    raw = resp.read()
            except urllib.error.HTTPError as exc:  # an answer with a 4xx/5xx status
                msg = _error_message(exc)
                if 400 <= exc.code < 500:
                    raise ValueError(
                        f"remote reward {self.score_url} rejected the request (HTTP {exc.code}): {msg}"
                    ) from None
                last_error, last_was_http = f"HTTP {exc.code}: {msg}", True
                wait_hint = _retry_after(exc)
                continue
            except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:  # refused, reset, timeout
                reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
                last_error, last_was_http = f"{type(reason).__name__}: {reason}", False
                continue
            try:
                return json.loads(raw)
            except (ValueError, RecursionError):
                raise RuntimeError(
                    f"remote reward {self.score_url} answered 200 with a body that is not JSON: {raw[:200]!r}"
                ) from None
        if last_was_http:
            raise RuntimeError(
                f"remote reward {self.score_url} failed after {attempts} attempts; last answer {last_error}"
            )
        raise ConnectionError(
            f"remote reward: cannot reach {self.score_url} after {attempts} attempt(s) "
            f"(timeout {self.timeout:g}s each; last error {last_error}). Is the reward server running? "
            f"Start one with: python scripts/serve_reward.py --reward NAME --port {self.port}"
        )


#: the registry's factory: RemoteReward(url, token=..., ...) is itself the reward fn
register("remote")(RemoteReward)
