"""ShapesWorld image-to-image: restoration and instruction editing on ShapesWorld renders.

The specification is ``worlds/shapes_i2i/README.md``; the package is its executable form:

* :mod:`.scenes` — scenes as rows, captions, renders, placement;
* :mod:`.restore` — degraded / clean pairs (kinds and levels, the fixed instruction);
* :mod:`.edit` — edit types, instructions, targets, what an edit preserves;
* :mod:`.judge` — the ShapesWorld judge on the target plus a preservation score;
* :mod:`.data` — the shipped splits, their images, the prompt sources;
* :mod:`.reward` — the ``edit`` and ``shapes_i2i`` rewards;
* :mod:`.pretrain` — the InstructPix2Pix-architecture model's recipe on the core pretraining loop;
* ``models/ip2p`` — the shipped model (:data:`SHAPES_IP2P`).
"""

from pathlib import Path

#: the shipped InstructPix2Pix-architecture model (``StableDiffusionInstructPix2PixPipeline``)
SHAPES_IP2P = str(Path(__file__).resolve().parent / "models" / "ip2p")

__all__ = ["SHAPES_IP2P"]
