"""Shape fidelity: how far a detected object's pixels are from the nearest ideally rendered shape.

The judge (:mod:`.judge`) calls an object a ``circle``, ``square`` or ``triangle`` only when its pixel set
is close to that shape *as the world renders it* (:func:`~worlds.shapes.world.shape_mask` in a square
``s × s`` box, every integer size and position allowed): this module measures that closeness.

**Fit.** For a component's boolean mask ``M`` (cropped to its bounding box, ``h × w``) and a shape class
``S``, every ideal mask ``T = shape_mask(S, s)`` placed with its top-left corner at an integer offset
``o`` is compared with ``M``: every placement whose box edges lie within ``slack`` px (default
:data:`SLACK` = 1) of ``M``'s bounding-box edges, ``s`` clipped to ``sizes``. For each placement:

* the **symmetric Hausdorff distance** between the two pixel sets (pixel centres, Euclidean, px)::

      H(M, T_o) = max( max_{p ∈ M} d(p, T_o),  max_{q ∈ T_o} d(q, M) ),   d(p, A) = min_{a ∈ A} |p − a|

  — the largest distance by which the object's outline departs from the ideal one, in either
  direction: a square's corner cut by 2 px, a side bowed in or out by 2 px, a lump 2 px high all
  give ``H >= 2``; a 1-px rim of anti-aliasing, blur or JPEG ringing gives ``H <= 1.41``;
* the **IoU** ``|M ∩ T_o| / |M ∪ T_o|``.

The fit is the placement of smallest ``H`` (ties: the larger IoU); :func:`fit_shape` returns it as a
:class:`Fit`. Since ``H <= slack`` forces every box edge within ``slack`` of the component's (the extreme
pixels of each set lie within ``H`` of the other set), the search is exact whenever the best ``H`` is
``<= slack``; a larger reported ``H`` is the best within that window (an upper bound). ``d(p, A)`` for
every pixel comes from an exact Euclidean distance transform (:func:`distance_transform`), so a fit is a
few vectorised array operations per size.

Distances only take the values ``sqrt(i² + j²)`` of integer offsets: 0, 1, 1.41, 2, 2.24, 2.83, 3, …
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .world import shape_mask

#: sizes tried around the component's bounding box: s in [max(h, w) − 2·SLACK, min(h, w) + 2·SLACK], and
#: offsets that keep every edge of the ideal box within SLACK px of the component's box edge. A
#: Hausdorff distance <= SLACK needs exactly that (each set's extreme pixels lie within H of the other
#: set), so the fit is exact whenever the best H is <= SLACK, and an upper bound on it otherwise
SLACK = 1


@dataclass(frozen=True)
class Fit:
    """The best placement of one shape class on a component (see the module docstring).

    ``hausdorff``: symmetric Hausdorff distance in px (``inf`` when no size could be tried); ``iou``: IoU at that
    placement; ``size``: the ideal box side ``s``; ``offset``: ``(x, y)`` of the ideal box's top-left corner
    relative to the component's bounding box (may be negative).
    """

    shape: str
    hausdorff: float
    iou: float
    size: int
    offset: tuple[int, int]


def distance_transform(mask: np.ndarray) -> np.ndarray:
    """Exact Euclidean distance (px) from every pixel of ``mask``'s grid to the nearest ``True`` pixel.

    Separable squared-distance transform: ``g(y, x) = min_i (y − i)²`` over the set pixels ``(i, x)`` of column
    x, then ``D²(y, x) = min_j g(y, j) + (x − j)²`` (the squared Euclidean distance splits into its two axes,
    so minimising first over rows within each column and then over columns is exact). ``O(h²w + hw²)``
    broadcast minima: meant for the small crops of this module. ``inf`` everywhere when ``mask`` is empty.
    """
    mask = np.asarray(mask, dtype=bool)
    h, w = mask.shape
    if not mask.any():
        return np.full((h, w), np.inf)
    rows = np.arange(h, dtype=np.float64)
    cols = np.arange(w, dtype=np.float64)
    dy2 = (rows[:, None] - rows[None, :]) ** 2  # [h (y), h (i)]
    g = np.where(mask.T[:, None, :], dy2[None, :, :], np.inf).min(-1).T  # [h, w]: min over i in column x
    dx2 = (cols[:, None] - cols[None, :]) ** 2  # [w (x), w (j)]
    d2 = (g[:, None, :] + dx2[None, :, :]).min(-1)  # [h, w]: min over j
    return np.sqrt(d2)


@lru_cache(maxsize=512)
def _template(shape: str, size: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
    """``(mask, distance to it)`` of the ideal shape, the distance on the mask's grid padded by ``pad``."""
    mask = shape_mask(shape, size)
    dist = distance_transform(np.pad(mask, pad))
    dist.setflags(write=False)
    return mask, dist


