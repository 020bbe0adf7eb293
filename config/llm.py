r"""Language-model recipes: GRPO over tokens on the same trainer (docs/language_models.md).

    python scripts/train.py --config config/llm.py:grpo --config.pretrained.model=DIR --config.prompts.source=data.json \
        --config.reward.sources="{'mine': 'my_reward.py:compute_score'}" --config.reward.fns="{'mine': 1.0}"

``pretrained.model``: a transformers causal-LM directory (config.json naming a ``*ForCausalLM``, its tokenizer
beside it). ``prompts.source``: a JSON / JSONL file of verl's rows ``{prompt, ground_truth, data_source, extra_info}``
(prompt = text or chat messages). The built-in ``verifiable`` reward routes each row by its ``data_source`` (math,
qa, classification, code: docs/rewards.md); a verl ``compute_score`` file is given as any reward file is.

grpo        verl's GRPO on GSM8K, ``examples/grpo_trainer/run_qwen2-7b.sh`` (volcengine/verl) with verl's actor
            defaults (``verl/trainer/config/actor/actor.yaml``): rollout.n 5; data.train_batch_size 1024 prompts;
            ppo_mini_batch_size 256 prompts (one optimizer step per 256 prompts' 1280 responses, 4 per batch);
            ppo_micro_batch_size_per_gpu 40; lr 1e-6 constant, weight decay 0.01, grad clip 1.0; clip_ratio 0.2;
            use_kl_loss with kl_loss_coef 0.001 and kl_loss_type low_var_kl; entropy_coeff 0; loss_agg_mode
            token-mean; norm_adv_by_std_in_grpo True; max prompt 512 and response 1024 tokens; total_epochs 15
            over GSM8K's 7473 training problems = 15 × ⌊7473 / 1024⌋ = 105 steps (drop_last); temperature 1.0, top_p 1.
dr_grpo     Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): grpo without the two length / difficulty
            biases: advantages r − mean (no std), loss seq-mean-token-sum-norm (Σ_t / max response length), no KL.
reinforce   the simplified "GRPO" of nanochat's ``scripts/chat_rl.py`` (karpathy/nanochat): no reference and no KL,
            one pass over the samples (on-policy, so the clip never acts), advantage r − mean, token-mean.
quick       the embedded arithmetic world (worlds/arithmetic): its shipped tiny model, train / held-out prompts, the
            verifiable (math) reward; sized for minutes on a 2-core CPU. quick_reinforce: the same as ``reinforce``.

Per-process numbers follow WORLD_SIZE (config/recipes.py): the global sizes above are fixed.
"""

from config.base import get_config as base_config
from config.recipes import sized

#: verl's run_qwen2-7b.sh GRPO: prompts per batch, responses per prompt, prompts per optimizer step
VERL_PROMPTS, VERL_GROUP, VERL_STEP_PROMPTS = 1024, 5, 256


def _language_model():
    """Fields every language-model recipe shares."""
    config = base_config()
    config.logging.tracker = "none"
    config.logging.image_freq = 0
    config.mixed_precision = "bf16"
    s = config.sample
    s.temperature = 1.0
    s.top_p = 1.0
    s.share_group_noise = False  # every response draws its own tokens
    t = config.train
    t.use_lora = False
    t.objective = "grpo"
    t.optimizer = "adamw"
    t.adam_weight_decay = 0.01
    t.max_grad_norm = 1.0
    t.num_inner_epochs = 1
    t.clip_range = 0.2
    t.clip_range_high = 0.0
    t.adv_clip_max = 0.0  # verl and TRL do not clip advantages
    t.kl_threshold = 0.0
    config.reward.fns = {"verifiable": 1.0}
    config.eval.freq = 0
    return config


def grpo():
    config = _language_model()
    s, t = config.sample, config.train
    s.group_size = VERL_GROUP
    s.batch_size = 40  # rollout.log_prob_micro_batch_size_per_gpu
    s.max_prompt_length = 512
    s.max_response_length = 1024
    t.batch_size = 40  # ppo_micro_batch_size_per_gpu
    t.learning_rate = 1e-6
    t.beta = 0.001
    t.kl_estimator = "low_var_kl"
    t.loss_aggregation = "token-mean"
    t.adv_mode = "zscore"
    t.adv_std_rule = "verl"  # (r − mean) / (torch.std + 1e-6): verl's compute_grpo_outcome_advantage
    t.gradient_checkpointing = True
    config.distributed.strategy = "fsdp"
    return sized(
        config, epochs=105, per_epoch=VERL_PROMPTS * VERL_GROUP, per_step=VERL_STEP_PROMPTS * VERL_GROUP, eval_freq=0
    )


def dr_grpo():
    config = grpo()
    t = config.train
    t.adv_mode = "mean"
    t.loss_aggregation = "seq-mean-token-sum-norm"
    t.loss_norm_constant = 0.0  # = sample.max_response_length
    t.beta = 0.0
    return config


def reinforce():
    config = grpo()
    t = config.train
    t.beta = 0.0
    t.adv_mode = "mean"
    t.loss_aggregation = "token-mean"
    return config


def quick():
    """ArithmeticWorld on a 2-core CPU: the shipped tiny Qwen2 (1.0 M parameters, full fine-tune in fp32), GRPO as
    ``grpo`` (std-normalised advantages by verl's rule, KL loss 0.001 low_var_kl, clip 0.2, token-mean) at CPU size:
    16 prompts × 8 responses per epoch and one optimizer step on them (on-policy, as TRL's GRPOTrainer steps: two
    steps per batch of 32 prompts transferred less to the held-out split, +1.6 against +6 points,
    docs/experiments/2026-11-27-language-models.md), AdamW lr 2e-4 (a 1 M-parameter model moves slowly at 1e-6; 5e-4
    lowered the training reward), responses ≤ 48 tokens (the worked answers are ≤ ~30), 120 epochs, the held-out split
    evaluated every 40 (400 prompts, 2 responses each, fixed seeds: paired with the untrained model)."""
    from worlds.arithmetic import ARITHMETIC_BASE

    config = grpo()
    config.pretrained.model = ARITHMETIC_BASE
    config.prompts.source = "arithmetic_train"
    config.eval.prompts = "arithmetic_test"
    config.eval.per_prompt = 2
    config.eval.reward = "verifiable,arithmetic"  # the training reward and the world's own judge (reward.py), paired
    config.mixed_precision = "no"
    config.distributed.strategy = "ddp"
    config.save_freq = 40
    s, t = config.sample, config.train
    s.group_size = 8
    s.batch_size = 64
    s.max_prompt_length = 64
    s.max_response_length = 48
    t.batch_size = 64
    t.learning_rate = 2e-4
    t.gradient_checkpointing = False
    return sized(config, epochs=120, per_epoch=16 * 8, per_step=16 * 8, eval_freq=40)


def quick_reinforce():
    """``quick`` as nanochat's simplified GRPO (``reinforce``): no reference and no KL, advantages r − mean."""
    config = quick()
    t = config.train
    t.beta = 0.0
    t.adv_mode = "mean"
    return config


def get_config(name: str = "grpo"):
    recipes = {
        "grpo": grpo,
        "dr_grpo": dr_grpo,
        "reinforce": reinforce,
        "quick": quick,
        "quick_reinforce": quick_reinforce,
    }
    if name not in recipes:
        raise ValueError(f"config/llm.py has no recipe {name!r}; recipes: {sorted(recipes)}")
    return recipes[name]()
