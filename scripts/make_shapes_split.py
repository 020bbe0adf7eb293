"""Regenerate the ShapesWorld train/test prompt split (deterministic; no RNG, SHA-256 ranks).

Usage:
  python scripts/make_shapes_split.py            # rewrite worlds/shapes/data/shapes_{train,test}.jsonl
  python scripts/make_shapes_split.py --check    # exit 1 if the shipped files differ from a regeneration
  python scripts/make_shapes_split.py --out DIR --seed 3   # another split, elsewhere

Each line is {"prompt": ..., "task": ..., "objects": [{"color", "shape", "count"}], "relation": ...}.
The split rule (held-out colour–shape pairs, counting combos and single objects) is documented in
worlds/shapes/grammar.py.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from worlds.shapes.grammar import DATA_DIR, SPLIT_SEED, make_split, split_rule, write_split


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(DATA_DIR), help="output directory (default: the shipped ddpo_grpo/data)")
    ap.add_argument("--seed", type=int, default=SPLIT_SEED, help="split seed (the shipped split uses %(default)s)")
    ap.add_argument("--check", action="store_true", help="only compare the files in --out with a regeneration")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            fresh = write_split(Path(tmp), args.seed)
            stale = [
                str(out / p.name)
                for p in fresh.values()
                if not (out / p.name).is_file() or (out / p.name).read_bytes() != p.read_bytes()
            ]
        if stale:
            print(f"out of date: {', '.join(stale)}; run `python scripts/make_shapes_split.py`", file=sys.stderr)
            return 1
        print(f"{out}: shapes split (seed {args.seed}) is up to date")
        return 0
    paths = write_split(out, args.seed)
    split = make_split(args.seed)
    print(f"held-out rule (seed {args.seed}): {split_rule(args.seed)}")
    for name, path in paths.items():
        print(f"wrote {path}: {len(split[name])} prompts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
