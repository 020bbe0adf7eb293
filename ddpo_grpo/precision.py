"""The weight dtype of each ``mixed_precision`` setting ("no" = float32), shared by the run's wiring and the
memory planner."""

import torch

#: config.mixed_precision -> the dtype frozen weights are loaded in (and LoRA-trained weights computed in)
WEIGHT_DTYPES = {"no": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
