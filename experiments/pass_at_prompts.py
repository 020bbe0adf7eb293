"""A held-out prompt set for a pass@k ceiling: up to N rows per group, spread evenly over each group's rows.

    python experiments/pass_at_prompts.py --prompts shapes_test --by task --per_group 12 --out /tmp/shapes_pass.jsonl

``scripts/evaluate.py --per_group`` balances samples, not prompts: a task of 312 prompts gets one sample per prompt,
too few for pass@8. This writes a prompt file with every group's first N rows at even strides (all of a group's rows
when it has fewer), so that ``evaluate.py --prompts FILE --per_prompt 8 --per_group 0 --pass_at 1,2,4,8`` draws 8
samples of each (docs/learning.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def pick(rows: list[dict], by: str, per_group: int) -> list[dict]:
    """Up to ``per_group`` rows of each value of ``rows[i][by]``, at even strides, in file order within a group."""
    groups: dict = {}
    for row in rows:
        groups.setdefault(str(row.get(by)), []).append(row)
    out = []
    for members in groups.values():
        step = max(1, len(members) // per_group)
        out += members[::step][:per_group]
    return out


def main(argv: list[str] | None = None) -> int:
    from ddpo_grpo.cli import load_rows

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--prompts", required=True, help="a prompt source name or a .txt / .json / .jsonl file")
    p.add_argument("--by", default="task", help="the row field whose values are the groups")
    p.add_argument("--per_group", type=int, default=12, help="rows per group, at most")
    p.add_argument("--out", required=True, help="the .jsonl file to write")
    args = p.parse_args(argv)
    rows = pick(load_rows(args.prompts), args.by, args.per_group)
    Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    counts: dict = {}
    for row in rows:
        counts[str(row.get(args.by))] = counts.get(str(row.get(args.by)), 0) + 1
    print(f"wrote {len(rows)} rows to {args.out}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
