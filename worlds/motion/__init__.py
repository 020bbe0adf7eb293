"""MotionWorld: a synthetic compositional text-to-motion world in HumanML3D's format.

The specification is ``worlds/motion/README.md``; this package is its executable form:

* :mod:`.skeleton` — the 22-joint SMPL / T2M body (joint order, kinematic tree, rest offsets), the
  coordinate conventions, rotation algebra (quaternions, matrices, HumanML3D's 6D), forward kinematics
  of the generator's rig and HumanML3D's IK / FK;
* :mod:`.features` — the 263-dim HumanML3D features: :func:`features_from_joints`,
  :func:`recover_joints`, :func:`normalize` / :func:`denormalize` with the shipped statistics
  (``data/motion_{mean,std}.npy``, reproduced by :func:`~.stats.compute_stats`);
* :mod:`.grammar` — the action vocabulary, every prompt of every task, parsing, the train/test split
  (``data/motion_{train,test}.jsonl``: the prompt sources ``motion_train`` and ``motion_test``);
* :mod:`.generator` — seeded procedural motions of every prompt by forward kinematics (:func:`generate`,
  :func:`generate_dataset` for pretraining sets);
* :mod:`.judge` — the rule-based judge, strict / partial scoring; :mod:`.agreement` its robustness measurement
  (``python -m worlds.motion judge-agreement``; neither imported here);
* :mod:`.physics` — foot skating, ground penetration, jitter / jerk, bone-length drift (not imported
  here either: ``python -m worlds.motion physics`` prints the measured numbers);
* :mod:`.evaluator` — the text–motion evaluator and HumanML3D's set metrics (not imported here);
* ``python -m worlds.motion`` — the world's commands (``__main__.py``: pretraining, evaluator training and
  measurement, the judge's and physics' measurements, the table of a sample directory);
* :mod:`.reward` — the judge as the ``motion_judge`` reward and the physics score as ``motion_physics``
  (not imported here: importing it registers them with :mod:`reward_models`);
* :mod:`.render` — stick-figure GIFs and filmstrip PNGs;
* :mod:`.model`, :mod:`.pretrain` — the base model's components (an MDM-style denoiser, the motion
  normalizer) and its pretraining recipe; :data:`MDM_DIR` is the shipped model (a ``DenoiserPipeline``
  directory, ``ddpo_grpo.policies.load_pipeline(MDM_DIR)``); :mod:`.tiny` a tiny random one for tests;
* :mod:`.files`, :mod:`.evaluation` — motion samples as files (npy, GIF, filmstrip); judge + physics in
  one evaluation pass (not imported here: they import torch and the library).
"""

from __future__ import annotations

from pathlib import Path

from .features import (
    FEATURE_DIM,
    SLICES,
    canonicalize,
    denormalize,
    features_from_joints,
    load_stats,
    normalize,
    recover_joints,
    recover_root,
)
from .generator import Motion, dataset_seed, generate, generate_dataset
from .grammar import (
    ACTIONS,
    ARM_ACTIONS,
    LEG_ACTIONS,
    SPLIT_SEED,
    TASKS,
    MotionSpec,
    all_prompts,
    enumerate_specs,
    format_prompt,
    load_split,
    make_split,
    parse_prompt,
    spec_of,
    split_rule,
    test_rows,
    train_rows,
)
from .render import filmstrip_png, stick_figure_gif
from .skeleton import FPS, JOINT_NAMES, KINEMATIC_CHAIN, N_JOINTS, PARENTS
from .stats import compute_stats

#: the shipped base model: a DenoiserPipeline directory (MDM architecture), see README.md "Base model"
MDM_DIR = str(Path(__file__).resolve().parent / "models" / "mdm")

__all__ = [
    "ACTIONS",
    "ARM_ACTIONS",
    "FEATURE_DIM",
    "FPS",
    "JOINT_NAMES",
    "KINEMATIC_CHAIN",
    "LEG_ACTIONS",
    "MDM_DIR",
    "N_JOINTS",
    "PARENTS",
    "SLICES",
    "SPLIT_SEED",
    "TASKS",
    "Motion",
    "MotionSpec",
    "all_prompts",
    "canonicalize",
    "compute_stats",
    "dataset_seed",
    "denormalize",
    "enumerate_specs",
    "features_from_joints",
    "filmstrip_png",
    "format_prompt",
    "generate",
    "generate_dataset",
    "load_split",
    "load_stats",
    "make_split",
    "normalize",
    "parse_prompt",
    "recover_joints",
    "recover_root",
    "spec_of",
    "split_rule",
    "stick_figure_gif",
    "test_rows",
    "train_rows",
]
