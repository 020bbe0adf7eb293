"""Files replaced atomically: a reader (or a crash) sees the previous version or the new one, never half of one.

The new content goes to a temporary file in the target's own directory (same file system, so the final
``os.replace`` is a rename), is flushed and fsynced, then moved over the target. The temporary file is removed if
anything fails, and the previous version stays in place. The file gets the mode a plain ``open`` would give it (the
replaced file's, or 0666 less the umask), not the private 0600 of a temporary file.

* :func:`atomic_write`: bytes;
* :func:`atomic_write_text`: text (UTF-8);
* :func:`replacing`: a context manager yielding a temporary path for writers that want a path of their own
  (``safetensors.save_file``, ``PIL.Image.save``, ``matplotlib``'s ``savefig``, ``np.save``).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; when the block ends without an exception the file written there
    (fsynced) replaces ``path``. The parent directory is created if missing. The temporary name keeps the target's
    suffix, so writers that choose a format by extension choose the same one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    tmp = Path(name)
    tmp.chmod(path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask())  # mkstemp's 0600 is not ours
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` with ``data`` (never half-written)."""
    with replacing(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Replace ``path`` with ``text`` encoded as UTF-8 (never half-written)."""
    atomic_write(path, text.encode("utf-8"))
