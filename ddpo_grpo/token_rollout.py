"""The language-model rollout: responses drawn token by token with a KV cache, each token's log-prob recorded.

A ``TokenRollout`` of B responses stores, per sample,
    ids            prompt + response tokens [B, P + L]: the prompt left-padded to P, the response right-padded to L
    mask           1 on every real token of ``ids`` (prompt and response), 0 on padding          [B, P + L]
    response_mask  1 on a response's own tokens (up to and including its EOS / stop), 0 after   [B, L]
    log_probs      log π_old(y_t | x, y_<t), re-scored by the trainer's own forward after sampling: [B, L]
    sampler_log_probs  the same, as the KV-cached sampling forward computed them (the gap between the two is
                   ``train/sampler_logp_gap``: how far the cached generation is from the forward the trainer uses)
    finished       True where the response ended by itself (EOS or a stop string), not at max_response_length  [B]
    penalty        β·Σ_t (log π_old(y_t) − log π_ref(y_t)), the KL the reward pays (train.kl_in_reward; else 0)  [B]
    samples        the response strings (what the rewards score); prompts (rendered), metadata (the rows)
and offers the interface the update loop uses of any rollout (``len``, ``select``, ``cat``, ``shuffle_steps``,
``rows``, ``reward_samples``). A token is a step: the loop's "trained steps" of a response are its masked tokens.

Sampling: step t draws y_t from softmax(logits / T) restricted to the nucleus (the smallest set of most likely tokens
whose probability reaches ``top_p``), by inverse-CDF with one uniform number per response from the response's own
generator, seeded by its seed: a response is the same whichever batch it is drawn in (up to the float arithmetic of
batching); with ``greedy`` (evaluation only) the most likely token. A response ends at an EOS token, after a stop
string, or at ``max_response_length`` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ddpo_grpo.prompts import split_rows
from ddpo_grpo.rollout import join_samples, select_samples


@dataclass
class TokenRollout:
    ids: torch.Tensor
    mask: torch.Tensor
    response_mask: torch.Tensor
    log_probs: torch.Tensor
    sampler_log_probs: torch.Tensor
    finished: torch.Tensor
    penalty: torch.Tensor
    samples: list
    prompts: list
    metadata: list

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def prompt_length(self) -> int:
        return int(self.ids.shape[1] - self.response_mask.shape[1])

    @property
    def response_lengths(self) -> torch.Tensor:
        return self.response_mask.sum(dim=1)

    def rows(self) -> list[dict]:
        return [{"prompt": p, **m} for p, m in zip(self.prompts, self.metadata)]

    def reward_samples(self) -> list[str]:
        return list(self.samples)

    def score_penalty(self):
        """What the epoch loop subtracts from each response's combined reward [B] (numpy), or None."""
        return self.penalty.cpu().double().numpy() if bool(self.penalty.any()) else None

    def metrics(self) -> dict:
        """The responses' lengths (tokens), the fraction cut at ``max_response_length`` (no EOS or stop), and the
        largest gap between the sampling forward's log-probs and the trainer's (``_max``: reduced by max)."""
        lengths = self.response_lengths.float()
        m = self.response_mask.bool()
        gap = (self.sampler_log_probs - self.log_probs).abs()[m]
        return {
            "response/length_mean": float(lengths.mean()),
            "response/length_max": float(lengths.max()),
            "response/truncated_frac": float((~self.finished).float().mean()),
            "train/sampler_logp_gap_max": float(gap.max()) if gap.numel() else 0.0,
        }

    def select(self, index) -> TokenRollout:
        return select_samples(self, index)

    def shuffle_steps(self, gen: torch.Generator) -> TokenRollout:
        """(Every token of a minibatch is trained in one forward: there is no order of steps to shuffle.)"""
        return self

    def padded(self, prompt_length: int, response_length: int, pad_id: int) -> TokenRollout:
        """The same rollout with the prompt left-padded to ``prompt_length`` and the response right-padded."""
        b, p, r = len(self), self.prompt_length, self.response_mask.shape[1]
        left, right = prompt_length - p, response_length - r

        def widen(t, fill, lead, trail):
            return torch.cat([t.new_full((b, lead), fill), t, t.new_full((b, trail), fill)], dim=1)

        return TokenRollout(
            ids=widen(self.ids, pad_id, left, right),
            mask=widen(self.mask, 0, left, right),
            response_mask=widen(self.response_mask, 0, 0, right),
            log_probs=widen(self.log_probs, 0.0, 0, right),
            sampler_log_probs=widen(self.sampler_log_probs, 0.0, 0, right),
            finished=self.finished,
            penalty=self.penalty,
            samples=self.samples,
            prompts=self.prompts,
            metadata=self.metadata,
        )

    @staticmethod
    def cat(rollouts: list[TokenRollout], pad_id: int = 0) -> TokenRollout:
        """Concatenate along the samples, each padded to the longest prompt and response."""
        p = max(r.prompt_length for r in rollouts)
        length = max(r.response_mask.shape[1] for r in rollouts)
        return join_samples([r.padded(p, length, pad_id) for r in rollouts])


