"""The GRPO epoch loop: sample → rewards → advantages → K inner epochs over the STORED transitions.

One epoch, phase by phase (each a method below):
1. ``sample_phase``  every process samples sample.num_batches_per_epoch batches of sample.batch_size
                   images with the current policy, recording each transition's log-prob (rollout.py),
                   and scores each batch with the reward plug-ins as soon as it is decoded.
2. ``advantage_phase`` rewards are gathered from all processes, turned into group-relative advantages
                   by the per-prompt stat tracker (advantages.py), and each process keeps its slice.
3. ``train_phase``   train.num_inner_epochs passes over the stored transitions: samples shuffled, split
                   into minibatches of train.batch_size; for each minibatch and each of its K trained
                   steps: recompute the log-prob of the stored x_{j+1}, ratio against the stored one,
                   clipped surrogate (+ β·KL to the reference), backward (one step at a time);
                   optimizer step every train.gradient_accumulation_steps minibatches, after
                   grad-norm clipping. Between inner epochs, stop when mean approx-KL > kl_threshold.
4. bookkeeping     reference update, metrics.jsonl, image grid, atomic checkpoint.
After the last epoch the result is exported to <run>/final/ (LoRA in diffusers format, or a pipeline).

Everything random is derived from (config.seed, epoch, process, batch, …), so a resumed run replays
exactly what an uninterrupted one would have done.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from ddpo_grpo import checkpoint as ckpt
from ddpo_grpo.advantages import RewardAdvantages, group_keys
from ddpo_grpo.config_checks import check_inputs, validate
from ddpo_grpo.errors import ConfigError, RewardError
from ddpo_grpo.evaluation import Evaluator, evaluate, every
from ddpo_grpo.guard import DegenerateEpochs, FiniteGuard
from ddpo_grpo.logging_utils import MetricsLogger
from ddpo_grpo.policies import FINAL_MANIFEST, build_policy, canonical_model, load_pipeline, policy_settings
from ddpo_grpo.probe import PairedProbe
from ddpo_grpo.prompts import PromptSampler, load_prompts
from ddpo_grpo.reference import Reference
from ddpo_grpo.report import RunReport
from ddpo_grpo.rollout import Rollout, StepPlan, sample_rollout
from ddpo_grpo.schedules import loss_weights
from ddpo_grpo.seeding import derive_seed
from ddpo_grpo.supervised import SupervisedTerm, rows_of
from ddpo_grpo.updates import Stats, UpdateContext, make_update
from ddpo_grpo.weights import EMA, LaggingSampler, trainable_parameters

WEIGHT_DTYPES = {"no": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
GRAD_NORM_WINDOW = 20  # optimizer steps whose median gradient norm sets the relative clip (train.grad_norm_ratio)
GRAD_NORM_MIN_HISTORY = 5  # no relative clip before this many steps


class Trainer:
    def __init__(self, config, accelerator=None):
        from accelerate import Accelerator

        from ddpo_grpo.config_checks import deprecations

        self.config = config
        world = int(os.environ.get("WORLD_SIZE", "1"))
        self.totals = validate(config, world)
        check_inputs(config)  # before any model is loaded and before the run directory exists
        if int(os.environ.get("RANK", "0")) == 0:
            for line in deprecations(config):
                print(line, flush=True)
        # torchrun / accelerate on a machine without GPUs: distributed CPU processes (gloo backend)
        cpu = world > 1 and not torch.cuda.is_available()
        self.acc = accelerator or Accelerator(mixed_precision=config.mixed_precision, cpu=cpu)
        if self.acc.num_processes != world:
            raise RuntimeError(
                f"launched as {world} processes (WORLD_SIZE) but accelerate set up {self.acc.num_processes}; "
                "on CPU-only machines launch with ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu ..."
            )
        self.main = self.acc.is_main_process
        self.rank = self.acc.process_index
        if config.allow_tf32 and torch.cuda.is_available():
            torch.backends.cuda.matmul.allow_tf32 = True
        self.guard = FiniteGuard(config.train.max_consecutive_skips)
        self.degenerate = DegenerateEpochs(config.train.max_degenerate_epochs)
        self._build_rewards()  # before the seed: a reward model's initialisation draws nothing the run uses
        self._setup_prompts()
        if not config.pretrained.model:
            self._tiny_builder()  # a ConfigError for an unknown pretrained.tiny, before the run directory exists
        torch.manual_seed(config.seed)

        self._setup_run_dir()
        self._setup_model()
        self._setup_optimizer()
        self._setup_data_and_rewards()
        self.start_epoch, self.global_step = 0, 0
        self.grad_norm_history, self.grad_clipped = [], 0
        if config.resume_from:
            self._resume(config.resume_from)
        self.logger = MetricsLogger(
            str(self.run_dir),
            tracker=config.logging.tracker,
            project=config.logging.project,
            run_name=self.run_dir.name,
            config=config.to_dict(),
            enabled=self.main,
            resume_epoch=self.start_epoch if config.resume_from else None,
        )
        if self.main and self.logger.superseded:
            print(
                f"metrics.jsonl: {self.logger.superseded} row(s) logged after the checkpoint (epochs this run "
                f"replays) moved to metrics.superseded.jsonl",
                flush=True,
            )
        self._print_startup()

    # ------------------------------------------------------------------ set-up
    def _setup_run_dir(self):
        cfg = self.config
        name = cfg.run_name
        if not name and cfg.resume_from:
            # continue in the run directory the checkpoint belongs to
            found = ckpt.find_checkpoint(cfg.resume_from)
            self.run_dir = Path(found).parent.parent
            return
        if not name:
            name = time.strftime("%Y.%m.%d_%H.%M.%S")
        if self.acc.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            name = broadcast_object_list([name])[0]
        self.run_dir = Path(cfg.logdir) / name
        if self.main:
            self.run_dir.mkdir(parents=True, exist_ok=True)

    def _tiny_builder(self):
        from ddpo_grpo import tiny

        builders = tiny.BUILDERS  # "sd3" | "sd" | "denoiser"
        if self.config.pretrained.tiny not in builders:
            raise ConfigError(
                f"pretrained.tiny={self.config.pretrained.tiny!r} must be one of {sorted(builders)} "
                "(used when pretrained.model is empty)"
            )
        return builders[self.config.pretrained.tiny]

    def _model_path(self) -> str:
        cfg = self.config
        if cfg.pretrained.model:
            return cfg.pretrained.model
        path = (Path(cfg.logdir) / "_tiny" / cfg.pretrained.tiny).resolve()
        if self.main and not (path / "model_index.json").is_file():
            with torch.random.fork_rng(devices=[]):  # its own RNG: building it leaves the run's random state alone
                self._tiny_builder()(path)
        self.acc.wait_for_everyone()
        return str(path)

    def _setup_model(self):
        cfg, t = self.config, self.config.train
        self.model_path = self._model_path()
        pipeline = load_pipeline(self.model_path)
        try:
            self.policy = build_policy(pipeline, policy_settings(pipeline, cfg.sample))
        except ValueError as exc:  # a kernel, noise level or resolution the family cannot take
            raise ConfigError(str(exc)) from exc
        weight_dtype = WEIGHT_DTYPES[cfg.mixed_precision]
        pipeline.to(self.acc.device)
        for module in self.policy.frozen_modules():
            module.requires_grad_(False)
            module.eval()
            if weight_dtype != torch.float32:
                module.to(dtype=weight_dtype)
        denoiser = self.policy.denoiser
        if t.use_lora:
            if weight_dtype != torch.float32:
                denoiser.to(dtype=weight_dtype)
            self.policy.add_lora(
                rank=t.lora_rank, alpha=t.lora_alpha, target_modules=t.lora_target_modules, dropout=t.lora_dropout
            )
        else:
            denoiser.requires_grad_(True)
        if cfg.pretrained.init_from:
            self._init_from(cfg.pretrained.init_from, denoiser)
        self.params = trainable_parameters(denoiser)
        for p in self.params.values():
            p.data = p.data.float()  # trainable weights (and their optimizer state) in float32
        self.ema = EMA(self.params, t.ema_decay) if t.ema else None
        self.sampler = None  # the forward objectives' lagging sampling policy (train.sampler_decay_*)
        if t.sampler_decay_rate > 0:
            self.sampler = LaggingSampler(
                self.params, rate=t.sampler_decay_rate, max_decay=t.sampler_decay_max, flat=t.sampler_decay_flat
            )
        self.reference = None
        if t.beta > 0:
            self.reference = Reference(
                self.policy,
                denoiser,
                lora=t.use_lora,
                update=t.reference_update,
                freq=t.reference_update_freq,
                alpha=t.reference_mix_alpha,
            )

    def _init_from(self, path: str, denoiser) -> None:
        """Start from a checkpoint's trainable weights (another run's, e.g. of a supervised warm-up), reporting
        missing and unexpected keys; a mismatch is refused unless pretrained.init_strict is False."""
        loaded = ckpt.load_latest(path, log=lambda line: print(line, flush=True) if self.main else None)
        try:
            report = ckpt.load_state_dict_checked(
                denoiser,
                loaded["tensors"]["model"],
                strict=self.config.pretrained.init_strict,
                source=f"pretrained.init_from checkpoint {loaded['path']}",
            )
        except ValueError as exc:
            raise ConfigError(f"{exc} (set pretrained.init_strict=False)") from exc
        if self.main:
            print(
                f"initialised from {loaded['path']}: {len(report['loaded'])} tensors loaded, "
                f"{len(report['missing'])} missing, {len(report['unexpected'])} unexpected, "
                f"{len(report['mismatched'])} of another shape",
                flush=True,
            )

    def _setup_optimizer(self):
        t = self.config.train
        if t.optimizer == "sgd":
            optimizer = torch.optim.SGD(list(self.params.values()), lr=t.learning_rate, momentum=t.sgd_momentum)
        else:
            optimizer = torch.optim.AdamW(
                list(self.params.values()),
                lr=t.learning_rate,
                betas=(t.adam_beta1, t.adam_beta2),
                weight_decay=t.adam_weight_decay,
                eps=t.adam_epsilon,
            )
        self.model, self.optimizer = self.acc.prepare(self.policy.denoiser, optimizer)

    def _build_rewards(self):
        """The training reward (reward.fns) and, with eval.freq, the evaluation reward; RewardError if one fails."""
        from reward_models import build_reward

        cfg = self.config
        try:
            self.reward = build_reward(
                dict(cfg.reward.fns), {k: dict(v) for k, v in cfg.reward.kwargs.items()}, dict(cfg.reward.sources)
            )
            self.eval_reward = self._eval_reward() if cfg.eval.freq else None
        except RewardError:
            raise
        except (ValueError, TypeError, RuntimeError, OSError) as exc:
            raise RewardError(f"building the rewards failed: {exc}") from exc

    def _setup_prompts(self):
        cfg = self.config
        self.rows = load_prompts(cfg.prompts.source)
        try:
            self.prompt_sampler = PromptSampler(self.rows, seed=cfg.seed, stratify_by=cfg.prompts.stratify_by)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc

    def _setup_data_and_rewards(self):
        cfg = self.config
        t = cfg.train
        self.tracker = RewardAdvantages(
            self.reward.weights,
            cfg.reward.aggregation,
            mode=t.adv_mode,
            buffer_size=t.adv_buffer_size,
            min_count=t.adv_min_count,
            ema_decay=t.adv_ema_decay,
            clip=t.adv_clip_max if t.adv_clip_max > 0 else None,
        )
        s = cfg.sample
        self.plan = StepPlan(
            window_size=s.sde_window_size,
            window_range=tuple(s.sde_window_range) if s.sde_window_range is not None else None,
            fraction=t.timestep_fraction,
            selection=t.timestep_selection,
        )
        self.noise_level = self.policy.noise_level
        if self.noise_level <= 0 and s.share_group_noise:
            raise ConfigError(
                "sample.noise_level=0 with sample.share_group_noise: deterministic sampling from one shared "
                "initial noise makes every member of a group the same image (no advantage); turn one of them off"
            )
        if self.noise_level <= 0 and t.objective == "grpo":
            raise ConfigError(
                f"sample.noise_level={self.noise_level}: with no noise every sampling step is deterministic "
                f"and there is no transition to train; set sample.noise_level > 0 (kernel {self.policy.kernel!r})"
            )
        ctx = UpdateContext(
            config=cfg,
            policy=self.policy,
            model=self.model,
            acc=self.acc,
            params=self.params,
            reference=self.reference,
            autocast=self.autocast,
            rank=self.rank,
            sampler=self.sampler,
        )
        self.update = make_update(ctx)
        self.supervised = SupervisedTerm(ctx) if t.sup_weight > 0 else None
        self.evaluator = Evaluator(cfg, self.eval_reward) if cfg.eval.freq else None
        p = cfg.probe
        self.probe = (
            PairedProbe(
                self.run_dir, self.prompt_sampler, num_prompts=p.prompts, group_size=p.group_size, seed=cfg.seed
            )
            if p.freq
            else None
        )
        report_rows = self.evaluator.rows if self.evaluator is not None else self.rows
        self.report = RunReport(
            self.run_dir,
            [report_rows[i % len(report_rows)] for i in range(cfg.logging.num_images)],
            self.policy.preview,
            group_by=cfg.eval.group_by,
        )
        self._reward_pool = None
        if cfg.reward.num_workers > 0:
            from concurrent.futures import ThreadPoolExecutor

            self._reward_pool = ThreadPoolExecutor(cfg.reward.num_workers, thread_name_prefix="reward")

    def _eval_reward(self):
        """The evaluation reward: eval.reward (a name, or an alias of reward.sources) with eval.reward_kwargs;
        "" = the first training reward with its reward.kwargs."""
        from reward_models import load_reward

        r, e = self.config.reward, self.config.eval
        name = e.reward or next(iter(r.fns))
        kwargs = dict(e.reward_kwargs) if e.reward else dict(r.kwargs.get(name, {}))
        return load_reward(r.sources.get(name, name), **kwargs)

    def _print_startup(self):
        if not self.main:
            return
        lines = [f"run directory: {self.run_dir}", f"model: {self.model_path} ({type(self.policy).__name__})"]
        lines += [f"{k}: {v}" for k, v in self.totals.items()]
        lines.append(f"trainable parameters: {sum(p.numel() for p in self.params.values()):,}")
        if self.config.expected_minutes:
            lines.append(
                f"expected duration: about {self.config.expected_minutes:.0f} min on a free 2-core CPU "
                "(more on a busy or slower machine: OMP_NUM_THREADS=1 then); --config.num_epochs trades "
                "time for gain"
            )
        print("\n".join(lines), flush=True)

    def autocast(self):
        return self.acc.autocast()

    # ------------------------------------------------------------------ phase 1: sampling + rewards
    def epoch_items(self, epoch: int) -> tuple[list[dict], list[tuple[int, int]]]:
        """The epoch's prompt rows (same on every process) and this process's (group, member) items.

        Groups are laid out contiguously in a global list of images_per_epoch items, and process r takes
        the r-th contiguous slice, so a group may span batches and processes.
        """
        s = self.config.sample
        rows = self.prompt_sampler.draw(epoch, self.totals["prompts_per_epoch"])
        items = [(g, m) for g in range(len(rows)) for m in range(s.group_size)]
        n = self.totals["samples_per_process"]
        return rows, items[self.rank * n : (self.rank + 1) * n]

    def sample_phase(self, epoch: int):
        """Sample every batch; score batch b (in reward.num_workers threads) while batch b+1 is sampled."""
        cfg, s = self.config, self.config.sample
        rows, items = self.epoch_items(epoch)
        rollouts, pending = [], []
        batches = range(s.num_batches_per_epoch)
        timing = {"sample": 0.0, "reward": 0.0}
        for b in self._progress(batches, f"epoch {epoch}: sampling"):
            batch = items[b * s.batch_size : (b + 1) * s.batch_size]
            seeds = [
                derive_seed(cfg.seed, epoch, g) if s.share_group_noise else derive_seed(cfg.seed, epoch, g, m)
                for g, m in batch
            ]
            generator = torch.Generator(self.acc.device).manual_seed(derive_seed(cfg.seed, epoch, self.rank, b, 1))
            rng = np.random.default_rng(derive_seed(cfg.seed, epoch, self.rank, b, 2))
            start = time.perf_counter()
            with self.sampler.applied() if self.sampler is not None else contextlib.nullcontext():
                rollout = self._rollout([rows[g] for g, _ in batch], seeds, generator, rng)
            timing["sample"] += time.perf_counter() - start
            rollouts.append(rollout)
            pending.append(self._score(rollout))
        start = time.perf_counter()
        scores = [p.result() if hasattr(p, "result") else p for p in pending]  # batch order, whatever finished first
        timing["reward"] += time.perf_counter() - start  # time spent waiting for rewards after sampling
        per_reward = {name: np.concatenate([sc[name] for sc in scores]) for name in self.reward.names}
        return Rollout.cat(rollouts), per_reward, timing

    def _rollout(self, rows, seeds, generator, rng) -> Rollout:
        """One batch of ``rows`` through the training sampler (sample.*) with the weights the model holds."""
        s = self.config.sample
        return sample_rollout(
            self.policy,
            self.policy.denoiser,
            rows,
            seeds=seeds,
            num_steps=s.num_steps,
            guidance_scale=s.guidance_scale,
            noise_level=self.noise_level,
            plan=self.plan,
            generator=generator,
            rng=rng,
            negative_prompt=s.negative_prompt,
            autocast=self.autocast,
        )

    def _score(self, rollout: Rollout):
        """Reward scores of one batch: a Future when reward.num_workers > 0, else the scores themselves."""
        samples = rollout.samples.cpu()
        if self._reward_pool is None:
            return self.reward(samples, rollout.prompts, rollout.metadata)[0]
        return self._reward_pool.submit(lambda: self.reward(samples, rollout.prompts, rollout.metadata)[0])

    # ------------------------------------------------------------------ phase 2: advantages
    def _gather(self, values: np.ndarray) -> np.ndarray:
        tensor = torch.as_tensor(values, dtype=torch.float32, device=self.acc.device)
        return self.acc.gather(tensor).cpu().numpy()

    def advantage_phase(self, epoch: int, per_reward: dict[str, np.ndarray]):
        """Group-relative advantages over ALL processes' samples; returns this process's slice [n]."""
        rows, _ = self.epoch_items(epoch)
        all_per_reward = {name: self._gather(v) for name, v in per_reward.items()}  # process-major = global order
        combined = self.reward.combine(all_per_reward)  # [N]
        s = self.config.sample
        # a prompt group is one row: its prompt, or its id where rows share a prompt (image-conditioned data)
        ids = [str(r.get("id", r["prompt"])) for r in rows]
        keys = group_keys(ids, s.group_size, self.config.train.adv_mode, s.share_group_noise)
        advantages, adv_stats = self.tracker(keys[: len(combined)], all_per_reward, combined)
        stats = dict(self.reward.stats(all_per_reward, combined))
        stats.update(adv_stats)
        stats["reward/frac_nan"] = float(np.isnan(combined).mean())
        group_by = self.config.eval.group_by
        if group_by:  # the training reward per value of the prompt rows' group field (e.g. per task)
            labels = [rows[i // s.group_size].get(group_by) for i in range(len(combined))]
            for label in dict.fromkeys(x for x in labels if x is not None):
                mine = np.asarray([x == label for x in labels])
                stats[f"reward/{group_by}/{label}"] = float(np.nanmean(combined[mine]))
        # an epoch that teaches nothing (all rewards NaN, all groups flat: every advantage 0): warned once,
        # stopped after train.max_degenerate_epochs in a row
        stats["train/degenerate_epoch"] = int(self.degenerate.check(epoch, all_per_reward, combined, stats))
        n = self.totals["samples_per_process"]
        mine = torch.as_tensor(advantages[self.rank * n : (self.rank + 1) * n], device=self.acc.device)
        return mine, stats

    # ------------------------------------------------------------------ phase 3: training
    def train_phase(
        self, epoch: int, rollout: Rollout, advantages: torch.Tensor, lam_sup: float = 0.0, lam_pg: float = 1.0
    ) -> dict:
        """train.num_inner_epochs passes over this process's samples in shuffled minibatches; the updater of
        train.objective (updates.py) back-propagates each minibatch; an optimizer step every
        train.gradient_accumulation_steps minibatches; stop early when the mean approx-KL to the sampling
        policy (per sample) exceeds train.kl_threshold."""
        cfg, t = self.config, self.config.train
        n, mb = len(rollout), t.batch_size
        stats = Stats()
        grad_norms, mismatch, inner_run = [], float("nan"), 0
        self.guard.start_epoch()
        self.grad_clipped = 0
        self.update.prepare(epoch, rollout, advantages)
        self.update.pg_weight = lam_pg
        # eval mode for the transition objective: the recomputed log-probs must be the sampler's (no dropout)
        self.model.train(t.objective != "grpo")
        for inner in range(t.num_inner_epochs):
            gen = torch.Generator().manual_seed(derive_seed(cfg.seed, epoch, self.rank, inner, 3))
            perm = torch.randperm(n, generator=gen)
            shuffled, adv = rollout.select(perm), advantages[perm.to(advantages.device)]
            if t.shuffle_steps:
                shuffled = _shuffle_steps(shuffled, gen)
            inner_stats = Stats()
            num_minibatches = n // mb
            for i in self._progress(
                range(num_minibatches), f"epoch {epoch}: training {inner + 1}/{t.num_inner_epochs}"
            ):
                idx = torch.arange(i * mb, (i + 1) * mb)
                sync = (i + 1) % t.gradient_accumulation_steps == 0
                first = inner == 0 and i == 0  # before any update: the on-policy check
                if self.supervised is not None and lam_sup > 0:  # first: the objective's last backward syncs
                    rows_mb = rows_of(shuffled.select(idx))
                    self.supervised.backward(rows_mb, lam_sup=lam_sup, epoch=epoch, sync=False, stats=stats)
                diff = self.update.minibatch(
                    shuffled.select(idx),
                    adv[idx.to(adv.device)],
                    perm[idx],
                    sync=sync,
                    stats=stats,
                    inner=inner_stats,
                    check=first,
                )
                if first:
                    mismatch = diff
                if sync:
                    grad_norms.append(self._optimizer_step(epoch))
            inner_run += 1
            approx_kl = self._reduce_mean(inner_stats.mean("approx_kl"))
            if t.kl_threshold > 0 and approx_kl > t.kl_threshold and inner + 1 < t.num_inner_epochs:
                break
        self.model.eval()
        out = {
            "train/loss": stats.mean("loss"),
            "train/policy_loss": stats.mean("policy_loss"),
            "train/kl": stats.mean("kl") if self.reference is not None else float("nan"),
            "train/approx_kl": stats.mean("approx_kl"),
            "train/clipfrac": stats.mean("clipfrac"),
            "train/ratio_mean": stats.mean("ratio"),
            "train/grad_norm": float(np.mean([g for g in grad_norms if np.isfinite(g)] or [np.nan])),
        }
        if t.objective != "grpo":
            out["train/matching_loss"] = stats.mean("matching_loss")
            if t.objective == "nft":
                out["train/drift"] = stats.mean("drift")
        out = {k: self._reduce_mean(v) for k, v in out.items()}
        out["train/logp_mismatch"] = self._reduce_max(mismatch)
        out["train/inner_epochs_run"] = inner_run
        out["train/skipped_steps"] = self.guard.skipped
        out["train/grad_clipped"] = self.grad_clipped
        out["train/skipped_samples"] = self._reduce_sum(self.update.skipped)
        out["train/lr"] = self.optimizer.param_groups[0]["lr"]
        out.update(self._supervised_metrics(stats))
        return out

    def supervised_phase(self, epoch: int, lam_sup: float) -> dict:
        """An epoch of the supervised term alone (λ_pg = 0): the epoch's rows of this process, shuffled, in
        minibatches of train.batch_size, train.num_inner_epochs passes, an optimizer step every
        train.gradient_accumulation_steps minibatches. No sampling, rewards or advantages."""
        cfg, t = self.config, self.config.train
        rows, items = self.epoch_items(epoch)
        mine = [rows[g] for g, _ in items]
        stats, grad_norms = Stats(), []
        self.guard.start_epoch()
        self.model.train()
        for inner in range(t.num_inner_epochs):
            gen = torch.Generator().manual_seed(derive_seed(cfg.seed, epoch, self.rank, inner, 3))
            order = torch.randperm(len(mine), generator=gen).tolist()
            for i in range(len(mine) // t.batch_size):
                batch = [mine[j] for j in order[i * t.batch_size : (i + 1) * t.batch_size]]
                sync = (i + 1) % t.gradient_accumulation_steps == 0
                self.supervised.backward(batch, lam_sup=lam_sup, epoch=epoch, sync=sync, stats=stats)
                if sync:
                    grad_norms.append(self._optimizer_step(epoch))
        self.model.eval()
        out = {
            "train/grad_norm": float(np.mean([g for g in grad_norms if np.isfinite(g)] or [np.nan])),
            "train/skipped_steps": self.guard.skipped,
            "train/lr": self.optimizer.param_groups[0]["lr"],
        }
        out.update(self._supervised_metrics(stats))
        return out

    def _supervised_metrics(self, stats: Stats) -> dict:
        if self.supervised is None:
            return {}
        out = {
            "train/sup_loss": self._reduce_mean(stats.mean("sup_loss")),
            "train/sup_skipped": self._reduce_sum(self.supervised.skipped),
        }
        if self.config.train.consistency_weight > 0:
            out["train/consistency_loss"] = self._reduce_mean(stats.mean("consistency_loss"))
        self.supervised.skipped = 0
        return out

    def _optimizer_step(self, epoch: int) -> float:
        """Clip and apply the accumulated gradient, or skip it when it is not finite (guard.py)."""
        t = self.config.train
        if t.warmup_steps > 0:
            scale = min(1.0, (self.global_step + 1) / t.warmup_steps)
            for group in self.optimizer.param_groups:
                group["lr"] = t.learning_rate * scale
        cap = t.max_grad_norm  # absolute, and relative to the recent norms (spikes): see config/base.py
        recent = self.grad_norm_history[-GRAD_NORM_WINDOW:]
        if t.grad_norm_ratio > 0 and len(recent) >= GRAD_NORM_MIN_HISTORY:
            cap = min(cap, t.grad_norm_ratio * float(np.median(recent)))
        norm = float(self.acc.clip_grad_norm_(list(self.params.values()), cap))
        if not self.guard.allow(norm, epoch):  # the same norm on every process: all skip together
            self.optimizer.zero_grad(set_to_none=True)
            return norm
        self.grad_clipped += norm > cap
        self.grad_norm_history.append(norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.guard.check_weights(self.params, epoch)
        self.global_step += 1
        if self.ema is not None:
            self.ema.update()
        return norm

    def _reduce_mean(self, value: float) -> float:
        if self.acc.num_processes == 1:
            return float(value)
        tensor = torch.tensor([value], dtype=torch.float32, device=self.acc.device)
        gathered = self.acc.gather(tensor)
        return float(torch.nanmean(gathered))

    def _reduce_sum(self, value: float) -> float:
        if self.acc.num_processes == 1:
            return float(value)
        tensor = torch.tensor([value], dtype=torch.float32, device=self.acc.device)
        return float(self.acc.gather(tensor).sum())

    def _reduce_max(self, value: float) -> float:
        if self.acc.num_processes == 1:
            return float(value)
        tensor = torch.tensor([value], dtype=torch.float32, device=self.acc.device)
        return float(self.acc.gather(tensor).max())

    # ------------------------------------------------------------------ the loop
    def run(self) -> Path:
        cfg = self.config
        if self.start_epoch == 0:
            self.record_before()
        metrics, epoch_times = {}, []
        for epoch in range(self.start_epoch, cfg.num_epochs):
            epoch_start = time.perf_counter()
            lam_sup, lam_pg = loss_weights(epoch, cfg) if self.supervised is not None else (0.0, 1.0)
            if lam_pg > 0:
                rollout, per_reward, timing = self.sample_phase(epoch)
                advantages, metrics = self.advantage_phase(epoch, per_reward)
                start = time.perf_counter()
                metrics.update(self.train_phase(epoch, rollout, advantages, lam_sup=lam_sup, lam_pg=lam_pg))
            else:  # the staged schedule's supervised-only epochs: no sampling
                timing, start = {}, time.perf_counter()
                metrics = self.supervised_phase(epoch, lam_sup)
            timing["train"] = time.perf_counter() - start
            if self.supervised is not None:
                metrics.update({"train/lambda_sup": lam_sup, "train/lambda_pg": lam_pg})
            if self.reference is not None:
                self.reference.after_epoch(epoch)
            if self.sampler is not None:
                metrics["train/sampler_decay"] = self.sampler.update(self.global_step)
            last = epoch == cfg.num_epochs - 1
            if self.evaluator is not None and self.evaluator.due(epoch, last):
                start = time.perf_counter()
                metrics.update(self.evaluate())
                timing["eval"] = time.perf_counter() - start
            if self.probe is not None and every(epoch, cfg.probe.freq, last):
                start = time.perf_counter()
                metrics.update(self.measure_probe())
                timing["probe"] = time.perf_counter() - start
            metrics.update({f"perf/{k}_s": v for k, v in timing.items()})
            metrics["perf/epoch_s"] = time.perf_counter() - epoch_start
            metrics["progress/images_seen"] = (epoch + 1) * self.totals["images_per_epoch"]
            self.logger.log(metrics, epoch=epoch, global_step=self.global_step)
            if self.main:
                epoch_times.append(metrics["perf/epoch_s"])
                left = (cfg.num_epochs - epoch - 1) * float(np.median(epoch_times))
                print(_summary(epoch, metrics) + f" (about {_duration(left)} to go)", flush=True)
            if every(epoch, cfg.logging.image_freq, last) and self.main:
                self.report.log_grid(self.sample_fixed, self.logger, epoch=epoch, global_step=self.global_step)
            if every(epoch, cfg.save_freq, last):
                self.save_checkpoint(epoch)
        final = self.export_final()
        if self.main:
            self.report.finish(self.sample_fixed, metrics)
        self.logger.close()
        if self._reward_pool is not None:
            self._reward_pool.shutdown()
        return final

    # ------------------------------------------------------------------ images, checkpoints, export
    def _weights_for_eval(self):
        return self.ema.applied() if self.ema is not None else contextlib.nullcontext()

    def sample_fixed(self, rows, reward=None, **kwargs):
        """Deterministic samples (ODE / DDIM η=0, sample.eval_num_steps, seeds from eval.seed) of ``rows``,
        with the EMA weights when train.ema, scored by ``reward`` when given: ``evaluation.evaluate``'s
        (metrics, samples, captions). The callable the evaluation and report hooks are handed."""
        cfg, s = self.config, self.config.sample
        with self._weights_for_eval():
            return evaluate(
                self.policy,
                rows,
                reward,
                num_steps=s.eval_num_steps,
                guidance_scale=s.guidance_scale,
                seed=cfg.eval.seed,
                batch_size=s.batch_size,
                negative_prompt=s.negative_prompt,
                autocast=self.autocast,
                **kwargs,
            )

    def _probe_sample(self, rows, seeds, generator, rng):
        """Samples of ``rows`` with the training sampler (current weights), for the paired probe."""
        return self._rollout(rows, seeds, generator, rng).samples.cpu()

    def _probe_score(self, samples, rows):
        prompts = [r["prompt"] for r in rows]
        metadata = [{k: v for k, v in r.items() if k != "prompt"} for r in rows]
        return self.reward.combine(self.reward(samples, prompts, metadata)[0])

    def measure_probe(self) -> dict:
        """probe/* metrics (main process; the others wait). Before the first update it records the baseline."""
        metrics = {}
        if self.main:
            rewards = self.probe.measure(
                self._probe_sample, self._probe_score, self.config.sample.batch_size, self.acc.device
            )
            if self.probe.before is None:
                self.probe.record_before(rewards)
            metrics = self.probe.metrics(rewards)
        self.acc.wait_for_everyone()
        return metrics

    def evaluate(self) -> dict:
        """eval/* metrics of the evaluation hook, computed by the main process (the others wait)."""
        metrics = self.evaluator(self.sample_fixed) if self.main else {}
        self.acc.wait_for_everyone()
        return metrics

    def record_before(self) -> None:
        """Before the first update: the evaluation (with eval.freq) and the report's fixed-prompt samples."""
        metrics = self.evaluate() if self.evaluator is not None else {}
        if self.probe is not None and self.probe.before is None:
            metrics.update(self.measure_probe())
        if self.main:
            self.report.before(self.sample_fixed, metrics)
        self.acc.wait_for_everyone()

    def save_checkpoint(self, epoch: int) -> None:
        self.acc.wait_for_everyone()
        if self.main:
            tensors = {"model": {k: p.detach().float().cpu() for k, p in self.params.items()}}
            if self.ema is not None:
                tensors["ema"] = self.ema.state_dict()
            if self.reference is not None and self.reference.state_dict():
                tensors["reference"] = self.reference.state_dict()
            if self.sampler is not None:
                tensors["sampler"] = self.sampler.state_dict()
            state = {
                "epoch": epoch,
                "global_step": self.global_step,
                "tracker": self.tracker.state_dict(),
                "grad_norms": self.grad_norm_history[-GRAD_NORM_WINDOW:],
                "rng": ckpt.rng_state(),
                "config": json.loads(self.config.to_json()),
            }
            ckpt.save_checkpoint(
                self.run_dir,
                epoch,
                tensors=tensors,
                optimizer_state=self.optimizer.state_dict(),
                state=state,
                keep_last=self.config.num_checkpoint_limit or None,
            )
        self.acc.wait_for_everyone()

    def _resume(self, path: str) -> None:
        """Continue from the newest complete checkpoint under ``path`` (falling back past a corrupt one, logged)."""
        loaded = ckpt.load_latest(path, log=lambda line: print(line, flush=True) if self.main else None)
        found, state = loaded["path"], loaded["state"]
        self._check_resumable(loaded["tensors"]["model"], state.get("config", {}), found)
        with torch.no_grad():
            for name, p in self.params.items():
                p.copy_(loaded["tensors"]["model"][name].to(p.device))
        if loaded["optimizer_state"] is not None:
            self.optimizer.load_state_dict(loaded["optimizer_state"])
        if self.ema is not None and "ema" in loaded["tensors"]:
            self.ema.load_state_dict(loaded["tensors"]["ema"])
        if self.reference is not None and "reference" in loaded["tensors"]:
            self.reference.load_state_dict(loaded["tensors"]["reference"])
        if self.sampler is not None:  # a checkpoint of a run without one: the sampler starts from the weights
            saved = loaded["tensors"].get("sampler")
            self.sampler.load_state_dict(saved if saved is not None else loaded["tensors"]["model"])
        self.tracker.load_state_dict(state["tracker"])
        ckpt.set_rng_state(state["rng"])
        self.start_epoch, self.global_step = state["epoch"] + 1, state["global_step"]
        self.grad_norm_history = list(state.get("grad_norms", []))
        if self.main:
            print(f"resumed from {found} (continuing at epoch {self.start_epoch})", flush=True)

    def _check_resumable(self, weights: dict, saved: dict, found: Path) -> None:
        """ConfigError explaining a checkpoint whose trainable weights do not fit this model."""
        missing = sorted(set(self.params) - set(weights))
        unexpected = sorted(set(weights) - set(self.params))
        shapes = [k for k in self.params if k in weights and tuple(weights[k].shape) != tuple(self.params[k].shape)]
        if not (missing or unexpected or shapes):
            return
        fields = ("train.use_lora", "train.lora_rank", "train.lora_target_modules", "pretrained.model")
        differ = []
        for field in fields:
            section, key = field.split(".")
            before, now = saved.get(section, {}).get(key), self.config[section][key]
            if before is not None and _plain(before) != _plain(now):
                differ.append(f"{field}={now!r} (the checkpoint's run: {before!r})")
        detail = (
            f"{len(missing)} trainable weights missing (e.g. {missing[:1]}), {len(unexpected)} unexpected, "
            f"{len(shapes)} of another shape"
            + (
                f" (e.g. {shapes[0]}: {tuple(weights[shapes[0]].shape)} saved, "
                f"{tuple(self.params[shapes[0]].shape)} now)"
                if shapes
                else ""
            )
        )
        fix = (
            ("; ".join(differ) + ": resume with the checkpoint's values")
            if differ
            else ("check train.use_lora / train.lora_rank / pretrained.model against the resumed run")
        )
        raise ConfigError(f"resume_from: checkpoint {found} does not fit this model: {detail}. {fix}")

    def export_final(self) -> Path:
        """Write <run>/final/ atomically: LoRA weights (diffusers format) or a full pipeline."""
        final = self.run_dir / "final"
        self.acc.wait_for_everyone()
        self.guard.check_weights(self.params, self.config.num_epochs - 1)  # never export non-finite weights
        if self.ema is not None:
            self.guard.check_weights(self.ema.shadow, self.config.num_epochs - 1)
        if self.main:
            tmp = self.run_dir / f".tmp-final-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            with self._weights_for_eval():
                if self.config.train.use_lora:
                    self.policy.save_lora(tmp, self.policy.denoiser)
                    manifest = {"kind": "lora", "base_model": canonical_model(self.model_path)}
                else:
                    self.policy.save_pipeline(tmp)
                    manifest = {"kind": "full"}
            manifest["pipeline_class"] = type(self.policy.pipeline).__name__
            manifest["sampling"] = self.sampling_settings()
            (tmp / FINAL_MANIFEST).write_text(json.dumps(manifest, indent=2))
            old = self.run_dir / f".old-final-{os.getpid()}"
            if final.exists():
                final.rename(old)
            tmp.rename(final)
            shutil.rmtree(old, ignore_errors=True)
            print(f"final model written to {final}", flush=True)
        self.acc.wait_for_everyone()
        return final

    def sampling_settings(self) -> dict:
        """How this run evaluates (and scripts/sample.py / evaluate.py sample its output by default)."""
        s = self.config.sample
        return {
            "num_steps": s.eval_num_steps,
            "guidance_scale": s.guidance_scale,
            "max_sequence_length": s.max_sequence_length,
            "resolution": self.policy.resolution,
            "kernel": self.policy.kernel,
            "negative_prompt": s.negative_prompt,
            "image_guidance_scale": s.image_guidance_scale,
            "train_num_steps": s.num_steps,
            "noise_level": self.policy.noise_level,
        }

    def _progress(self, iterable, desc: str):
        if not (self.main and self.config.logging.progress):
            return iterable
        from tqdm.auto import tqdm

        return tqdm(iterable, desc=desc, leave=False)


def _plain(value):
    """A config value in comparable form (tuples and lists alike)."""
    return list(value) if isinstance(value, (list, tuple)) else value


def _shuffle_steps(rollout: Rollout, gen: torch.Generator) -> Rollout:
    """Permute each sample's trained steps independently (the validity mask moves with them)."""
    b, k = rollout.train_steps.shape
    order = torch.argsort(torch.rand(b, k, generator=gen), dim=1).to(rollout.train_steps.device)
    rollout.train_steps = torch.gather(rollout.train_steps, 1, order)
    rollout.train_mask = torch.gather(rollout.train_mask, 1, order)
    return rollout


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _summary(epoch: int, m: dict) -> str:
    keys = [
        "reward/mean",
        "reward/std",
        "probe/diff",
        "train/approx_kl",
        "train/clipfrac",
        "train/logp_mismatch",
        "perf/epoch_s",
    ]
    parts = [f"{k.split('/', 1)[1]}={m[k]:.4g}" for k in keys if k in m and m[k] == m[k]]
    return f"epoch {epoch}: " + " ".join(parts)
