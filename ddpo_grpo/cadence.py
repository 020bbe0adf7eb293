"""When a periodic action runs: saving checkpoints, evaluating, probing, logging sample grids.

Every such action has a frequency ``freq`` in epochs (``save_freq``, ``eval.freq``, ``probe.freq``,
``logging.image_freq``) and one rule, :func:`every`.
"""


def every(epoch: int, freq: int, last: bool) -> bool:
    """Whether an "every ``freq`` epochs" action runs after ``epoch`` (0-based): after epochs freq − 1,
    2·freq − 1, … and after the last one; never when freq is 0. So with eval.freq = 8 the evaluations
    follow 8, 16, … epochs of training, and the untrained model is the run's "before" evaluation."""
    return bool(freq) and ((epoch + 1) % freq == 0 or last)
