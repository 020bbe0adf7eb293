"""The pretraining loop every recipe shares; a :class:`Recipe` supplies models, stages, losses, data, evaluation.

A run is a sequence of stages (e.g. a VAE, then a denoiser), each with its own AdamW optimizer
(betas 0.9, 0.99). Step ``n`` (0-based) of a stage of ``N`` steps:

1. ``lr_n``: linear warm-up, then cosine down to ``min_lr_ratio · lr`` at ``n = N`` (:func:`lr_at`),
   times the optimizer group's lr scale;
2. ``losses = recipe.loss(stage, data)``: the recipe draws its batch from ``data`` (its
   :class:`TrainingData`, made once by ``recipe.make_data()``);
3. backward of ``losses["loss"]``, the stage's gradients clipped to global norm ``grad_clip``, AdamW step;
4. in stages with ``ema``: ``θ_ema ← d·θ_ema + (1 − d)·θ`` for every module of ``recipe.ema_modules``,
   ``d = min(ema_decay, (1 + n)/(10 + n))`` (:class:`ddpo_grpo.weights.EMA` with warm-up), so the
   average forgets the random initialisation quickly.

Logs (mean losses, grad norm, lr, speed; latent statistics; evaluations) go to
``<out>/pretrain_log.jsonl``. Every ``eval_every`` steps of an ``evaluate`` stage, and at the end,
:meth:`Pretrainer.evaluate` scores the EMA pipeline with the library's deterministic evaluation
(:func:`ddpo_grpo.evaluation.evaluate`) on the recipe's held-out rows (``eval_rows()``), with its
reward (``eval_reward()``), grouped by ``eval_group_by``. It forks torch's global RNG and draws
nothing from the training generators, so the training trajectory does not depend on whether or how
often it runs.

Checkpoints (``<out>/checkpoints/epoch_<global step>``) every ``ckpt_every`` steps and at the end of
each stage hold every recipe model, the EMA of each ``ema_modules`` entry (``ema_<name>``: its trained
parameters), the optimizer (none at the end of a stage: the next one starts its own), the data's state
(``data.state_dict()``: its RNG states), the latent statistics and the config: ``--resume`` continues
bit-exactly (same thread count). Finally the EMA pipeline is saved to ``<out>/final``, loaded back and
evaluated into ``final_eval.json``.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, ClassVar, Protocol

import torch

from ddpo_grpo.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint
from ddpo_grpo.image_grids import save_grid
from ddpo_grpo.pretraining.config import PretrainConfig, ResumeError, resumed_config
from ddpo_grpo.pretraining.stage import Stage
from ddpo_grpo.weights import EMA, trainable_parameters
from foundation.atomic_io import atomic_write

LOG_FILE = "pretrain_log.jsonl"
FINAL_DIR = "final"
FINAL_EVAL = "final_eval.json"
EVAL_SEED = 0  # initial-noise seeds of the evaluation: those of scripts/evaluate.py and sample.py --seed 0
GRID_PER_TASK = 8  # samples per group (one row each) in an evaluation's grid


class TrainingData(Protocol):
    """What a recipe's data object offers the loop: its random state, saved in every checkpoint.

    The recipe's ``loss`` draws batches from it however it likes; ``state_dict()`` must return JSON-able
    values that ``load_state_dict`` restores exactly (e.g. numpy ``bit_generator.state``, a torch
    generator's ``get_state().tolist()``), so that a resumed run draws the same batches.
    """

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class Recipe:
    """What a model family and its world supply to the loop.

    A subclass sets ``config_class`` and, in ``__init__(cfg)``, the attributes below (every random
    initialisation of ``models`` after ``torch.manual_seed(cfg.seed)``), and implements:

    * ``make_data() -> TrainingData``: the training data and its randomness (seeded from ``cfg.seed``);
    * ``loss(stage, data) -> {"loss": scalar to minimise, other scalars to log}``, one batch of ``stage``;
    * ``pipeline()``: the diffusers pipeline around the live modules (EMA weights while those are swapped in);
    * ``eval_rows()`` / ``eval_reward()``: the held-out prompt rows and the reward (of the contract,
      :mod:`reward_models.contract`) the evaluations score, grouped by ``eval_group_by``, headline metric
      ``eval_metric`` (``eval/<group_by>_mean/<metric>``);
    * ``policy_options()``: ``build_policy`` keyword arguments (image families: the resolution);
    * with a ``needs_latents`` stage: ``measure_latents(data) -> stats`` (the latent statistics of fresh
      data, applied) and ``set_latent_stats(stats)`` (apply measured or checkpointed statistics).
    """

    config_class: ClassVar[type[PretrainConfig]]
    eval_group_by: ClassVar[str] = "task"
    eval_metric: ClassVar[str] = "strict"
    cfg: PretrainConfig
    models: dict[str, torch.nn.Module]  # everything a checkpoint holds, one tensor file each
    ema_modules: tuple[str, ...]  # the models whose EMA is kept and exported
    stages: list[Stage]
    latent_stats: dict | None = None

    def make_data(self) -> TrainingData:
        raise NotImplementedError(f"{type(self).__name__} must implement make_data()")

    def loss(self, stage: str, data: Any) -> dict[str, torch.Tensor]:
        raise NotImplementedError(f"{type(self).__name__} must implement loss(stage, data)")

    def pipeline(self):
        raise NotImplementedError(f"{type(self).__name__} must implement pipeline()")

    def eval_rows(self) -> list[dict]:
        raise NotImplementedError(f"{type(self).__name__} must implement eval_rows()")

    def eval_reward(self):
        raise NotImplementedError(f"{type(self).__name__} must implement eval_reward()")

    def policy_options(self) -> dict:
        return {}

    def measure_latents(self, data: Any) -> dict:
        raise NotImplementedError(f"{type(self).__name__} has a needs_latents stage: implement measure_latents()")

    def set_latent_stats(self, stats: dict) -> None:
        self.latent_stats = stats


def lr_at(step: int, total: int, lr: float, warmup: int, min_ratio: float) -> float:
    """Linear warm-up for ``warmup`` steps, then cosine decay to ``min_ratio * lr`` at ``total``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


class Pretrainer:
    """The loop of the module docstring around one recipe, writing into ``out_dir``."""

    def __init__(self, recipe: Recipe, out_dir, log=print):
        self.recipe, self.cfg, self.log = recipe, recipe.cfg, log
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.data = recipe.make_data()
        self.ema = {
            k: EMA(trainable_parameters(recipe.models[k]), self.cfg.ema_decay, warmup=True) for k in recipe.ema_modules
        }
        self.total = sum(s.steps for s in recipe.stages)
        self.step = 0  # global: the stages' steps one after the other
        self.opt: torch.optim.Optimizer | None = None

    def locate(self) -> tuple[Stage, int]:
        """The stage of the next step and the steps done in it (the last stage once the run is done)."""
        start = 0
        for stage in self.recipe.stages[:-1]:
            if self.step < start + stage.steps:
                return stage, self.step - start
            start += stage.steps
        return self.recipe.stages[-1], self.step - start

    def _begin(self, stage: Stage) -> torch.optim.Optimizer:
        """Measure the latent statistics if the stage needs them, set train modes, return its optimizer."""
        models = self.recipe.models
        for m in models.values():
            m.eval()
        if stage.needs_latents and self.recipe.latent_stats is None:
            stats = self.recipe.measure_latents(self.data)
            self._write({"global_step": self.step, "stage": stage.name, **stats})
            self.log("latent stats: " + " ".join(f"{k}={v:.4f}" for k, v in stats.items()))
        for name in stage.modules:
            models[name].train()
        groups = [{"params": [p for n in names for p in models[n].parameters()]} for names, _ in stage.groups]
        return torch.optim.AdamW(groups, lr=stage.lr, betas=(0.9, 0.99), weight_decay=stage.weight_decay)

    def _write(self, rec: dict) -> None:
        with open(self.out / LOG_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")

    def train(self) -> Path:
        """Run the remaining steps, then :meth:`finish`; returns the final pipeline directory."""
        cfg = self.cfg
        self.log(self.describe())
        ran, t_log, acc = 0, time.time(), defaultdict(float)
        while self.step < self.total:
            stage, local = self.locate()
            if self.opt is None:
                self.opt = self._begin(stage)
            lr = lr_at(local, stage.steps, stage.lr, stage.warmup, cfg.min_lr_ratio)
            for group, (_, scale) in zip(self.opt.param_groups, stage.groups):
                group["lr"] = lr * scale
            out = self.recipe.loss(stage.name, self.data)
            self.opt.zero_grad(set_to_none=True)
            out["loss"].backward()
            params = [p for name in stage.modules for p in self.recipe.models[name].parameters()]
            gnorm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            self.opt.step()
            for ema in self.ema.values() if stage.ema else ():
                ema.update(local)
            self.step += 1
            for k, v in {**out, "grad_norm": gnorm}.items():
                acc[k] += float(v.detach())
            ran, done = ran + 1, local + 1 == stage.steps
            if self.step % cfg.log_every == 0 or done:
                speed = ran / (time.time() - t_log)
                self._write(
                    {
                        "global_step": self.step,
                        "stage": stage.name,
                        f"{stage.name}_step": local + 1,
                        "lr": lr,
                        **{k: round(v / ran, 5) for k, v in acc.items()},
                        "steps_per_s": round(speed, 3),
                    }
                )
                self.log(
                    f"[{stage.name}] step {local + 1}/{stage.steps} (global {self.step}/{self.total}) "
                    + " ".join(f"{k}={v / ran:.4f}" for k, v in acc.items())
                    + f" lr={lr:.2e} {speed:.2f} steps/s"
                )
                ran, t_log, acc = 0, time.time(), defaultdict(float)
            if done and stage is not self.recipe.stages[-1]:
                self.opt = None  # the next stage gets its own optimizer
            if stage.evaluate and cfg.eval_every and (local + 1) % cfg.eval_every == 0 and not done:
                t_eval = time.time()
                self.evaluate(cfg.eval_per_task, f"{stage.name}_step_{local + 1}")
                t_log += time.time() - t_eval  # keep steps/s about training only
            if self.step % cfg.ckpt_every == 0 or done:
                self.log(f"checkpoint {self.save()}")
        return self.finish()

    def describe(self) -> str:
        counts = {k: sum(p.numel() for p in m.parameters()) for k, m in self.recipe.models.items()}
        total = sum(counts.values())
        return (
            "params: "
            + ", ".join(f"{k}={v / 1e6:.3f}M" for k, v in counts.items())
            + f", total={total / 1e6:.3f}M (~{4 * total / 1e6:.1f} MB float32); stages: "
            + ", ".join(f"{s.name} {s.steps} steps ({'+'.join(s.modules)})" for s in self.recipe.stages)
            + f"; now at global step {self.step}/{self.total}"
        )

    def evaluate(self, per_task: int, tag: str, pipe=None) -> dict:
        """Score ``per_task`` deterministic samples per group of ``pipe`` (default: the EMA pipeline).

        The library's evaluation: noise-free sampling (flow ODE / DDIM η = 0 / the posterior-mean chain)
        from per-sample seeds, ``eval_steps`` steps, CFG ``eval_guidance``, the recipe's held-out rows and
        reward, groups ``eval_group_by``. Logs and returns one record (``eval/<metric>``,
        ``eval/<metric>/<group>``, ``eval/<group_by>_mean/<metric>``, ...) and saves ``samples/<tag>.png``
        (the policy's previews of up to 8 samples per group, a row each).
        """
        from ddpo_grpo.evaluation import evaluate
        from ddpo_grpo.policies import build_policy

        cfg, t0, models, recipe = self.cfg, time.time(), self.recipe.models, self.recipe
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.random.fork_rng(devices=[]))
            for m in models.values():
                stack.callback(m.train, m.training)
                m.eval()
            if pipe is None:
                for ema in self.ema.values():
                    stack.enter_context(ema.applied())
                pipe = recipe.pipeline()
            policy = build_policy(pipe, **recipe.policy_options())
            metrics, samples, captions = evaluate(
                policy,
                recipe.eval_rows(),
                recipe.eval_reward(),
                num_steps=cfg.eval_steps,
                guidance_scale=cfg.eval_guidance,
                per_group=per_task,
                group_by=recipe.eval_group_by,
                seed=EVAL_SEED,
            )
            shown = min(per_task, GRID_PER_TASK)
            keep = [g * per_task + j for g in range(len(samples) // per_task) for j in range(shown)]  # groups in order
            images = policy.preview(samples[keep])
        save_grid(images, [captions[i] for i in keep], str(self.out / "samples" / f"{tag}.png"), nrow=shown)
        stage, local = self.locate()
        rec = {
            "global_step": self.step,
            "stage": stage.name,
            f"{stage.name}_step": local,
            "eval": tag,
            **metrics,
            "eval/seconds": round(time.time() - t0, 1),
        }
        self._write(rec)
        metric, group_by = recipe.eval_metric, recipe.eval_group_by
        groups = " ".join(
            f"{k.rsplit('/', 1)[1]}={v:.2f}" for k, v in metrics.items() if k.startswith(f"eval/{metric}/")
        )
        headline = metrics.get(f"eval/{group_by}_mean/{metric}", metrics.get(f"eval/{metric}", math.nan))
        self.log(f"eval {tag}: {metric} {groups} {group_by}_mean={headline:.2f}")
        return rec

    def finish(self) -> Path:
        """Save the EMA pipeline to ``<out>/final``, load it back and evaluate it into ``final_eval.json``."""
        from ddpo_grpo.policies import load_pipeline

        final = self.out / FINAL_DIR
        with contextlib.ExitStack() as stack:
            for ema in self.ema.values():
                stack.enter_context(ema.applied())
            self.recipe.pipeline().save_pretrained(final, safe_serialization=True)
        size = sum(p.stat().st_size for p in final.rglob("*") if p.is_file())
        self.log(f"saved pipeline to {final} ({size / 1e6:.2f} MB)")
        pipe = load_pipeline(str(final))
        if self.cfg.final_eval_per_task:
            rec = self.evaluate(self.cfg.final_eval_per_task, "final", pipe=pipe)
            atomic_write(str(self.out / FINAL_EVAL), json.dumps(rec, indent=1).encode())
        return final

    def save(self) -> Path:
        tensors = {k: m.state_dict() for k, m in self.recipe.models.items()}
        tensors.update({f"ema_{k}": ema.state_dict() for k, ema in self.ema.items()})
        state = {
            "global_step": self.step,
            "stage": self.locate()[0].name,
            "config": self.cfg.to_dict(),
            "latent_stats": self.recipe.latent_stats,
            **self.data.state_dict(),
        }
        return save_checkpoint(
            self.out,
            self.step,
            tensors=tensors,
            state=state,
            keep_last=self.cfg.keep_last,
            optimizer_state=self.opt.state_dict() if self.opt is not None else None,
        )

    def restore(self, path) -> None:
        ck = load_checkpoint(path)
        st, tensors = ck["state"], ck["tensors"]
        missing = [s for s in [*self.recipe.models, *(f"ema_{k}" for k in self.ema)] if s not in tensors]
        if missing:
            raise ResumeError(f"{ck['path']} has no {missing} tensors: it is not a checkpoint of this architecture")
        for k, m in self.recipe.models.items():
            m.load_state_dict(tensors[k])
        for k, ema in self.ema.items():
            ema.load_state_dict(tensors[f"ema_{k}"])
        self.step = int(st["global_step"])
        self.data.load_state_dict(st)
        stats = st.get("latent_stats") or st.get("vae_stats")  # vae_stats: ShapesWorld SD3 checkpoints of ee0f2bd
        if stats:
            self.recipe.set_latent_stats(stats)
        stage, _ = self.locate()
        if ck["optimizer_state"] is not None and st.get("stage", stage.name) == stage.name:
            self.opt = self._begin(stage)
            self.opt.load_state_dict(ck["optimizer_state"])
        self.log(f"resumed from {ck['path']} at global step {self.step} ({stage.name} stage)")


def start(
    recipe_cls: type[Recipe],
    cfg: PretrainConfig,
    out_dir,
    resume: bool = False,
    log=print,
    overrides: dict | None = None,
) -> Pretrainer:
    """A new run of ``recipe_cls(cfg)`` in ``out_dir``, or (``resume``) the run there, from its newest checkpoint.

    A resumed run keeps its saved config, where ``overrides`` may change the ``RESUME_MUTABLE``
    fields (:func:`~ddpo_grpo.pretraining.config.resumed_config`).
    """
    out = Path(out_dir)
    existing = list_checkpoints(out)
    if existing and not resume:
        raise FileExistsError(
            f"{out} already has checkpoints (newest {existing[-1].name}); "
            "pass --resume to continue it or choose a new --out"
        )
    if not existing:
        if resume:
            log(f"--resume: no checkpoint in {out}, starting from scratch")
        trainer = Pretrainer(recipe_cls(cfg), out, log=log)
        atomic_write(str(out / "config.json"), json.dumps(cfg.to_dict(), indent=1).encode())
        return trainer
    saved = load_checkpoint(existing[-1])["state"]
    cfg, changed = resumed_config(recipe_cls.config_class, saved["config"], overrides or {})
    if changed:
        log(
            "resuming with changed settings: "
            + ", ".join(f"{k}={new} (was {old})" for k, (old, new) in changed.items())
        )
    trainer = Pretrainer(recipe_cls(cfg), out, log=log)
    if trainer.total < saved["global_step"]:
        raise ResumeError(
            f"the run would end at step {trainer.total}, before the checkpoint's step "
            f"{saved['global_step']}; give more steps"
        )
    trainer.restore(existing[-1])
    return trainer


def run(
    recipe_cls: type[Recipe],
    cfg: PretrainConfig,
    out_dir,
    resume: bool = False,
    log=print,
    overrides: dict | None = None,
) -> Path:
    """Train (or continue, with ``resume``) a run in ``out_dir`` (:func:`start`); return the final pipeline dir."""
    return start(recipe_cls, cfg, out_dir, resume, log, overrides).train()
