"""Health ranges of a language-model run (ddpo_grpo/health.py, docs/metrics.md): one warning line the first time an
epoch's metrics leave a range, naming the metric, its value, the range and the remedy; nothing for other families."""

import re
from types import SimpleNamespace

import pytest

from ddpo_grpo.health import RANGES, HealthCheck, for_run

HEALTHY = {
    "train/kl": 0.01,
    "train/clipfrac": 0.02,
    "train/entropy": 1.5,
    "response/truncated_frac": 0.05,
    "adv/frac_zero_std": 0.3,
    "train/sampler_logp_gap_max": 1e-6,
}


def test_every_documented_range_is_in_the_docs_table():
    from tests.conftest import REPO

    text = (REPO / "docs" / "metrics.md").read_text()
    for r in RANGES:
        assert f"`{r.key}`" in text, r.key


def test_healthy_metrics_warn_nothing():
    check = HealthCheck(out=SimpleNamespace(write=lambda s: None, flush=lambda: None))
    assert all(check.check(epoch, HEALTHY) == [] for epoch in range(3))


@pytest.mark.parametrize(
    "key, value, shown",
    [
        ("train/kl", 0.4, r"\[-inf, 0.1\]: .*raise train.beta"),
        ("train/clipfrac", 0.35, r"\[-inf, 0.2\]: .*lower train.learning_rate"),
        ("train/entropy", 0.4, r"\[0.5, inf\] \(0.333x its first value 1.5\): .*collapsed.*raise sample.temperature"),
        ("response/truncated_frac", 0.6, r"\[-inf, 0.3\]: .*raise sample.max_response_length"),
        ("adv/frac_zero_std", 0.95, r"\[-inf, 0.9\]: .*raise sample.group_size"),
        ("train/sampler_logp_gap_max", 0.01, r"\[-inf, 0.001\]: .*cache"),
    ],
)
def test_leaving_a_range_warns_once_with_value_range_and_remedy(key, value, shown, capsys):
    check = HealthCheck()
    assert check.check(0, HEALTHY) == []
    lines = check.check(1, {**HEALTHY, key: value})
    assert len(lines) == 1 and re.fullmatch(rf"warning: epoch 1: {key}={value:.4g} outside {shown}.*", lines[0])
    assert check.check(2, {**HEALTHY, key: value}) == []  # warned once, not every epoch
    assert capsys.readouterr().err.splitlines() == lines  # one line, on stderr


def test_entropy_growth_is_relative_to_the_first_epoch():
    check = HealthCheck(main=False)
    assert check.check(0, {"train/entropy": 0.5}) == []
    assert check.check(1, {"train/entropy": 1.4}) == []  # < 3 × 0.5
    (line,) = check.check(2, {"train/entropy": 1.6})
    assert "train/entropy=1.6 outside [-inf, 1.5] (3x its first value 0.5)" in line


def test_the_sampler_gap_is_checked_in_full_precision_only_and_missing_metrics_are_skipped():
    gap = {"train/sampler_logp_gap_max": 0.01}
    assert HealthCheck(full_precision=False, main=False).check(0, gap) == []
    assert len(HealthCheck(main=False).check(0, gap)) == 1
    assert HealthCheck(main=False).check(0, {"train/kl": float("nan"), "other": 5.0}) == []


def test_only_language_model_runs_are_checked():
    config = SimpleNamespace(mixed_precision="no")
    assert for_run(config, SimpleNamespace(sample_kind="image"), True) is None
    assert for_run(config, SimpleNamespace(sample_kind="motion"), True) is None
    assert isinstance(for_run(config, SimpleNamespace(sample_kind="text"), True), HealthCheck)


def test_a_language_model_run_that_leaves_a_range_prints_one_warning_line(tmp_path, capsys):
    """Responses cut at 2 tokens by a random tiny model: most never reach EOS (response/truncated_frac > 0.3)."""
    from tests.lm_kit import build_tiny_lm
    from tests.test_language_model import run_train

    model = build_tiny_lm(tmp_path / "model")
    done = run_train(
        tmp_path,
        model,
        "--config.sample.max_response_length=2",
        "--config.num_epochs=1",
        "--config.sample.num_batches_per_epoch=1",
        "--config.train.gradient_accumulation_steps=1",
    )
    out = capsys.readouterr()
    assert done == 0, out.err[-3000:]
    warned = [line for line in (out.out + out.err).splitlines() if line.startswith("warning: epoch")]
    assert len(warned) == 1, warned
    assert re.fullmatch(
        r"warning: epoch 0: response/truncated_frac=[0-9.]+ outside \[-inf, 0.3\]: .*raise sample.max_response_length.*",
        warned[0],
    )
