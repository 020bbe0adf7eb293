"""Paths of the models shipped inside the package (loadable offline with plain diffusers).

SHAPES_SD3: the ShapesWorld base model in SD3 architecture (StableDiffusion3Pipeline, two CLIP text
encoders, no T5; 2.9M parameters, 12 MB), trained from seed 0 by `scripts/pretrain_shapes.py` with its
defaults (≈ 40 min on one CPU thread). Load it with
`StableDiffusion3Pipeline.from_pretrained(SHAPES_SD3, text_encoder_3=None, tokenizer_3=None)`, or
use it as `pretrained.model`.

SHAPES_SD: the same world in SD architecture (StableDiffusionPipeline: UNet2DConditionModel + DDIM,
one CLIP text encoder; the SD3 model's VAE and tokenizer, its text encoder's first two layers), trained
from seed 0 by `scripts/pretrain_shapes.py --arch sd` on top of SHAPES_SD3. Load it with
`StableDiffusionPipeline.from_pretrained(SHAPES_SD)`.
"""

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
SHAPES_SD3 = str(DATA / "shapes_sd3")
SHAPES_SD = str(DATA / "shapes_sd")
