"""The epoch loop: sample → reward → advantages → update → log / checkpoint.

One epoch, phase by phase (each a method below; the parts they use are built once by ``wiring.build_run``):
1. ``sample_phase``     every process draws its share of the epoch's prompt groups and samples them in
                        sample.num_batches_per_epoch batches with the current policy (the lagging sampler's
                        weights when configured), recording every transition with its log-prob (rollout.py);
                        each batch is handed to the reward plug-ins as soon as it is decoded. Returns the
                        ``Epoch``: rows, this process's items, the rollouts, pending scores. With
                        sample.dynamic_sampling_rounds, more rounds while any process lacks groups with
                        reward spread (``sampled_epoch``, dynamic_sampling.py).
2. ``reward_phase``     waits for the scores (batch order, whatever finished first).
3. ``advantage_phase``  gathers every process's scores, weights them (``MultiReward.combine``), groups the
                        samples and turns the scores into group-relative advantages (advantages.py); keeps this
                        process's slice.
4. ``update_phase``     hands the samples and their advantages to the update loop (inner_loop.py), which returns
                        what it did: train.num_inner_epochs passes in minibatches, each back-propagated by the
                        objective's updater (updates.py), the supervised term mixed in on its schedule, one
                        optimizer step (optim.py) every gradient_accumulation_steps minibatches, the KL early stop
                        between passes. Epochs of the staged schedule with λ_pg = 0 run ``supervised_phase``
                        instead (the loop over the epoch's rows; no sampling).
5. ``finish_epoch``     reference and lagging-sampler updates, evaluation and probe hooks, metrics.jsonl, the
                        image grid, the atomic checkpoint (checkpoint/run_state.py).
After the last epoch ``final/`` is written (LoRA in diffusers' format, or the whole pipeline) and the report.

Everything random is derived from (config.seed, epoch, process, batch, …), so a resumed run replays
exactly what an uninterrupted one would have done.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path

import numpy as np
import torch

from ddpo_grpo import console, distributed, dynamic_sampling, health, planner, wiring
from ddpo_grpo.advantages import group_means, group_spread, sample_keys
from ddpo_grpo.cadence import every
from ddpo_grpo.checkpoint import final_manifest, list_checkpoints
from ddpo_grpo.epoch import Epoch
from ddpo_grpo.guard import TrainingStopped
from ddpo_grpo.inner_loop import objective_metrics, train_objective, train_supervised
from ddpo_grpo.memory import resident
from ddpo_grpo.run_dir import stopped_note
from ddpo_grpo.schedules import loss_weights
from ddpo_grpo.seeding import derive_seed


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during training: the epoch it stopped in and the run's last complete checkpoint (``cli.run_main``
    prints it with the resume command)."""

    def __init__(self, epoch: int, run_dir: Path):
        found = list_checkpoints(run_dir)
        last = f"the last checkpoint is {found[-1]}" if found else "no checkpoint was saved yet (resuming starts again)"
        super().__init__(f"interrupted at epoch {epoch}; {last}")
        self.epoch, self.run_dir = epoch, run_dir