def draw(logits: torch.Tensor, temperature: float, top_p: float, uniforms: torch.Tensor) -> torch.Tensor:
    """One token per row from softmax(logits / T) restricted to the top-p nucleus, by inverse CDF of ``uniforms``
    [B] in [0, 1): logits [B, V] -> tokens [B]. The nucleus keeps, in order of decreasing probability, every token
    whose preceding cumulative probability is below top_p (so at least the most likely one)."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    if top_p < 1.0:
        before = sorted_probs.cumsum(dim=-1) - sorted_probs
        sorted_probs = sorted_probs * (before < top_p)
    cdf = sorted_probs.cumsum(dim=-1)
    target = (uniforms.to(cdf) * cdf[:, -1]).unsqueeze(-1)
    last = (sorted_probs > 0).sum(dim=-1, keepdim=True) - 1  # the nucleus's last token: a rounding up lands here
    pick = torch.minimum(torch.searchsorted(cdf, target, right=True), last)
    return order.gather(-1, pick).squeeze(-1)


@torch.no_grad()
def sample_tokens(policy, model, rows: list[dict], *, seeds: list[int], autocast=None, kl_reward=None, running=None):
    """Draw one response per row with ``model`` (the policy's, possibly wrapped) and record it: a ``TokenRollout``.
    ``kl_reward``: (reference.Reference, β) when the KL is folded into the reward (``train.kl_in_reward``).
    ``running(alive) -> bool``: whether any process still draws a token (a sharded model's every forward is a
    collective, so every process must take the same number of steps); None: whether any of this batch's rows does."""
    import contextlib

    autocast = autocast or contextlib.nullcontext
    s = policy.settings
    prompts, metadata = split_rows(rows)
    enc = policy.encode_rows(rows)
    ids, mask = enc["ids"], enc["mask"]
    b, device = len(rows), ids.device
    generators = [torch.Generator().manual_seed(int(seed)) for seed in seeds]
    eos = torch.as_tensor(policy.eos_ids, dtype=torch.long, device=device)
    pad = policy.tokenizer.pad_token_id
    with autocast():
        logits, cache = policy.logits(model, ids, mask, cache=_cache())
    logits = logits[:, -1]
    position = policy.positions(mask)[:, -1]
    tokens, sampler_logps, alive = [], [], torch.ones(b, dtype=torch.bool, device=device)
    lengths = torch.zeros(b, dtype=torch.long, device=device)
    for _ in range(s.max_response_length):
        uniforms = torch.stack([torch.rand((), generator=g) for g in generators])
        token = logits.argmax(dim=-1) if s.greedy else draw(logits, s.temperature, s.top_p, uniforms)
        logp = torch.log_softmax(logits.float() / s.temperature, dim=-1).gather(-1, token[:, None]).squeeze(-1)
        token = torch.where(alive, token, torch.full_like(token, pad))
        tokens.append(token)
        sampler_logps.append(torch.where(alive, logp, torch.zeros_like(logp)))
        lengths += alive.long()
        alive = alive & ~torch.isin(token, eos)
        if s.stop:
            alive = alive & ~_stopped(policy, torch.stack(tokens, 1), lengths, s.stop)
        if not (alive.any() if running is None else running(alive)):
            break
        mask = torch.cat([mask, alive.long()[:, None]], dim=1)
        position = position + 1
        with autocast():
            logits, cache = policy.logits(model, token[:, None], mask, cache=cache, positions=position[:, None])
        logits = logits[:, -1]
    response = torch.stack(tokens, dim=1)  # [B, L]
    response_mask = (torch.arange(response.shape[1], device=device)[None] < lengths[:, None]).long()
    full_ids = torch.cat([ids, response], dim=1)
    full_mask = torch.cat([enc["mask"], response_mask], dim=1)
    with autocast():  # the trainer's own forward: what the ratio of the first update is taken against
        log_probs, _ = policy.response_logprobs(model, full_ids, full_mask, ids.shape[1])
    rmask = response_mask.float()
    penalty = torch.zeros(b, device=device)
    if kl_reward is not None:  # k1 summed over the response, against the reference (verl's kl_penalty "kl")
        reference, beta = kl_reward
        with reference.active(), autocast():
            ref, _ = policy.response_logprobs(reference.model, full_ids, full_mask, ids.shape[1])
        penalty = beta * ((log_probs.float() - ref.float()) * rmask).sum(dim=1)
    return TokenRollout(
        ids=full_ids,
        mask=full_mask,
        response_mask=response_mask,
        log_probs=(log_probs.float() * rmask),
        sampler_log_probs=torch.stack(sampler_logps, dim=1) * rmask,
        finished=~alive,
        penalty=penalty,
        samples=policy.decode(response, response_mask),
        prompts=list(enc["text"]),
        metadata=metadata,
    )


def _cache():
    from transformers import DynamicCache

    return DynamicCache()


def _stopped(policy, response: torch.Tensor, lengths: torch.Tensor, stop: tuple[str, ...]) -> torch.Tensor:
    """[B] True where a response's text so far contains a stop string."""
    hit = []
    for ids, n in zip(response.cpu(), lengths.cpu()):
        text = policy.tokenizer.decode(ids[: int(n)].tolist(), skip_special_tokens=True)
        hit.append(any(word in text for word in stop))
    return torch.as_tensor(hit, device=response.device)


@dataclass(frozen=True)
class TokenSampler:
    """The training sampler of a language-model run: ``sample_tokens`` with the run's settings bound, called as the
    epoch loop calls every sampler: (rows, seeds, generator, rng, cond) — the generator and rng are unused (each
    response draws from its own seed)."""

    policy: object
    autocast: object = None
    kl_reward: tuple | None = None  # (reference, β) with train.kl_in_reward
    #: a sharded model's context that keeps it gathered over a batch (``sharding.gathered`` with the run's settings:
    #: distributed.gather_for_sampling), else None: without it every token's forward all-gathers every layer
    gathered_by: object = None
    #: with a sharded model, ``running(alive)`` over every process (``sample_tokens``); None otherwise
    running: object = None

    def gathered(self):
        import contextlib

        return self.gathered_by() if self.gathered_by is not None else contextlib.nullcontext()

    def __call__(self, rows, seeds, generator=None, rng=None, cond: dict | None = None) -> TokenRollout:
        with self.gathered():
            return sample_tokens(
                self.policy,
                self.policy.model,
                rows,
                seeds=seeds,
                autocast=self.autocast,
                kl_reward=self.kl_reward,
                running=self.running,
            )

    def cat(self, rollouts: list[TokenRollout]) -> TokenRollout:
        return TokenRollout.cat(rollouts, pad_id=self.policy.tokenizer.pad_token_id)
