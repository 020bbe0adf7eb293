"""What every ShapesWorld recipe gives the core loop besides its models: data, evaluation, resolution.

* data: :class:`~worlds.shapes.pretrain.data.TrainingData` (renders of train-split prompts and the
  training randomness);
* evaluation: the held-out *test* split, scored by the strict ``shapes`` reward (the ShapesWorld judge)
  per task, at the canvas resolution.
"""

from __future__ import annotations

from ddpo_grpo.pretraining import Recipe
from worlds.shapes.grammar import load_split
from worlds.shapes.pretrain.data import TrainingData
from worlds.shapes.world import CANVAS


class ShapesRecipe(Recipe):
    """Base class of the ShapesWorld recipes (:mod:`.sd3`, :mod:`.sd`)."""

    eval_group_by = "task"
    eval_metric = "strict"

    def make_data(self) -> TrainingData:
        return TrainingData(self.cfg.task_weights, self.cfg.seed)

    def eval_rows(self) -> list[dict]:
        return load_split("test")

    def eval_reward(self):
        from reward_models import load_reward

        return load_reward("shapes", score="strict")

    def policy_options(self) -> dict:
        return {"resolution": CANVAS}
