"""Our token GRPO loss against TRL's ``GRPOTrainer`` on identical inputs (issue 37, deliverable 6a).

TRL is installed for this experiment only (never a dependency; docs/experiments/2026-11-27-trl-equivalence.md gives
the venv), so the module skips where it is absent, as in CI. Everything runs on a tiny Qwen2 built from a config dict
with a word-level tokenizer built in memory: nothing is downloaded.

What is compared:
  * the loss: TRL's ``_compute_loss(model, inputs)`` on a batch collated by TRL itself (its own
    ``_generate_and_score_completions`` with the generation replaced by fixed token lists and the reward by fixed
    numbers), against ``token_logprobs`` → ``clipped_token_surrogate`` + β·``token_kl("k3")`` → ``aggregate`` on the
    same model's logits: loss and every parameter's gradient within 1e-5, per loss_type, β, ε, scale_rewards, T;
  * the advantages: TRL's reward → advantage against ``PerPromptStatTracker`` (they differ; the test pins how much).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

import torch  # noqa: E402
from trl_kit import tiny_qwen2, tiny_tokenizer  # noqa: E402

from ddpo_grpo.stat_tracker import compute_advantages  # noqa: E402
from ddpo_grpo.token_losses import (  # noqa: E402
    KL_CLAMP,
    aggregate,
    clipped_token_surrogate,
    token_kl,
    token_logprobs,
)

TOL = 1e-5
GROUP = 4  # num_generations
MAX_COMPLETION = 7

#: TRL loss_type -> (our aggregation, its norm_constant): the types whose formula our modes express
OUR_MODE = {
    "grpo": ("seq-mean-token-mean", 0.0),
    "bnpo": ("token-mean", 0.0),
    "dr_grpo": ("seq-mean-token-sum-norm", float(MAX_COMPLETION)),
    "dapo": ("token-mean", 0.0),  # num_tokens = TRL's num_items_in_batch
    "luspo": ("seq-mean-token-sum-norm", 1.0),  # with token-level ratios (importance_sampling_level="token")
}
#: TRL scale_rewards -> our advantage mode
OUR_ADVANTAGE = {"group": "zscore", "batch": "global_std", "none": "mean"}

PROMPTS = ["what is 1 + 2 =", "what is 13 - 4 + 5 ="]
COMPLETIONS = [  # GROUP per prompt, varied lengths (the longest is MAX_COMPLETION), some ending in <eos>
    "3 <eos>",
    "#### 3 <eos>",
    "1 + 2 = 4 5 6",
    "is",
    "#### 1 4 <eos>",
    "9 + 5 = 1 4 <eos>",
    "1 3",
    "what is 7 8",
]
REWARDS = [1.0, 1.0, 0.0, 0.0, 1.0, 0.25, 0.0, 0.5]


def _trainer(tmp_path, temperature: float):
    """A GRPOTrainer in fp32 on CPU; β = 0 at construction (β > 0 would load a reference model from the hub) and set
    per case afterwards: ``_compute_loss`` reads ``self.beta`` and takes the reference log-probs from ``inputs``."""
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = tiny_tokenizer()
    rewards = iter(())

    def fixed_reward(prompts, completions, **_):
        return [next(rewards) for _ in completions]

    args = GRPOConfig(
        output_dir=str(tmp_path / f"trl_T{temperature}"),
        per_device_train_batch_size=len(COMPLETIONS),
        num_generations=GROUP,
        max_completion_length=MAX_COMPLETION,
        temperature=temperature,
        beta=0.0,
        report_to="none",
        bf16=False,
        use_cpu=True,
        save_strategy="no",
        seed=0,
    )
    dataset = datasets.Dataset.from_list([{"prompt": p} for p in PROMPTS])
    trainer = GRPOTrainer(
        model=tiny_qwen2(), reward_funcs=fixed_reward, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.current_gradient_accumulation_steps = 1  # set by the HF training loop; one micro-batch per step here

    def fixed_generation(prompts):
        prompt_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        completion_ids = [tokenizer(c, add_special_tokens=False)["input_ids"] for c in COMPLETIONS]
        return prompt_ids, completion_ids, None, COMPLETIONS, None, {}, None, None

    def collate(scale_rewards: str) -> dict:
        """TRL's own batch for PROMPTS × GROUP with COMPLETIONS and REWARDS."""
        nonlocal rewards
        rewards = iter(REWARDS)
        trainer.scale_rewards = scale_rewards
        trainer.beta = 0.0  # no reference model to score with: the cases bring their own reference log-probs
        trainer._generate = fixed_generation
        rows = [{"prompt": p} for p in PROMPTS for _ in range(GROUP)]
        return trainer._generate_and_score_completions(rows)

    trainer.collate = collate
    return trainer


