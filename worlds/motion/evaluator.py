"""MotionWorld's text–motion evaluator: a small contrastive model and the HumanML3D set metrics.

A measuring instrument in the style of the T2M evaluator (Guo et al. 2022) and TMR (Petrovich et al. 2023):
a **motion encoder** and a **text encoder** map a clip and a prompt into one L2-normalised embedding space
(:attr:`EvaluatorConfig.dim` = 128) where matching pairs are close. It was trained with a symmetric InfoNCE
loss on procedurally generated clips of *every* prompt of the grammar (train and test splits; see
:mod:`worlds.motion.evaluator_train` and ``worlds/motion/README.md``, "Evaluator") and ships in
``models/evaluator/`` (``model.safetensors`` + ``config.json``).

* **Motion encoder**: the denormalised features ``[frames, 263]`` are normalised with statistics stored
  in the weights (the shipped ``data/motion_{mean,std}.npy`` at training time), cut into patches of
  :attr:`~EvaluatorConfig.patch` frames (zero-padded; a ragged tail patch is zero-filled), projected to
  ``d_model``, given sinusoidal positions and a learned ``[CLS]`` token, run through a pre-norm transformer
  with a key-padding mask (variable lengths in one batch), and the ``[CLS]`` output is projected and
  L2-normalised.
* **Text encoder**: word-level over the grammar's vocabulary (:func:`tokenize`: lower case, one final
  period dropped, whitespace split; unknown words map to ``<unk>``), learned positions, a ``[CLS]`` token,
  a pre-norm transformer; the ``[CLS]`` output is projected and L2-normalised. Word order matters
  ("A then B" vs "B then A").

Set metrics (:func:`set_metrics`, the HumanML3D protocol on this evaluator's embeddings; distances are
Euclidean between unit vectors, so in ``[0, 2]``):

* **R-precision** top-1/2/3 (:func:`r_precision`): motions in batches of 32; each motion's own prompt is
  ranked by distance among the 32 prompts of its batch (its own and 31 others). Batches are drawn with a
  fixed seed in round-robin order over repeated prompts so that a batch holds distinct prompts where the
  set allows; a prompt identical to the motion's own never counts against it. The last incomplete batch
  is dropped (a set smaller than one batch is one batch).
* **Matching score** (:func:`matching_score`): mean distance between each motion and its own prompt.
* **FID** (:func:`fid`): Fréchet distance between the Gaussians fitted to the motion embeddings and to
  those of *real* clips drawn by the generator for the same prompts (:func:`reference_features`, master
  seed :data:`REFERENCE_SEED`).
* **Diversity** (:func:`diversity`): mean distance between :data:`DIVERSITY_PAIRS` random pairs of motion
  embeddings (fixed seed).
* **MM-Dist** (``mm_dist``): HumanML3D's name for the matching score.
* **MultiModality** (:func:`multimodality`): for each prompt with at least two motions, the mean distance of
  :data:`MULTIMODALITY_PAIRS` random pairs of *its own* motions; averaged over those prompts. How different
  the motions of one text are (Guo et al. 2022 / MDM draw 10 pairs from 30 motions per text; here the pairs
  come from however many motions per prompt the set holds, reported as ``multimodality_texts``).

``python -m worlds.motion measure-evaluator`` measures them (real clips vs perturbed and mismatched ones) on
the test split (:mod:`worlds.motion.evaluator_measure`); the README holds the numbers.

This module is the evaluator's face; each concern lives in its own module and is re-exported here:
:mod:`~worlds.motion.evaluator_text` (the tokenizer), :mod:`~worlds.motion.evaluator_model` (the model, its
folder format, :func:`load_evaluator`), :mod:`~worlds.motion.set_metrics` (the set metrics),
:mod:`~worlds.motion.evaluator_measure` (the measurement) and :mod:`~worlds.motion.evaluator_train` (training).
"""

from __future__ import annotations

from .evaluator_measure import CONDITIONS, MEASURE_SEED, format_measurement, measure
from .evaluator_model import (
    CONFIG_NAME,
    MODEL_DIR,
    WEIGHTS_NAME,
    EvaluatorConfig,
    MotionEncoder,
    MotionEvaluator,
    TextEncoder,
    load_evaluator,
    pad_batch,
    sinusoid,
)
from .evaluator_text import SPECIALS, clause_prompt, grammar_vocab, segment_prompts, tokenize
from .set_metrics import (
    DIVERSITY_PAIRS,
    MULTIMODALITY_PAIRS,
    R_PRECISION_BATCH,
    REFERENCE_SEED,
    batch_order,
    diversity,
    embedding_metrics,
    fid,
    matched_frames,
    matching_score,
    multimodality,
    r_precision,
    reference_features,
    set_embeddings,
    set_metrics,
)

__all__ = [
    "CONDITIONS",
    "CONFIG_NAME",
    "DIVERSITY_PAIRS",
    "MEASURE_SEED",
    "MODEL_DIR",
    "MULTIMODALITY_PAIRS",
    "REFERENCE_SEED",
    "R_PRECISION_BATCH",
    "SPECIALS",
    "WEIGHTS_NAME",
    "EvaluatorConfig",
    "MotionEncoder",
    "MotionEvaluator",
    "TextEncoder",
    "batch_order",
    "clause_prompt",
    "diversity",
    "embedding_metrics",
    "fid",
    "format_measurement",
    "grammar_vocab",
    "load_evaluator",
    "matched_frames",
    "matching_score",
    "measure",
    "multimodality",
    "pad_batch",
    "r_precision",
    "reference_features",
    "segment_prompts",
    "set_embeddings",
    "set_metrics",
    "sinusoid",
    "tokenize",
]
