"""What a world adds to ``scripts/evaluate.py`` for pipelines of one sample kind: defaults, metrics, a table.

A package offers an :class:`EvaluationExtras` through the ``ddpo_grpo.evaluation_extras`` entry point
(``foundation/plugins.py``), named for the sample kind it serves (``ddpo_grpo/sample_kinds.py``: "image" for every
pipeline no plug-in kind claims, else the plug-in kind's name). The embedded worlds register theirs:
ShapesWorld for "image" (``worlds/shapes/extras.py``: its held-out prompts and judge as the defaults) and MotionWorld
for "motion" (``worlds/motion/extras.py``: its prompts and judge, the physics metrics per sample, the text–motion
evaluator's set-level numbers and the HumanML3D-style table). Every field is optional; a kind nobody registers
gets the library's own extras for it — for "text", a language model's, :data:`TEXT` (the ``verifiable`` reward,
grouped by ``data_source``) — else :data:`NONE` (no defaults: --prompts and --reward must then be given).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ddpo_grpo.sample_kinds import TEXT_KIND
from foundation import plugins


@dataclass(frozen=True)
class EvaluationExtras:
    """A world's evaluation extras for one sample kind (the fields' comments say what evaluate.py does with each)."""

    #: --prompts when not given: a prompt source name
    prompts: str | None = None
    #: --reward when not given: a reward name
    reward: str | None = None
    #: reward name -> the keyword arguments it is evaluated with when --reward_kwargs does not give them (for any
    #: pipeline: the extras of every kind are consulted), e.g. {"shapes": {"score": "strict"}}
    reward_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: --pass_metric when not given: the first reward's per-sample metric a sample passes by (None: the reward's only
    #: metric; a language model's: its score)
    pass_metric: str | None = None
    #: --group_by when not given: the per-sample label of the per-group table
    group_by: str = "task"
    #: --per_group when not given, no --limit is given and the rows carry the group_by field (0: every prompt)
    per_group: int = 0
    #: samples per row of grid.png (unless --per_prompt in 2..16 gives it)
    grid_columns: int = 8
    #: ``per_sample(reward) -> reward``: the first reward, wrapped so that its info also holds extra per-sample
    #: metrics (scored, grouped and compared like the reward's own)
    per_sample: Callable[[Callable], Callable] | None = None
    #: ``set_metrics(samples, prompts) -> {"<source>/<name>": float}``: numbers of the whole set of samples
    #: (eval.json's "set_metrics"; printed after ``set_metrics_label``)
    set_metrics: Callable[[Any, list[str]], dict[str, float]] | None = None
    set_metrics_label: str = "set-level"
    #: ``table(samples, prompts, values, groups, base=None | {"features", "prompts", "values"}, seed=...) -> dict``:
    #: a JSON-able results table of the first reward's per-sample values (eval.json's "table"), and
    #: ``format_table(table, title) -> str`` its printed form, titled ``table_title``
    table: Callable[..., dict] | None = None
    format_table: Callable[[dict, str], str] | None = None
    table_title: str = "table"
    #: per-sample metrics the table shows, left out of the generic per-group and paired tables
    table_keys: tuple[str, ...] = ()

    def __post_init__(self):
        if (self.table is None) != (self.format_table is None):
            raise ValueError("EvaluationExtras: give table and format_table together (the table and its printed form)")

    @property
    def keeps_all_samples(self) -> bool:
        """True when the set metrics or the table need every sample (not only the grid's)."""
        return self.set_metrics is not None or self.table is not None

    def numbers(self, samples, prompts, values: dict, groups, base: dict | None = None, seed: int = 0):
        """``(set_metrics, table)`` of every sample of an evaluation (``{}`` / None where this kind has none):
        ``values`` are the first reward's per-sample values, ``base`` the same three of a compared base
        (``{"features", "prompts", "values"}``) or None."""
        set_metrics = self.set_metrics(samples, prompts) if self.set_metrics is not None else {}
        table = None
        if self.table is not None:
            table = self.table(samples, prompts, values, groups, base=base, seed=seed)
        return set_metrics, table

    def report(self, set_metrics: dict, table: dict | None, title: str) -> str:
        """The printed form of :meth:`numbers`' results (the table titled ``table_title (title)``)."""
        lines = []
        if set_metrics:
            shown = (f"{k.split('/', 1)[1]}={v:.3f}" for k, v in set_metrics.items() if k.count("/") == 1)
            lines.append(f"{self.set_metrics_label}: " + "  ".join(shown))
        if table is not None:
            lines.append("\n" + self.format_table(table, f"{self.table_title} ({title})"))
        return "\n".join(lines)


#: the extras of a kind that no package serves
NONE = EvaluationExtras()
#: the library's own extras of a language model's "text" kind, unless a package registers "text": the ``verifiable``
#: reward, grouped by the rows' ``data_source`` (no default prompts; ``ddpo_grpo/text_evaluation.py``)
TEXT = EvaluationExtras(reward="verifiable", group_by="data_source")


def extras_for(kind: str) -> EvaluationExtras:
    """The evaluation extras registered for sample kind ``kind``, else the library's own for it, else :data:`NONE`."""
    if kind not in plugins.names("evaluation_extras"):
        return TEXT if kind == TEXT_KIND else NONE
    what = "ddpo_grpo.evaluation_extras.EvaluationExtras"
    return plugins.load_checked("evaluation_extras", kind, EvaluationExtras, what, named=False)


def default_reward_kwargs(reward: str) -> dict | None:
    """The keyword arguments ``reward`` is evaluated with by default (the first registered extras, by kind name,
    that name it), or None when none does."""
    for kind in plugins.names("evaluation_extras"):
        kwargs = extras_for(kind).reward_kwargs.get(reward)
        if kwargs is not None:
            return dict(kwargs)
    return None
