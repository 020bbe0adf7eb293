"""What a run reports: the evaluation, paired-probe and report hooks, and the metrics logger."""

from __future__ import annotations

from pathlib import Path

from ddpo_grpo.wiring.process import sharded


def build_hooks(
    config, run_dir: Path, acc, policy, *, scorers, reward, rows, prompt_sampler, ema, probe_sample, frozen
):
    """The ``hooks.RunHooks`` of the run: held-out evaluation (eval.freq), paired probe (probe.freq), run report."""
    from ddpo_grpo.heldout import HeldOut
    from ddpo_grpo.hooks import RunHooks
    from ddpo_grpo.probe import PairedProbe
    from ddpo_grpo.prompts import split_rows
    from ddpo_grpo.report import RunReport, pick_rows

    def training(samples, prompts, metadata):  # the training reward as a reward fn of the contract
        return reward.combine(reward(samples, prompts, metadata)[0]), {}

    evaluator = None
    if config.eval.freq:
        evaluator = HeldOut(config, scorers, training, reward.names, run_dir, write=acc.is_main_process)
    p = config.probe
    probe = None
    if p.freq:
        probe = PairedProbe(run_dir, prompt_sampler, num_prompts=p.prompts, group_size=p.group_size, seed=config.seed)
    report_rows = evaluator.rows if evaluator is not None else rows
    report_class = RunReport
    if policy.sample_kind == "text":  # a language model's responses (text_report.py)
        from ddpo_grpo.text_report import TextReport as report_class
    report = report_class(
        run_dir,
        pick_rows(report_rows, config.logging.num_images, config.eval.group_by),
        policy.preview,
        group_by=config.eval.group_by,
        scorers=scorers,
    )
    return RunHooks(
        config,
        policy,
        acc,
        evaluator=evaluator,
        probe=probe,
        report=report,
        ema=ema,
        probe_sample=probe_sample,
        probe_score=lambda samples, rows: training(samples, *split_rows(rows))[0],
        everyone=sharded(config, acc),
        frozen=frozen,
    )


def metrics_logger(config, run_dir: Path, acc, resume_epoch, log):
    """The run's MetricsLogger (metrics.jsonl and the tracker); rows a resumed run replays are moved aside."""
    from ddpo_grpo.metrics_log import MetricsLogger

    logger = MetricsLogger(
        str(run_dir),
        tracker=config.logging.tracker,
        project=config.logging.project,
        run_name=run_dir.name,
        config=config.to_dict(),
        enabled=acc.is_main_process,
        resume_epoch=resume_epoch,
    )
    if logger.superseded:
        log(
            f"metrics.jsonl: {logger.superseded} row(s) logged after the checkpoint (epochs this run replays) "
            "moved to metrics.superseded.jsonl"
        )
    return logger