@pytest.fixture(scope="module")
def trainers(tmp_path_factory, one_thread):
    root = tmp_path_factory.mktemp("trl")
    return {t: _trainer(root, t) for t in (1.0, 0.7)}


def _logits(model, batch):
    """The completion positions' logits by the model's own forward (TRL patched a fused head beside it)."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    logits = model(input_ids=ids, attention_mask=attention).logits
    width = batch["completion_ids"].shape[1]
    return logits[:, -width - 1 : -1]


def _inputs(trainer, scale_rewards: str, seed: int = 1) -> dict:
    """TRL's batch plus old / reference log-probs near the current ones (ratios on both sides of the clip range)."""
    batch = dict(trainer.collate(scale_rewards))
    with torch.no_grad():
        current = token_logprobs(_logits(trainer.model, batch), batch["completion_ids"], trainer.temperature)
    gen = torch.Generator().manual_seed(seed)
    batch["old_per_token_logps"] = current + 0.3 * torch.randn(current.shape, generator=gen)
    batch["ref_per_token_logps"] = current + 0.5 * torch.randn(current.shape, generator=gen)
    return batch


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _trl_loss(trainer, inputs):
    trainer.model.zero_grad(set_to_none=True)
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    return loss.detach(), _grads(trainer.model)


def _our_loss(trainer, inputs, loss_type: str, beta: float, kl_times_ratio: bool):
    model = trainer.model
    model.zero_grad(set_to_none=True)
    mask = inputs["completion_mask"].float()
    log_probs = token_logprobs(_logits(model, inputs), inputs["completion_ids"], trainer.temperature)
    old = inputs["old_per_token_logps"]
    terms = clipped_token_surrogate(log_probs, old, inputs["advantages"], trainer.epsilon_low, trainer.epsilon_high)
    per_token = terms.loss
    if beta:
        kl = token_kl(log_probs, inputs["ref_per_token_logps"], "k3")
        if kl_times_ratio:  # TRL's use_bias_correction_kl: KL_t · ρ_t with ρ differentiable
            kl = kl * torch.exp(log_probs - old)
        per_token = per_token + beta * kl
    mode, constant = OUR_MODE[loss_type]
    num_tokens = float(inputs["num_items_in_batch"]) if loss_type == "dapo" else 0.0
    loss = aggregate(per_token, mask, mode, norm_constant=constant, num_tokens=num_tokens)
    loss.backward()
    return loss.detach(), _grads(model)


