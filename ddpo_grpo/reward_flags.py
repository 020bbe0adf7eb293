"""The scoring rewards of a command line: ``--reward`` (repeatable, comma lists) and ``--reward_kwargs`` (a JSON
object; with several rewards, an object of name -> kwargs object), as ``scripts/evaluate.py`` takes them. A reward
the kwargs do not cover gets the kwargs a world gives it for evaluation (``ddpo_grpo/evaluation_extras.py``)."""

from __future__ import annotations

import json

from ddpo_grpo.cli import UsageError
from ddpo_grpo.evaluation_extras import default_reward_kwargs


def reward_names(values: list[str] | None) -> list[str]:
    """The rewards of the (repeatable, comma-separated) --reward flag's ``values``, in order, without repeats."""
    names = [n.strip() for value in values or [] for n in value.split(",")]
    if any(not n for n in names):
        raise UsageError(f"--reward {','.join(values)!r}: an empty reward name; give name[,name...]")
    return list(dict.fromkeys(names))


def load_rewards(names: list[str], reward_kwargs: str | None) -> dict:
    """``{name: reward fn}`` of ``names`` with --reward_kwargs ``reward_kwargs`` (a UsageError naming the flag on
    failure)."""
    from reward_models import load_reward

    try:
        given = json.loads(reward_kwargs) if reward_kwargs else None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--reward_kwargs is not valid JSON: {exc}") from exc
    if given is not None and not isinstance(given, dict):
        raise UsageError(f"--reward_kwargs must be a JSON object, got {type(given).__name__}")
    if given is not None and len(names) > 1:
        bad = [k for k, v in given.items() if k not in names or not isinstance(v, dict)]
        if bad:
            raise UsageError(
                f"--reward_kwargs with several rewards is an object of reward name -> kwargs object; {bad[0]!r} is "
                f"not one of --reward {', '.join(names)} with an object value"
            )
    rewards = {}
    for name in names:
        kwargs = given if len(names) == 1 else (given or {}).get(name)
        if kwargs is None:
            kwargs = default_reward_kwargs(name) or {}
        try:
            rewards[name] = load_reward(name, **kwargs)
        except (ValueError, TypeError) as exc:
            raise UsageError(f"--reward {name!r}: {exc}") from exc
    return rewards