class Trainer:
    """The epoch loop of the module docstring. Its attributes are the run's parts (``wiring.Parts`` says what each
    is), built once by ``wiring.build_run``; the phases read them."""

    def __init__(self, config, accelerator=None):
        self.config = config
        vars(self).update(vars(wiring.build_run(config, accelerator)))  # the parts, as attributes
        self.main, self.rank = self.acc.is_main_process, self.acc.process_index
        num_params = sum(p.numel() for p in self.params.values())
        for line in console.startup_lines(self.run_dir, self.model_path, self.policy, self.totals, num_params, config):
            self.log(line)
        plan = planner.startup_line(config, self.acc.num_processes, self.model_path, self.acc.device, self.main)
        if plan:  # the memory planner's line (ddpo_grpo/planner; None on other processes or when it cannot plan)
            self.log(plan)
        self.progress = console.progress(self.main and config.logging.progress)
        self.health = health.for_run(config, self.policy, self.main)  # a language model's health ranges (else None)

    def log(self, line: str) -> None:
        if self.acc.is_main_process:
            print(line, flush=True)

    def autocast(self):
        return self.acc.autocast()

    @property
    def global_step(self) -> int:
        return self.step.global_step

    @property
    def noise_level(self) -> float:
        return self.policy.noise_level

    # ------------------------------------------------------------------ the loop
    def run(self) -> Path:
        """Train from start_epoch to num_epochs, then export final/; a run that stops itself (guard.py) or is
        interrupted (Ctrl-C: ``Interrupted``) says where it left its state."""
        metrics, clock, epoch = {}, console.Clock(self.config.num_epochs), self.start_epoch
        try:
            if self.start_epoch == 0:
                self.hooks.before()
            for epoch in range(self.start_epoch, self.config.num_epochs):
                metrics = self.run_epoch(epoch, clock)
        except TrainingStopped as exc:
            raise TrainingStopped(f"{exc}. {stopped_note(self.run_dir)}") from exc
        except KeyboardInterrupt as exc:  # Ctrl-C: what was logged is flushed; checkpoints are atomic (never half)
            self.logger.close()
            if self.reward_pool is not None:
                self.reward_pool.shutdown(wait=False, cancel_futures=True)
            raise Interrupted(epoch, self.run_dir) from exc
        final = self.export_final()
        self.hooks.finish(metrics)
        self.logger.close()
        if self.reward_pool is not None:
            self.reward_pool.shutdown()
        return final

    def run_epoch(self, epoch: int, clock) -> dict:
        """One epoch, phase by phase (the module docstring); its metrics."""
        cfg, start = self.config, time.perf_counter()
        lam_sup, lam_pg = loss_weights(epoch, cfg) if self.supervised is not None else (0.0, 1.0)
        if lam_pg > 0:
            ep, scores, timing, sampled = self.sampled_epoch(epoch)
            advantages, metrics = self.advantage_phase(ep, scores)
            metrics.update(sampled)
            metrics.update(
                {
                    k: distributed.reduce(self.acc, v, "max" if k.endswith("_max") else "mean")
                    for k, v in ep.rollout.metrics().items()
                }
            )
            with console.timed(timing, "train"):
                metrics.update(self.update_phase(ep, advantages, lam_sup=lam_sup, lam_pg=lam_pg))
        else:  # the staged schedule's supervised-only epochs: no sampling
            timing = {}
            with console.timed(timing, "train"):
                metrics = self.supervised_phase(epoch, lam_sup)
        if self.supervised is not None:
            metrics.update({"train/lambda_sup": lam_sup, "train/lambda_pg": lam_pg})
        metrics.update(self.finish_epoch(epoch, timing))
        metrics["perf/epoch_s"] = time.perf_counter() - start
        metrics["progress/images_seen"] = (epoch + 1) * self.totals["images_per_epoch"]
        if self.health is not None:
            self.health.check(epoch, metrics)
        self.logger.log(metrics, epoch=epoch, global_step=self.global_step)
        self.log(f"{console.summary(epoch, metrics)} ({clock.tick(epoch, metrics['perf/epoch_s'])})")
        self.hooks.grid(epoch, self.logger, self.global_step)
        if every(epoch, cfg.save_freq, epoch == cfg.num_epochs - 1):
            self.save_checkpoint(epoch)
        return metrics

    # ------------------------------------------------------------------ 1. sampling
    def epoch_rows(self, epoch: int, round_index: int = 0) -> Epoch:
        """The epoch's layout (epoch.py): its prompt rows (the same on every process) and this process's items; an
        extra round of dynamic sampling draws its own rows."""
        s = self.config.sample
        rows = self.prompt_sampler.draw(epoch, self.totals["prompts_per_epoch"], round_index)
        return Epoch.lay_out(
            epoch, rows, group_size=s.group_size, rank=self.rank, per_process=self.totals["samples_per_process"]
        )

    def sampled_epoch(self, epoch: int) -> tuple[Epoch, dict[str, np.ndarray], dict, dict]:
        """The sample and reward phases: (the epoch, this process's scores, timing, sample/* metrics). With
        sample.dynamic_sampling_rounds > 0, extra rounds until every process holds its share of groups with reward
        spread, and the epoch reduced to those (dynamic_sampling.py)."""

        def sample_round(round_index: int):
            ep, timing = self.sample_phase(epoch, round_index)
            return ep, self.reward_phase(ep, timing), timing

        s, images = self.config.sample, self.totals["images_per_epoch"]
        if not s.dynamic_sampling_rounds:
            return (*sample_round(0), {"sample/images": images})
        return dynamic_sampling.sample_rounds(
            sample_round,
            self.reward.combine,
            max_extra=s.dynamic_sampling_rounds,
            share=self.totals["samples_per_process"] // s.group_size,
            group_size=s.group_size,
            images_per_round=images,
            acc=self.acc,
            cat=self.rollout.cat,
        )

    def sample_phase(self, epoch: int, round_index: int = 0) -> tuple[Epoch, dict]:
        """Sample every batch; batch b is scored (in reward.num_workers threads) while batch b+1 is sampled. Round
        ``round_index`` > 0 (dynamic sampling) has its own rows and noise."""
        cfg, s = self.config, self.config.sample
        ep = self.epoch_rows(epoch, round_index)
        extra = dynamic_sampling.round_seed_parts(round_index)
        rollouts, pending, timing, conds = [], [], {"sample": 0.0}, self.encode_once(ep)
        with contextlib.ExitStack() as held:
            with console.timed(timing, "sample"):  # the sampling weights; a sharded model gathered once for all batches
                held.enter_context(self.sampler.applied() if self.sampler else contextlib.nullcontext())
                held.enter_context(self.rollout.gathered())
            for b in self.progress(range(s.num_batches_per_epoch), f"epoch {epoch}: sampling"):
                batch = ep.items[b * s.batch_size : (b + 1) * s.batch_size]
                seeds = [
                    derive_seed(cfg.seed, epoch, g, *extra)
                    if s.share_group_noise
                    else derive_seed(cfg.seed, epoch, g, m, *extra)
                    for g, m in batch
                ]
                generator = torch.Generator(self.acc.device).manual_seed(
                    derive_seed(cfg.seed, epoch, self.rank, b, 1, *extra)
                )
                rng = np.random.default_rng(derive_seed(cfg.seed, epoch, self.rank, b, 2, *extra))
                cond = {k: v[b * s.batch_size : (b + 1) * s.batch_size] for k, v in conds.items()} if conds else None
                with console.timed(timing, "sample"), resident(self.decoder, self.acc.device):
                    rollout = self.rollout([ep.rows[g] for g, _ in batch], seeds, generator, rng, cond)
                rollouts.append(rollout)
                pending.append(self.score(rollout))
        return dataclasses.replace(ep, rollout=self.rollout.cat(rollouts), pending=pending), timing

    def encode_once(self, ep: Epoch) -> dict:
        """With sample.offload_encoders: this process's conditions of the epoch, encoded at once with the encoders
        brought to the device for it ({} otherwise: each batch encodes its own)."""
        if not self.encoders:
            return {}
        with resident(self.encoders, self.acc.device), torch.no_grad(), self.autocast():
            return self.policy.encode_rows([ep.rows[g] for g, _ in ep.items], self.config.sample.negative_prompt)

    def score(self, rollout):
        """Reward scores of one batch: a Future when reward.num_workers > 0, else the scores themselves."""
        samples = rollout.reward_samples()
        if self.reward_pool is None:
            return self.reward(samples, rollout.prompts, rollout.metadata)[0]
        return self.reward_pool.submit(lambda: self.reward(samples, rollout.prompts, rollout.metadata)[0])

    # ------------------------------------------------------------------ 2. rewards
    def reward_phase(self, ep: Epoch, timing: dict) -> dict[str, np.ndarray]:
        """Scores of this process per reward [n], in batch order (time spent waiting: perf/reward_s)."""
        with console.timed(timing, "reward"):
            scores = [p.result() if hasattr(p, "result") else p for p in ep.pending]
        return {name: np.concatenate([sc[name] for sc in scores]) for name in self.reward.names}

    # ------------------------------------------------------------------ 3. advantages
    def advantage_phase(self, ep: Epoch, scores: dict[str, np.ndarray]) -> tuple[torch.Tensor, dict]:
        """Group-relative advantages over ALL processes' samples; returns this process's slice [n] and metrics."""
        s = self.config.sample
        every_score = {name: distributed.gather(self.acc, v) for name, v in scores.items()}  # global order
        combined = self.reward.combine(every_score)  # [N], the rewards weighted (once)
        stats = dict(self.reward.stats(every_score, combined))  # (reward/* before any KL penalty)
        penalty = ep.rollout.score_penalty()  # a language model's β·KL when train.kl_in_reward (else None)
        if penalty is not None:
            penalty = distributed.gather(self.acc, penalty)
            combined = combined - penalty[: len(combined)]
            stats["reward/kl_penalty"] = float(np.mean(penalty))
        keys = sample_keys(ep.rows, s.group_size, self.config.train.adv_mode, s.share_group_noise)  # [N]
        advantages, adv_stats = self.tracker(keys[: len(combined)], every_score, combined, self.reward.weights)
        stats.update(adv_stats)
        stats["reward/frac_nan"] = float(np.isnan(combined).mean())
        group_by = self.config.eval.group_by  # the training reward per value of the rows' group field (e.g. task)
        stats.update(group_means(combined, ep.rows, s.group_size, group_by) if group_by else {})
        stats.update(group_spread(combined, ep.rows, s.group_size, group_by))
        # an epoch that teaches nothing (all rewards NaN, all groups flat: every advantage 0): warned once,
        # stopped after train.max_degenerate_epochs in a row
        stats["train/degenerate_epoch"] = int(self.degenerate.check(ep.index, every_score, combined, stats))
        n = self.totals["samples_per_process"]
        mine = torch.as_tensor(advantages[self.rank * n : (self.rank + 1) * n], device=self.acc.device)
        return mine, stats

    # ------------------------------------------------------------------ 4. update
    def update_phase(self, ep: Epoch, advantages: torch.Tensor, lam_sup: float = 0.0, lam_pg: float = 1.0) -> dict:
        """The objective over this process's samples (the module docstring's phase 4); train/* metrics."""
        t = self.config.train
        # eval mode for the transition objective: the recomputed log-probs must be the sampler's (no dropout)
        self.model.train(t.objective != "grpo")
        with resident(self.encoders + self.decoder, self.acc.device, enabled=self.supervised is not None):
            out = train_objective(
                ep.rollout,
                advantages,
                self.loop,
                epoch=ep.index,
                update=self.update,
                step=self.step,
                acc=self.acc,
                supervised=self.supervised,
                lam_sup=lam_sup,
                lam_pg=lam_pg,
                progress=self.progress,
            )
        self.model.eval()
        metrics = objective_metrics(out, t.objective, self.reference is not None, self.acc)
        metrics.update(self.step.metrics())
        metrics.update(self.supervised.metrics(out, self.acc) if self.supervised else {})
        return metrics

    def supervised_phase(self, epoch: int, lam_sup: float) -> dict:
        """An epoch of the supervised term alone (λ_pg = 0): this process's rows of the epoch in shuffled
        minibatches, train.num_inner_epochs passes. No sampling, rewards or advantages."""
        ep = self.epoch_rows(epoch)
        mine = [ep.rows[g] for g, _ in ep.items]
        self.model.train()
        with resident(self.encoders + self.decoder, self.acc.device):
            out = train_supervised(
                mine,
                self.loop,
                epoch=epoch,
                supervised=self.supervised,
                lam_sup=lam_sup,
                step=self.step,
                acc=self.acc,
                progress=self.progress,
            )
        self.model.eval()
        metrics = {"train/grad_norm": out.grad_norm, **self.step.metrics()}
        metrics.pop("train/grad_clipped")
        metrics.update(self.supervised.metrics(out, self.acc))
        return metrics

    # ------------------------------------------------------------------ 5. after the update
    def finish_epoch(self, epoch: int, timing: dict) -> dict:
        """Reference and lagging-sampler updates, then the evaluation and probe hooks that are due; perf/* times."""
        metrics = {}
        if self.reference is not None:
            self.reference.after_epoch(epoch)
        if self.sampler is not None:
            metrics["train/sampler_decay"] = self.sampler.update(self.global_step)
        metrics.update(self.hooks.after_epoch(epoch, timing))
        metrics.update({f"perf/{k}_s": v for k, v in timing.items()})
        return metrics

    def save_checkpoint(self, epoch: int) -> None:
        self.acc.wait_for_everyone()
        if self.main or self.sharded:  # a sharded run: every process writes its shards
            self.state.save(epoch)
        self.acc.wait_for_everyone()

    def export_final(self) -> Path:
        """``<run>/final/``, written atomically by the main process: never from non-finite weights."""
        self.acc.wait_for_everyone()
        self.guard.check_weights(self.params, self.config.num_epochs - 1)
        if self.ema is not None:
            self.guard.check_weights(self.ema.shadow, self.config.num_epochs - 1)
        manifest = final_manifest(self.config, self.policy, self.model_path)
        final = self.state.export(self.policy, manifest, self.hooks.weights, main=self.main, base=self.model_path)
        self.log(f"final model written to {final}")
        self.acc.wait_for_everyone()
        return final