def _max_differences(trainer, inputs, loss_type, beta, eps, bias_correction, ours_times_ratio):
    trainer.loss_type, trainer.beta = loss_type, beta
    trainer.epsilon_low, trainer.epsilon_high = eps
    trainer.args.use_bias_correction_kl = bias_correction
    trl_loss, trl_grads = _trl_loss(trainer, inputs)
    our_loss, our_grads = _our_loss(trainer, inputs, loss_type, beta, ours_times_ratio)
    assert trl_grads.keys() == our_grads.keys() and len(trl_grads) > 0
    grad_diff = max((trl_grads[n] - our_grads[n]).abs().max().item() for n in trl_grads)
    grad_scale = max(g.abs().max().item() for g in trl_grads.values())
    return abs(trl_loss.item() - our_loss.item()), grad_diff, trl_loss.item(), grad_scale


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
@pytest.mark.parametrize("eps", [(0.2, 0.2), (0.2, 0.28)])
@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("loss_type", list(OUR_MODE))
def test_loss_and_gradient_equal_trl(trainers, loss_type, beta, eps, scale_rewards):
    """TRL's loss with use_bias_correction_kl=False (its KL term the plain k3) equals ours, loss and gradient."""
    trainer = trainers[1.0]
    inputs = _inputs(trainer, scale_rewards)
    loss_diff, grad_diff, loss, grad_scale = _max_differences(trainer, inputs, loss_type, beta, eps, False, False)
    print(f"{loss_type} beta={beta} eps={eps} scale={scale_rewards}: |dloss|={loss_diff:.2e} |dgrad|={grad_diff:.2e}")
    assert loss != 0.0 and grad_scale > 1e-3  # the comparison is not between zeros
    assert loss_diff <= TOL and grad_diff <= TOL


@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("loss_type", list(OUR_MODE))
def test_temperature_divides_the_logits_as_trl(trainers, loss_type, beta):
    """At T = 0.7 TRL scores log softmax(logits / T), as ``token_logprobs`` does: log-probs, loss and gradient agree."""
    trainer = trainers[0.7]
    inputs = _inputs(trainer, "group")
    with torch.no_grad():
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        trl_lp, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, attention, inputs["completion_ids"].shape[1]
        )
        ours = token_logprobs(_logits(trainer.model, inputs), inputs["completion_ids"], 0.7)
        untempered = token_logprobs(_logits(trainer.model, inputs), inputs["completion_ids"], 1.0)
    mask = inputs["completion_mask"].bool()
    lp_diff = (trl_lp - ours)[mask].abs().max().item()
    assert lp_diff <= TOL
    assert (trl_lp - untempered)[mask].abs().max().item() > 1e-2  # T matters at all
    loss_diff, grad_diff, _, _ = _max_differences(trainer, inputs, loss_type, beta, (0.2, 0.28), False, False)
    print(f"T=0.7 {loss_type} beta={beta}: |dlogp|={lp_diff:.2e} |dloss|={loss_diff:.2e} |dgrad|={grad_diff:.2e}")
    assert loss_diff <= TOL and grad_diff <= TOL


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_trl_default_kl_is_k3_times_the_ratio(trainers, loss_type):
    """TRL 1.16's default use_bias_correction_kl=True weighs the KL by ρ_t = π_θ/π_old (differentiable): plain k3 then
    differs in the gradient, k3·ρ agrees within 1e-5."""
    trainer = trainers[1.0]
    inputs = _inputs(trainer, "group")
    plain = _max_differences(trainer, inputs, loss_type, 0.04, (0.2, 0.28), True, False)
    weighted = _max_differences(trainer, inputs, loss_type, 0.04, (0.2, 0.28), True, True)
    print(f"{loss_type} bias-corrected KL: plain k3 |dgrad|={plain[1]:.2e}, k3*rho |dgrad|={weighted[1]:.2e}")
    assert plain[1] > 1e-4
    assert weighted[0] <= TOL and weighted[1] <= TOL


def test_dapo_divides_by_the_generation_batch_token_count(trainers):
    """TRL's "dapo" divides by num_items_in_batch (the tokens of the whole generation batch), our ``num_tokens``."""
    trainer = trainers[1.0]
    inputs = _inputs(trainer, "group")
    assert int(inputs["num_items_in_batch"]) == int(inputs["completion_mask"].sum())
    inputs["num_items_in_batch"] = inputs["num_items_in_batch"] * 3  # as if two more micro-batches shared the step
    loss_diff, grad_diff, _, _ = _max_differences(trainer, inputs, "dapo", 0.04, (0.2, 0.28), False, False)
    assert loss_diff <= TOL and grad_diff <= TOL


