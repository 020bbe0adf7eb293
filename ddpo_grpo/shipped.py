"""Paths of the models shipped inside the package (loadable offline with plain diffusers).

SHAPES_SD3: the ShapesWorld base model in SD3 architecture (StableDiffusion3Pipeline, two CLIP text
encoders, no T5; 2.9M parameters, 12 MB), trained from seed 0 by `scripts/pretrain_shapes.py` with its
defaults (≈ 40 min on one CPU thread). Load it with
`StableDiffusion3Pipeline.from_pretrained(SHAPES_SD3, text_encoder_3=None, tokenizer_3=None)`, or
use it as `pretrained.model`.
"""

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
SHAPES_SD3 = str(DATA / "shapes_sd3")
