"""The path policy: where a file path in request metadata may lead (``--data_root``), checked where the file opens."""

from __future__ import annotations

import os

from .limits import HTTPError


class ServerPathPolicy:
    """Where a file path in request metadata may lead; given to the reward via ``image_path_policy``.

    ``root=None`` refuses every path. Otherwise ``path`` is taken relative to ``root`` (a real path) and
    refused when it is absolute, has a ``..`` component, or its real path (symlinks resolved) is not inside
    ``root`` or not a regular file. The image must also fit the per-image limit and what is left of the
    request's pixel budget (``left``, read from its header). Messages name the field, never a path.
    """

    def __init__(self, root: str | None, max_pixels: int, left: int):
        self.root = root
        self.max_pixels = max_pixels
        self.left = left
        self.offset = 0  # index in the request of the first row of the chunk being scored

    def __call__(self, path: str, index: int, key: str) -> str:
        where = f"metadata[{self.offset + index}][{key!r}]"
        if self.root is None:
            raise HTTPError(
                400,
                f"{where}: file paths in metadata are refused by this server (it was started "
                "without --data_root); send the image itself as a nested (3, H, W) array",
            )
        if (
            not path
            or "\x00" in path
            or os.path.isabs(path)
            or path.startswith(("/", "\\"))
            or ".." in path.replace("\\", "/").split("/")
        ):
            raise HTTPError(
                400,
                f"{where}: only a relative path without '..' components, inside the server's data root, is accepted",
            )
        real = os.path.realpath(os.path.join(self.root, path))
        try:
            inside = os.path.commonpath([real, self.root]) == self.root
        except ValueError:
            inside = False
        if not inside:
            raise HTTPError(400, f"{where}: the path leads outside the server's data root (through a symlink)")
        if not os.path.isfile(real):
            raise HTTPError(400, f"{where}: no such image file in the server's data root")
        from PIL import Image

        try:
            with Image.open(real) as img:  # reads the header only
                w, h = img.size
        except Exception as exc:
            raise HTTPError(400, f"{where}: the file is not a readable image ({type(exc).__name__})") from None
        if w * h > min(self.max_pixels, self.left):
            limit = (
                "the server's limit per image" if w * h > self.max_pixels else "what is left of the request's budget"
            )
            raise HTTPError(413, f"{where}: the image has {w}x{h} pixels, more than {limit}")
        self.left -= w * h
        return real