def test_low_var_kl_is_trls_k3_inside_its_clamp():
    """Our low_var_kl equals k3 (TRL's estimator) wherever the clamps are inactive: log r = log π_ref − log π_θ in
    [y_lo, y_hi] with e^y − 1 − y = 10 at both ends (y_lo ≈ −11.0, y_hi ≈ 2.611); outside it is held at 10."""
    y = torch.linspace(-15.0, 5.0, 20001, dtype=torch.float64)
    zero = torch.zeros_like(y)
    k3 = token_kl(zero, y, "k3").double()
    low_var = token_kl(zero, y, "low_var_kl").double()
    inside = k3 <= KL_CLAMP[1]
    assert torch.allclose(k3[inside], low_var[inside], rtol=1e-6, atol=1e-6)
    assert torch.all(low_var[~inside] == KL_CLAMP[1])
    lo, hi = y[inside].min().item(), y[inside].max().item()
    assert abs(lo - (-11.0)) < 2e-3 and abs(hi - 2.6106) < 2e-3  # the root of e^y − 1 − y = 10


def _trl_formula(rewards: np.ndarray, scale_rewards: str) -> np.ndarray:
    """TRL's advantage as read in ``_generate_and_score_completions``: r − group mean, divided by (std + 1e-4) with
    std Bessel-corrected (ddof = 1) over the group ("group") or the whole batch ("batch"), undivided for "none"."""
    grouped = rewards.reshape(-1, GROUP)
    centred = (grouped - grouped.mean(axis=1, keepdims=True)).reshape(-1)
    if scale_rewards == "none":
        return centred
    std = np.repeat(grouped.std(axis=1, ddof=1), GROUP) if scale_rewards == "group" else rewards.std(ddof=1)
    return centred / (std + 1e-4)


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_advantages_against_trl(trainers, scale_rewards):
    """TRL's advantages are its formula (ddof = 1, std + 1e-4); the house's rule (ddof = 0, max(std, eps)) equals them
    for "none" and differs by the factor σ₀ / (σ₀·√(n/(n−1)) + 1e-4) per group otherwise (n the count the std runs
    over); ``train.adv_std_rule = "trl"`` equals them."""
    trl_adv = trainers[1.0].collate(scale_rewards)["advantages"].double().numpy()
    rewards = np.asarray(REWARDS)
    assert np.allclose(trl_adv, _trl_formula(rewards, scale_rewards), atol=1e-6)

    prompts = [p for p in PROMPTS for _ in range(GROUP)]
    ours, _ = compute_advantages(prompts, rewards, OUR_ADVANTAGE[scale_rewards])
    ours = ours.astype(np.float64)
    gap = np.abs(trl_adv - ours).max()
    print(f"scale_rewards={scale_rewards}: max |A_trl - A_ours| = {gap:.4f}")
    if scale_rewards == "none":
        assert gap <= 1e-6
        return
    grouped = rewards.reshape(-1, GROUP)
    if scale_rewards == "group":
        sigma0, n = np.repeat(grouped.std(axis=1), GROUP), GROUP
    else:
        sigma0, n = np.full(rewards.shape, rewards.std()), rewards.size
    factor = sigma0 / (sigma0 * math.sqrt(n / (n - 1)) + 1e-4)
    assert np.allclose(trl_adv, ours * factor, atol=1e-6)
    assert gap > 0.05  # the difference is real, not round-off
    # train.adv_std_rule = "trl" is TRL's formula
    from ddpo_grpo.stat_tracker import PerPromptStatTracker

    as_trl, _ = PerPromptStatTracker(OUR_ADVANTAGE[scale_rewards], std_rule="trl").update(prompts, rewards)
    assert np.abs(trl_adv - as_trl.astype(np.float64)).max() <= 1e-6
