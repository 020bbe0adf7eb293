"""``shapes_detector``: a ShapesWorld scorer that shares no code with the world judge.

The world judge (``worlds/shapes/judge.py`` with ``fidelity.py``) fits ideal shapes to colour components
under hand-set thresholds; the model is trained against it, so a gain it reports may sit in its gray zones.
This scorer reaches its verdict another way and imports neither module (a test checks it):

* :mod:`.segment` — its own colour segmentation (hue angle from white and coverage along the white ->
  colour line; 8-connected components by index propagation);
* :mod:`.net` — a learned shape classifier (a 114k-parameter CNN on each object's coverage patch; classes
  circle, square, triangle and "other"), shipped as ``worlds/shapes/models/detector/detector.npz``;
* :mod:`.train` — the classifier's data (scenes rendered by the world, gray-zone negatives from
  ``distortions.py``) and training from a seed: ``python -m worlds.shapes train-detector``;
* :mod:`.score` — detection and the spec's strict / partial checks, written again from the README;
* :mod:`.reward` — the ``shapes_detector`` reward (same contract and info as ``shapes``);
* :mod:`.calibration` — its agreement with the ground truth and with the judge:
  ``python -m worlds.shapes agreement``.
"""

from .score import detect, score

__all__ = ["detect", "score"]
