"""The sampling loop that records a ``Rollout``: every denoising transition with its log-prob.

A rollout of T steps stores, per sample,
    latents      x_0 … x_T  (x_0 = initial noise, x_T = final latent), each once: [B, T+1, C, h, w]
    log_probs    log π(x_{j+1} | x_j) at sampling time (0 on deterministic steps):  [B, T]
    timesteps    denoiser time input per step:                                       [B, T]
    kernel_args  the kernel's scalars per step (σ, σ_next or ᾱ_t, ᾱ_prev):           name -> [B, T]
    noise_levels the kernel's stochasticity per step (0 = ODE / η = 0 step):         [B, T]
    train_steps  indices j of the transitions the trainer optimises, and a validity mask: [B, K]
    cond         prompt embeddings incl. the negative / unconditional ones:          name -> [B, ...]
    samples      decoded outputs (images in [0, 1]: [B, 3, H, W]; other families their own)  [B, ...]
    prompts, metadata (dataset rows)

Note the index convention: here j counts sampling steps forward (j = 0 is the noisiest), unlike the
diffusion papers' t which counts down.

Which steps are stochastic and trained (``StepPlan``):
- all steps (default);
- a fraction of them: the first ⌈f·S⌉ stochastic steps, or a random subset of that size per sample;
- an SDE window (Flow-GRPO-Fast): a window of w consecutive steps placed at a random start in
  ``window_range``; only those steps use the SDE (noise_level > 0) and only they are trained, the rest
  are deterministic ODE steps.
Steps whose transition std is 0 (e.g. the last CPS step) are deterministic and never trained.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import torch

from ddpo_grpo.prompts import split_rows


@dataclass
class Rollout:
    latents: torch.Tensor
    log_probs: torch.Tensor
    timesteps: torch.Tensor
    kernel_args: dict
    noise_levels: torch.Tensor
    train_steps: torch.Tensor
    train_mask: torch.Tensor
    cond: dict
    samples: torch.Tensor
    prompts: list
    metadata: list

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def num_steps(self) -> int:
        return int(self.log_probs.shape[1])

    def rows(self) -> list[dict]:
        """The dataset rows of the samples (prompt and metadata), e.g. for the supervised term."""
        return [{"prompt": p, **m} for p, m in zip(self.prompts, self.metadata)]

    def reward_samples(self) -> torch.Tensor:
        """What the rewards score: the decoded samples, on the CPU."""
        return self.samples.cpu()

    def metrics(self) -> dict:
        """Statistics of the rollout itself for metrics.jsonl (none for a denoising trajectory)."""
        return {}

    def score_penalty(self):
        """What the epoch loop subtracts from each sample's combined reward (nothing for a denoising trajectory)."""
        return None

    def select(self, index) -> Rollout:
        """Sub-rollout of the samples in ``index`` (a LongTensor or list of sample indices)."""
        return select_samples(self, index)

    @staticmethod
    def cat(rollouts: list[Rollout]) -> Rollout:
        """Concatenate rollouts along the sample axis (K is padded to the longest train_steps)."""
        k = max(r.train_steps.shape[1] for r in rollouts)
        return join_samples([r._pad_train_steps(k) for r in rollouts])

    def shuffle_steps(self, gen: torch.Generator) -> Rollout:
        """Permute each sample's trained steps independently (the validity mask moves with them), in place."""
        b, k = self.train_steps.shape
        order = torch.argsort(torch.rand(b, k, generator=gen), dim=1).to(self.train_steps.device)
        self.train_steps = torch.gather(self.train_steps, 1, order)
        self.train_mask = torch.gather(self.train_mask, 1, order)
        return self

    def _pad_train_steps(self, k: int) -> Rollout:
        pad = k - self.train_steps.shape[1]
        if pad == 0:
            return self
        b = len(self)
        steps = torch.cat([self.train_steps, self.train_steps.new_zeros(b, pad)], dim=1)
        mask = torch.cat([self.train_mask, self.train_mask.new_zeros(b, pad)], dim=1)
        return Rollout(
            **{**{f.name: getattr(self, f.name) for f in fields(self)}, "train_steps": steps, "train_mask": mask}
        )