def fit_shape(mask: np.ndarray, shape: str, sizes: tuple[int, int] | None = None, slack: int = SLACK) -> Fit:
    """The best ideal ``shape`` for the component ``mask`` (boolean ``[h, w]``, cropped to its bounding box).

    ``sizes = (lo, hi)`` bounds the ideal box side (inclusive; None: no bound beyond ``slack``). Returns a
    :class:`Fit` with ``hausdorff = inf`` when no placement is allowed.
    """
    mask = np.asarray(mask, dtype=bool)
    h, w = mask.shape
    lo, hi = max(1, max(h, w) - 2 * slack), min(h, w) + 2 * slack
    if sizes is not None:
        lo, hi = max(lo, int(sizes[0])), min(hi, int(sizes[1]))
    best = Fit(shape, float("inf"), 0.0, 0, (0, 0))
    if lo > hi or not mask.any():
        return best
    area = int(mask.sum())
    ys, xs = np.nonzero(mask)
    # one canvas for every size: the component's box grown so that every allowed placement fits inside
    pad = slack
    dist_m = distance_transform(np.pad(mask, pad))  # [Hc, Wc]: distance to the component
    hc, wc = dist_m.shape
    pad_t = max(hc, wc)  # the ideal shape's distance map covers every canvas pixel at every offset
    for s in range(lo, hi + 1):
        t, dist_t = _template(shape, s, pad_t)
        # offsets o = (oy, ox) of the s-box's corner on the canvas: both edges within slack of the component's
        oy = np.arange(max(0, pad + h - s - slack), min(pad + slack, hc - s) + 1)
        ox = np.arange(max(0, pad + w - s - slack), min(pad + slack, wc - s) + 1)
        if len(oy) == 0 or len(ox) == 0:
            continue
        win = sliding_window_view(dist_m, (s, s))[oy[:, None], ox[None, :]]  # [ny, nx, s, s]
        on_t = win[..., t]  # [ny, nx, |T|]: distance of each ideal pixel to the component
        h_tm = on_t.max(-1)  # [ny, nx]
        inter = (on_t == 0.0).sum(-1)  # [ny, nx]: ideal pixels on the component
        # distance of each component pixel p to the ideal shape: its distance map read at p − o (+ padding)
        cy = (ys + pad)[None, None, :] - oy[:, None, None] + pad_t  # [ny, 1, n]
        cx = (xs + pad)[None, None, :] - ox[None, :, None] + pad_t  # [1, nx, n]
        h_mt = dist_t[cy, cx].max(-1)  # [ny, nx]
        haus = np.maximum(h_tm, h_mt)
        iou = inter / (area + int(t.sum()) - inter)
        key = haus - 1e-3 * iou  # smallest H, then largest IoU (distinct H values differ by >= 0.17)
        k = np.unravel_index(int(np.argmin(key)), key.shape)
        cand = Fit(shape, float(haus[k]), float(iou[k]), s, (int(ox[k[1]]) - pad, int(oy[k[0]]) - pad))
        if (cand.hausdorff, -cand.iou) < (best.hausdorff, -best.iou):
            best = cand
    return best
