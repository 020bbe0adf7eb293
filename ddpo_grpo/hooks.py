"""What the epoch loop hands its deterministic sampler to: held-out evaluation, the paired probe, the run report.

``RunHooks`` holds the three hooks (each optional but the report) and the sampler they share, ``sample_fixed``:
deterministic samples (ODE / DDIM η = 0, ``sample.eval_num_steps`` steps, seeds from ``eval.seed``) with the EMA
weights when ``train.ema``. Evaluation and probe run on the main process (the others wait at a barrier, so every
process leaves a hook together) — except with a sharded denoiser (``everyone``), whose every forward is a
collective: then every process draws the same samples and only the main one scores, writes and logs.
"""

from __future__ import annotations

import contextlib
import time

from ddpo_grpo.cadence import every
from ddpo_grpo.evaluation import evaluate
from ddpo_grpo.memory import resident


class RunHooks:
    """evaluator: ``heldout.HeldOut`` or None; probe: ``probe.PairedProbe`` or None; report: ``report.RunReport``.

    probe_sample(rows, seeds, generator, rng) -> samples: the training sampler (current weights);
    probe_score(samples, rows) -> the combined training reward [n]."""

    def __init__(
        self,
        config,
        policy,
        acc,
        *,
        evaluator,
        probe,
        report,
        ema,
        probe_sample,
        probe_score,
        everyone=False,
        frozen=(),
    ):
        self.config, self.policy, self.acc = config, policy, acc
        self.evaluator, self.probe, self.report, self.ema = evaluator, probe, report, ema
        self.probe_sample, self.probe_score = probe_sample, probe_score
        self.main, self.everyone = acc.is_main_process, everyone  # everyone: a sharded denoiser (module docstring)
        self.frozen = list(frozen)  # sample.offload_encoders: the encoders and VAE, brought to the device to sample

    # ---- the deterministic sampler ----------------------------------------------------------------
    def weights(self):
        """The weights evaluations and exports use: the EMA's when train.ema, else the trained ones."""
        return self.ema.applied() if self.ema is not None else contextlib.nullcontext()

    def resident(self):
        """The offloaded encoders and VAE on the device (sample.offload_encoders; nothing moves otherwise)."""
        return resident(self.frozen, self.acc.device, enabled=bool(self.frozen))

    def sample_fixed(self, rows, reward=None, **kwargs):
        """``evaluation.evaluate``'s (metrics, samples, captions) of ``rows`` with the run's settings."""
        cfg, s = self.config, self.config.sample
        with self.weights(), self.resident():
            return evaluate(
                self.policy,
                rows,
                reward,
                num_steps=s.eval_num_steps,
                guidance_scale=s.guidance_scale,
                seed=cfg.eval.seed,
                batch_size=s.batch_size,
                negative_prompt=s.negative_prompt,
                autocast=self.acc.autocast,
                **kwargs,
            )

    # ---- the hooks --------------------------------------------------------------------------------
    def evaluate(self) -> dict:
        """eval/* metrics of the evaluation hook (main process; the others wait)."""
        metrics = self.evaluator(self.sample_fixed) if self.main or self.everyone else {}
        if self.main and self.evaluator.warning:
            print(self.evaluator.warning, flush=True)  # the hacking warning (heldout.py)
        self.acc.wait_for_everyone()
        return metrics if self.main else {}

    def measure_probe(self) -> dict:
        """probe/* metrics (main process; the others wait). Before the first update it records the baseline."""
        metrics = {}
        if self.main or self.everyone:
            with self.resident():
                rewards = self.probe.measure(
                    self.probe_sample, self.probe_score, self.config.sample.batch_size, self.acc.device
                )
            if self.main and self.probe.before is None:
                self.probe.record_before(rewards)
            metrics = self.probe.metrics(rewards) if self.probe.before is not None else {}
        self.acc.wait_for_everyone()
        return metrics if self.main else {}

    def before(self) -> None:
        """Before the first update: the evaluation, the probe's baseline and the report's fixed-prompt samples."""
        metrics = self.evaluate() if self.evaluator is not None else {}
        if self.probe is not None and self.probe.before is None:
            metrics.update(self.measure_probe())
        if self.main:
            self.report.before(self.sample_fixed, metrics)
        elif self.everyone:
            self.sample_fixed(self.report.rows)  # the main process's report samples: the same collectives
        self.acc.wait_for_everyone()

    def after_epoch(self, epoch: int, timing: dict) -> dict:
        """The evaluation and probe metrics due after ``epoch`` (their wall times into ``timing``)."""
        metrics = {}
        last = epoch == self.config.num_epochs - 1
        if self.evaluator is not None and self.evaluator.due(epoch, last):
            start = time.perf_counter()
            metrics.update(self.evaluate())
            timing["eval"] = time.perf_counter() - start
        if self.probe is not None and every(epoch, self.config.probe.freq, last):
            start = time.perf_counter()
            metrics.update(self.measure_probe())
            timing["probe"] = time.perf_counter() - start
        return metrics

    def grid(self, epoch: int, logger, global_step: int) -> None:
        """The fixed prompts' samples after ``epoch`` when logging.image_freq says so (main process)."""
        last = epoch == self.config.num_epochs - 1
        if not every(epoch, self.config.logging.image_freq, last):
            return
        if self.main:
            self.report.log_grid(self.sample_fixed, logger, epoch=epoch, global_step=global_step)
        elif self.everyone:
            self.sample_fixed(self.report.rows)

    def finish(self, last_metrics: dict) -> None:
        """The report after the last epoch (main process)."""
        if self.main:
            self.report.finish(self.sample_fixed, last_metrics)
            if self.evaluator is not None and self.evaluator.tables:
                print("held-out, paired with the untrained model (same prompts and noise):", flush=True)
                print(self.evaluator.report(), flush=True)
        elif self.everyone and self.report.has_before():
            self.sample_fixed(self.report.rows)
