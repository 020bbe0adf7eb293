"""Loading a state dict whose keys or shapes do not match the module exactly, with a report of what did not."""

from __future__ import annotations

from typing import Any

# ---------------------------------------------------------------------------


def load_state_dict_checked(
    module, state_dict: dict[str, Any], *, strict: bool = True, source: str = "state dict"
) -> dict[str, Any]:
    """Load ``state_dict`` into ``module``, reporting every key that does not match; refused unless ``strict=False``.

    Compares the keys and shapes of ``state_dict`` with ``module.state_dict()``:

    * ``missing``: the module's keys the state dict lacks (they keep their current values);
    * ``unexpected``: the state dict's keys the module does not have (ignored);
    * ``mismatched``: keys of both whose shapes differ, as ``(key, shape in state dict, shape in module)``
      (not loaded: e.g. a 4-channel ``conv_in`` of a text-to-image UNet into an 8-channel image-conditioned one).

    ``strict=True`` (default) raises ``ValueError`` naming ``source``, the counts and the first keys of each
    kind unless all three are empty, and loads nothing; ``strict=False`` loads every matching key and returns
    the report. Returns ``{"loaded": [keys], "missing": [...], "unexpected": [...], "mismatched": [...]}``.
    """
    own = module.state_dict()
    missing = sorted(k for k in own if k not in state_dict)
    unexpected = sorted(k for k in state_dict if k not in own)
    mismatched = sorted(
        (k, tuple(state_dict[k].shape), tuple(own[k].shape))
        for k in state_dict
        if k in own and tuple(state_dict[k].shape) != tuple(own[k].shape)
    )
    bad = {k for k, _, _ in mismatched}
    loadable = {k: v for k, v in state_dict.items() if k in own and k not in bad}
    report = {"loaded": sorted(loadable), "missing": missing, "unexpected": unexpected, "mismatched": mismatched}
    if strict and (missing or unexpected or mismatched):
        parts = []
        for label, items in (("missing", missing), ("unexpected", unexpected), ("shape-mismatched", mismatched)):
            if items:
                shown = ", ".join(f"{i[0]} {i[1]}→{i[2]}" if isinstance(i, tuple) else i for i in items[:5])
                parts.append(f"{len(items)} {label} ({shown}{', …' if len(items) > 5 else ''})")
        raise ValueError(
            f"{source} does not match {type(module).__name__}: {'; '.join(parts)}. Load it with "
            f"strict=False to take the {len(loadable)} matching keys and keep the others as they are"
        )
    module.load_state_dict(loadable, strict=False)
    return report