def select_samples(rollout, index):
    """The dataclass ``rollout`` (any rollout of this library) restricted to the samples in ``index``: its tensors,
    and the tensors of its dict fields, indexed along their first (sample) axis; its list fields picked."""
    index = torch.as_tensor(index, dtype=torch.long)
    picked = {}
    for f in fields(rollout):
        value = getattr(rollout, f.name)
        if isinstance(value, dict):
            picked[f.name] = {k: v[index.to(v.device)] for k, v in value.items()}
        elif isinstance(value, torch.Tensor):
            picked[f.name] = value[index.to(value.device)]
        else:
            picked[f.name] = [value[i] for i in index.tolist()]
    return type(rollout)(**picked)


def join_samples(rollouts: list):
    """Rollouts of one type (already padded alike) concatenated along the sample axis, field by field."""
    joined = {}
    for f in fields(rollouts[0]):
        values = [getattr(r, f.name) for r in rollouts]
        if isinstance(values[0], dict):
            joined[f.name] = {key: torch.cat([v[key] for v in values]) for key in values[0]}
        elif isinstance(values[0], torch.Tensor):
            joined[f.name] = torch.cat(values)
        else:
            joined[f.name] = [item for v in values for item in v]
    return type(rollouts[0])(**joined)


@dataclass
class StepPlan:
    """Which sampling steps are stochastic and which transitions are trained.

    window_size:  0 = every step uses the SDE; w > 0 = only a window of w consecutive steps does.
    window_range: (lo, hi) inclusive range of the window's start index; None = (0, T − w).
    fraction:     fraction of the stochastic steps to train (1.0 = all).
    selection:    "first" = the first ⌈fraction·S⌉ stochastic steps; "random" = a random subset per sample.
    """

    window_size: int = 0
    window_range: tuple | None = None
    fraction: float = 1.0
    selection: str = "first"

    def noise_levels(self, num_steps: int, noise_level: float, rng: np.random.Generator) -> torch.Tensor:
        """Per-step noise level [T] for one sampling batch (the window is placed once per batch)."""
        levels = torch.full((num_steps,), float(noise_level))
        if self.window_size <= 0:
            return levels
        lo, hi = self.window_range if self.window_range is not None else (0, num_steps - self.window_size)
        start = int(rng.integers(lo, hi + 1))
        levels.zero_()
        levels[start : start + self.window_size] = float(noise_level)
        return levels

    def train_steps(self, stochastic: torch.Tensor, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(indices [B, K], mask [B, K]) of the trained transitions, chosen among the stochastic ones.

        stochastic: [B, T] bool, True where the transition std > 0.
        """
        rows = []
        for row in stochastic.cpu():
            candidates = torch.nonzero(row).flatten().numpy()  # stochastic step indices, ascending
            k = math.ceil(self.fraction * len(candidates))
            if self.selection == "random":
                candidates = np.sort(rng.choice(candidates, size=k, replace=False))
            rows.append(candidates[:k])
        width = max(1, max(len(r) for r in rows))
        steps = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.bool)
        for i, r in enumerate(rows):
            steps[i, : len(r)] = torch.as_tensor(r, dtype=torch.long)
            mask[i, : len(r)] = True
        return steps, mask


def _require_a_stochastic_window(plan: StepPlan, levels: torch.Tensor, stochastic: torch.Tensor) -> None:
    """ConfigError when an SDE window meant to be stochastic (noise level > 0) landed only on steps the kernel makes
    deterministic (a DDPM-type kernel's last step has std 0): no transition would be trained, and the loss would
    fail later with no word of why."""
    if plan.window_size <= 0 or not bool((levels > 0).any()) or bool(stochastic.any(dim=1).all()):
        return
    from foundation.errors import ConfigError

    steps = torch.nonzero(levels > 0).flatten().tolist()
    last_start = len(levels) - plan.window_size - 1
    raise ConfigError(
        f"sample.sde_window_range={plan.window_range}: the SDE window drawn at step(s) {steps} of 0…{len(levels) - 1} "
        "holds no stochastic transition (the kernel's std is 0 there, as at a DDPM-type last step), so nothing "
        f"would be trained; keep the window's start ≤ {last_start} or widen sample.sde_window_size"
    )


def initial_noise(shape: tuple, seeds: list[int], device, dtype=torch.float32) -> torch.Tensor:
    """x_0 ~ N(0, I) per sample from its own seed: [B, *shape]. Same seed -> same noise on any device
    and in any batch, which is how a group shares its initial noise and how runs stay reproducible."""
    noise = [torch.randn(shape, generator=torch.Generator().manual_seed(int(s))) for s in seeds]
    return torch.stack(noise).to(device=device, dtype=dtype)


@torch.no_grad()
def sample_rollout(
    policy,
    model,
    rows: list[dict],
    *,
    seeds: list[int],
    num_steps: int,
    guidance_scale: float,
    noise_level: float,
    plan: StepPlan | None = None,
    generator: torch.Generator | None = None,
    rng: np.random.Generator | None = None,
    negative_prompt: str = "",
    autocast=None,
    store_dtype: torch.dtype = torch.float32,
    cond: dict | None = None,
) -> Rollout:
    """Sample one batch with ``model`` (the policy's denoiser, possibly wrapped) and record everything.

    rows: dataset rows with a "prompt" key; seeds: one initial-noise seed per row; generator: the
    step-noise generator (on the policy's device); rng: numpy generator for window placement and
    random step subsets; noise_level: the kernel's stochasticity (0 → deterministic ODE / DDIM);
    cond: the rows' condition when already encoded (``policy.encode_rows``; e.g. once per epoch).
    store_dtype: the dtype the latents are stored in (``sample.store_dtype``). Below float32 the trajectory itself
    is rounded to it: the sampler continues from the rounded latent and the stored log-prob is the rounded
    value's (the kernel scores it), so re-scoring the stored transition gives the stored log-prob.
    """
    import contextlib

    plan = plan or StepPlan()
    rng = rng or np.random.default_rng(0)
    autocast = autocast or contextlib.nullcontext
    prompts, metadata = split_rows(rows)
    device = policy.device
    b = len(rows)

    if cond is None:
        with autocast():  # image-conditioned families read more of a row than its prompt
            cond = policy.encode_rows(rows, negative_prompt)
    schedule = policy.schedule(num_steps)
    levels = plan.noise_levels(num_steps, noise_level, rng).to(device)  # [T]
    policy.check(schedule, levels)  # once per rollout; the per-step kernel calls skip validation
    rounded = store_dtype != torch.float32
    x = initial_noise(policy.latent_shape(), seeds, device)  # [B, C, h, w]
    if rounded:
        x = x.to(store_dtype).float()
    latents, log_probs, stochastic = [x.to(store_dtype)], [], []
    timesteps = schedule.timesteps.to(device)
    kernel_args = {k: v.to(device) for k, v in schedule.kernel_args.items()}
    for j in range(num_steps):
        t = timesteps[j].expand(b)  # [B]
        with autocast():
            out = policy.predict(model, x, t, cond, guidance_scale)  # [B, C, h, w]
        args = {k: v[j].expand(b) for k, v in kernel_args.items()}
        step = policy.step(out, x, args, levels[j].expand(b), generator=generator)
        if rounded:  # the drawn sample, rounded to the store's precision, and its own log-density
            step = policy.step(out, x, args, levels[j].expand(b), prev_sample=step.prev_sample.to(store_dtype).float())
        x = step.prev_sample
        latents.append(x.to(store_dtype))
        log_probs.append(step.log_prob)
        stochastic.append(step.std.flatten() > 0)
    samples = policy.decode(x)  # outside autocast: the VAE computes in its own dtype (sample.vae_dtype)
    stochastic = torch.stack(stochastic, dim=1)  # [B, T]
    _require_a_stochastic_window(plan, levels, stochastic)
    train_steps, train_mask = plan.train_steps(stochastic, rng)
    return Rollout(
        latents=torch.stack(latents, dim=1),  # [B, T+1, C, h, w]
        log_probs=torch.stack(log_probs, dim=1).float(),  # [B, T]
        timesteps=timesteps.expand(b, -1).clone(),  # [B, T]
        kernel_args={k: v.expand(b, -1).clone() for k, v in kernel_args.items()},
        noise_levels=levels.expand(b, -1).clone(),
        train_steps=train_steps.to(device),
        train_mask=train_mask.to(device),
        cond=cond,
        samples=samples.float(),
        prompts=prompts,
        metadata=metadata,
    )


@dataclass(frozen=True)
class Sampler:
    """The training sampler of a run: ``sample_rollout`` with the run's settings bound (``sample.*``); called with a
    batch's rows, initial-noise seeds, step-noise generator and numpy rng (and its condition when encoded already)."""

    policy: object
    num_steps: int
    guidance_scale: float
    noise_level: float
    plan: StepPlan
    negative_prompt: str = ""
    autocast: object = None
    store_dtype: torch.dtype = torch.float32
    #: a sharded denoiser's units all-gathered once per batch, not per step (``sharding.gathered``;
    #: distributed.gather_for_sampling), and resharded after it with ``reshard_after_forward``; ``plain``: run as
    #: plain modules meanwhile (where FSDP casts no inputs)
    gather: bool = False
    reshard_after_forward: bool = True
    plain: bool = False

    cat = staticmethod(Rollout.cat)  # an epoch's batches joined

    def gathered(self):
        """The context in which the sharded denoiser stays gathered (``gather``; nothing otherwise): each call holds
        it for its batch, and a caller may hold it over several batches (the calls inside then gather nothing)."""
        import contextlib

        from ddpo_grpo import sharding

        if not self.gather:
            return contextlib.nullcontext()
        return sharding.gathered(
            self.policy.denoiser, reshard_after_forward=self.reshard_after_forward, plain=self.plain
        )

    def __call__(self, rows, seeds, generator, rng, cond: dict | None = None) -> Rollout:
        with self.gathered():
            return sample_rollout(
                self.policy,
                self.policy.denoiser,
                rows,
                seeds=seeds,
                num_steps=self.num_steps,
                guidance_scale=self.guidance_scale,
                noise_level=self.noise_level,
                plan=self.plan,
                generator=generator,
                rng=rng,
                negative_prompt=self.negative_prompt,
                autocast=self.autocast,
                store_dtype=self.store_dtype,
                cond=cond,
            )


def transition_inputs(rollout: Rollout, k: int):
    """Everything needed to re-score the k-th trained transition of every sample.

    Returns (x_j [B,C,h,w], timesteps [B], x_{j+1} [B,C,h,w], kernel args name -> [B], noise levels [B],
    j [B] step indices, valid [B] bool). The trainer feeds these to ``policy.predict`` and
    ``policy.step(..., prev_sample=x_{j+1})``, the same calls the sampler made.
    """
    j = rollout.train_steps[:, k]  # [B]
    rows = torch.arange(len(rollout), device=j.device)
    args = {name: v[rows, j] for name, v in rollout.kernel_args.items()}
    return (
        rollout.latents[rows, j].float(),  # (a 16-bit store: the exact values the sampler continued from)
        rollout.timesteps[rows, j],
        rollout.latents[rows, j + 1].float(),
        args,
        rollout.noise_levels[rows, j],
        j,
        rollout.train_mask[:, k],
    )
