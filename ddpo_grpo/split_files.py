"""Split files: a prompt split shipped as JSON lines, one row (a JSON object) per line.

The embedded worlds ship their train/test splits this way (``worlds/*/data/*.jsonl``) and regenerate them from a
seed. :func:`write_rows` replaces a file atomically (:func:`foundation.atomic_io.atomic_write_text`: a reader
sees the old split or the new one, never half of one); :func:`read_rows` reads one back, skipping blank lines,
and names the command that regenerates a missing file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from foundation.atomic_io import atomic_write_text


def write_rows(path: str | os.PathLike, rows: Iterable[dict]) -> Path:
    """Replace ``path`` with ``rows``, one ``json.dumps(row)`` per line (the parent directory is created)."""
    path = Path(path)
    atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in rows))
    return path


def read_rows(path: str | os.PathLike, regenerate: str = "") -> list[dict]:
    """The rows of ``path`` (blank lines skipped); a missing file raises ``FileNotFoundError`` naming
    ``regenerate`` (the command or call that writes it)."""
    path = Path(path)
    if not path.is_file():
        hint = f"; regenerate it with {regenerate}" if regenerate else ""
        raise FileNotFoundError(f"{path} is missing{hint}")
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


__all__ = ["read_rows", "write_rows"]
