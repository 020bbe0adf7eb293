"""Video samples: filmstrips for grids and reports, and files (GIF always, MP4 with the video extra).

A decoded video batch is float (B, F, 3, H, W) in [0, 1] (``Policy.sample_kind == "video"``; the reward contract,
docs/rewards.md; checked by ``foundation.images.check_video``). ``filmstrip`` lays frames side by side as one image per
video, which is what ``Policy.preview`` returns for video families, so image grids, the run report's before/after
grids and ``scripts/evaluate.py`` show videos unchanged. ``write_video`` writes one video's files, as
``scripts/sample.py`` does per prompt:

    <stem>.gif        animated GIF (Pillow; always)
    <stem>.mp4        H.264 MP4 when PyAV is installed (``pip install "ddpo_grpo[video]"``; even sizes padded)
    <stem>.png        the filmstrip
"""

from __future__ import annotations

from pathlib import Path

import torch

from foundation.images import check_video

#: frames per second of written videos (Wan's 16 fps)
DEFAULT_FPS = 16
#: frames a filmstrip shows at most (evenly spaced, first and last included)
FILMSTRIP_FRAMES = 8


def frame_indices(frames: int, count: int = FILMSTRIP_FRAMES) -> list[int]:
    """``count`` evenly spaced frame indices of ``frames`` (all of them when there are no more), first and last kept."""
    if frames <= count:
        return list(range(frames))
    return [round(i * (frames - 1) / (count - 1)) for i in range(count)]


def filmstrip(videos: torch.Tensor, count: int = FILMSTRIP_FRAMES) -> torch.Tensor:
    """Videos (B, F, 3, H, W) -> images (B, 3, H, k·W): k evenly spaced frames side by side."""
    videos = check_video(videos)
    picked = videos[:, frame_indices(videos.shape[1], count)]  # [B, k, 3, H, W]
    return torch.cat(picked.unbind(1), dim=-1)  # [B, 3, H, k·W]


def _uint8_frames(video: torch.Tensor):
    """One video (F, 3, H, W) in [0, 1] -> uint8 array (F, H, W, 3)."""
    return (video.detach().float().clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()


def write_gif(video: torch.Tensor, path: str | Path, fps: int = DEFAULT_FPS) -> None:
    """An animated, looping GIF of one video (F, 3, H, W) in [0, 1]."""
    from PIL import Image

    frames = [Image.fromarray(a) for a in _uint8_frames(video)]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=max(1, round(1000 / fps)), loop=0)


def mp4_available() -> bool:
    """True when PyAV (the optional video extra) is installed."""
    try:
        import av  # noqa: F401
    except ImportError:
        return False
    return True


def write_mp4(video: torch.Tensor, path: str | Path, fps: int = DEFAULT_FPS) -> None:
    """An H.264 MP4 (yuv420p; odd sizes padded by one black row / column) of one video (F, 3, H, W) in [0, 1]."""
    import av
    import numpy as np

    frames = _uint8_frames(video)  # [F, H, W, 3]
    f, h, w, _ = frames.shape
    frames = np.pad(frames, ((0, 0), (0, h % 2), (0, w % 2), (0, 0)))
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=int(fps))
        stream.width, stream.height, stream.pix_fmt = w + w % 2, h + h % 2, "yuv420p"
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def write_video(video: torch.Tensor, out: str | Path, stem: str, fps: int = DEFAULT_FPS) -> dict[str, str]:
    """Write ``<stem>.gif``, ``<stem>.png`` (filmstrip) and, with PyAV, ``<stem>.mp4`` under ``out``; return the index
    row's file fields ({"file": the MP4 if written else the GIF, "gif", "png"})."""
    from foundation.images import to_pil

    out = Path(out)
    write_gif(video, out / f"{stem}.gif", fps)
    to_pil(filmstrip(video[None]))[0].save(out / f"{stem}.png")
    files = {"gif": f"{stem}.gif", "png": f"{stem}.png"}
    if mp4_available():
        write_mp4(video, out / f"{stem}.mp4", fps)
        return {"file": f"{stem}.mp4", **files}
    return {"file": f"{stem}.gif", **files}
