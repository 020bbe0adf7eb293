"""The tiny variant every family config offers (``config/<family>.py:tiny``): the family's tiny offline pipeline
(``ddpo_grpo.tiny``, built under <logdir>/_tiny/<name> on first use), 32 px, 4 steps, one batch of 2 samples (a group
of 2) per epoch, LoRA r = 4, the dense ``redness`` reward (images and videos), no tracker. Image-conditioned families
read the ShapesWorld edit rows (``shapes_edit_train``: each row has a ``source_image``); video families sample 5
frames. Seconds per epoch on a CPU: what the tests and smoke runs use.
"""

from config.base import get_config as base_config


def tiny_family(name: str, *, image_conditioned: bool = False, video: bool = False, max_sequence_length: int = 64):
    """The tiny variant of pipeline ``name`` (a ``ddpo_grpo.tiny.BUILDERS`` key)."""
    config = base_config()
    config.num_epochs = 2
    config.pretrained.model = ""
    config.pretrained.tiny = name
    s = config.sample
    s.resolution, s.num_steps, s.eval_num_steps, s.max_sequence_length = 32, 4, 4, max_sequence_length
    s.batch_size, s.group_size, s.num_batches_per_epoch = 2, 2, 1
    s.guidance_scale = 1.0
    s.num_frames = 5 if video else 0
    t = config.train
    t.batch_size, t.learning_rate, t.lora_rank, t.lora_alpha = 2, 3e-3, 4, 4.0
    config.reward.fns = {"redness": 1.0}
    if image_conditioned:
        config.prompts.source = "shapes_edit_train"
    config.logging.tracker, config.logging.image_freq = "none", 0
    return config
