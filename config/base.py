"""Every configuration field, documented where it is defined.

Conventions: "per process" numbers are per GPU / per accelerate process; global totals are derived as
shown. Named experiments (``config/sd.py``, ``config/sd3.py``, ``config/shapes.py``, ``config/quickstart.py``)
are small functions that start from ``get_config()`` here and override fields (their shared helpers:
``config/recipes.py``).

Batch arithmetic (P = number of processes):
    images per epoch        = sample.batch_size × sample.num_batches_per_epoch × P
    prompts per epoch       = images per epoch / sample.group_size
    minibatches per process = sample.batch_size × sample.num_batches_per_epoch / train.batch_size
    optimizer steps / inner epoch = minibatches per process / train.gradient_accumulation_steps
Each minibatch back-propagates every trained transition of its samples (K of them), one denoising
step at a time; one optimizer step covers gradient_accumulation_steps minibatches × K steps.
"""

import ml_collections


def get_config():
    config = ml_collections.ConfigDict()

    # ---- run ----------------------------------------------------------------------------------
    config.run_name = ""  # name of the run directory under logdir; "" = <timestamp>
    config.logdir = "logs"  # runs go to <logdir>/<run_name>/ (metrics.jsonl, checkpoints/, final/, samples/)
    config.seed = 42  # one seed determines prompts, initial noise, SDE noise and shuffling (exact resume)
    config.num_epochs = 100  # an epoch = sample → reward → advantages → num_inner_epochs training passes
    config.resume_from = ""  # a run directory (its latest checkpoint) or a checkpoint directory; "" = fresh
    config.save_freq = 1  # write a checkpoint every N epochs (and always after the last one); 0 = never
    config.num_checkpoint_limit = 3  # keep the newest N checkpoints; 0 = keep all
    config.mixed_precision = "no"  # "no" | "fp16" | "bf16": autocast for denoiser / VAE / text encoders
    config.allow_tf32 = True  # TF32 matmuls on Ampere+ GPUs (no effect on CPU)
    # torch's cuDNN scaled-dot-product attention (one of the kernels F.scaled_dot_product_attention may pick on
    # GPUs). Off: FLUX.1-dev LoRA training died in its backward on an H200 (torch 2.11 + CUDA 13.0, 2026-11-28;
    # on an H100 the same step ended in an illegal memory access) and trained with it off (docs/scaling.md, "GPU
    # check"). The flash, memory-efficient and math kernels stay; True hands the choice back to torch. One switch
    # for the whole process (sampling and training)
    config.cudnn_attention = False

    # ---- pretrained model ---------------------------------------------------------------------
    config.pretrained = pretrained = ml_collections.ConfigDict()
    # A diffusers pipeline directory or hub id. The policy adapter is chosen from its model_index.json
    # (StableDiffusionPipeline → DDIM policy, StableDiffusion3Pipeline → flow-matching SDE policy,
    # DenoiserPipeline → generic denoiser policy: ddpo_grpo/pipelines.py, ddpo_grpo/policies/denoiser.py),
    # or a factory file "path/to/my_model.py:build" whose build() returns a pipeline (ddpo_grpo/policies).
    # "" = build the tiny random pipeline of `ddpo_grpo.tiny` (pretrained.tiny) under <logdir>/_tiny/.
    pretrained.model = ""
    # which tiny pipeline to build when model is "" (ddpo_grpo.tiny.BUILDERS): "sd3" | "sd" | "ip2p" | "denoiser" |
    # "sdxl" | "flux" | "kontext" | "qwen_image" | "qwen_image_edit" | "qwen_image_edit_plus" | "zimage" | "wan" | "wan_i2v"
    pretrained.tiny = "sd3"
    # Start from the trainable weights of a checkpoint (a run or checkpoint directory), e.g. another run's
    # supervised warm-up; "" = the model's own. Keys that do not match (another LoRA rank, a widened layer) are
    # refused unless init_strict is False, which loads the matching ones and reports the others.
    pretrained.init_from = ""
    pretrained.init_strict = True

    # ---- sampling (rollouts) ------------------------------------------------------------------
    config.sample = sample = ml_collections.ConfigDict()
    sample.num_steps = 10  # denoising steps T of training rollouts (may be fewer than eval_num_steps)
    sample.eval_num_steps = 40  # steps of the deterministic samples logged as image grids
    sample.guidance_scale = 4.5  # classifier-free guidance w; ≤ 1 disables CFG (one denoiser pass per step)
    # image-conditioned models (InstructPix2Pix): the image guidance s_I ≥ 1 (1 = none); the text's is guidance_scale
    sample.image_guidance_scale = 1.5
    sample.negative_prompt = ""  # the unconditional / negative prompt used by CFG
    sample.batch_size = 8  # images per sampling batch, PER PROCESS
    sample.group_size = 4  # images per prompt (GRPO group, ≥ 2); a group may span batches and processes
    sample.num_batches_per_epoch = 2  # sampling batches per process per epoch
    # True: the members of a group start from the same initial noise; a prompt drawn into two groups of
    # an epoch then keeps them apart in the zscore / mean / global_std advantages (advantages.group_keys)
    sample.share_group_noise = False
    # Dynamic sampling (DAPO): R > 0 = each process trains only groups whose rewards differ, sampling up to R extra
    # rounds of the epoch's size (new prompts, new noise) until it has its share of them, topped up with flat groups
    # when R rounds did not find enough (ddpo_grpo/dynamic_sampling.py); sample/images counts every round. Needs
    # whole groups per process (samples per process a multiple of group_size). 0 = off.
    sample.dynamic_sampling_rounds = 0
    # The transition kernel (ddpo_grpo/kernels/), one knob for every family: flow-matching models (SD3, FLUX,
    # Qwen-Image, Wan, …) take "flow_grpo" (Flow-GRPO's SDE) | "dance" (DanceGRPO) | "cps" (coefficients-
    # preserving sampling); DDPM-family models (SD, SDXL, InstructPix2Pix, generic denoisers) take "ddim" (DDIM-η,
    # DDPO) | "ddpm" (ancestral). "" = the family's default (flow_grpo; ddim; a denoiser pipeline's scheduler kind).
    sample.kernel = ""
    # The kernel's stochasticity, one knob for every kernel; 0 = deterministic (the ODE / DDIM η = 0): flow_grpo
    # a (σ_t-dependent std g = a·sqrt(σ/(1−σ))), dance η, cps η ∈ [0, 1], ddim η ∈ [0, 1], ddpm the fraction of
    # the ancestral std ∈ [0, 1]. None = the kernel's default (0.7 for the flow kernels, 1.0 for ddim / ddpm).
    sample.noise_level = ml_collections.config_dict.placeholder(float)
    # Deprecated (accepted for one release, with a one-line message; docs/migration.md): sample.sde_type is
    # sample.kernel for flow models; sample.eta is sample.noise_level for DDPM-family models (it wins there).
    sample.sde_type = ml_collections.config_dict.placeholder(str)
    sample.eta = ml_collections.config_dict.placeholder(float)
    sample.resolution = 512  # image side in pixels (multiple of the VAE downsampling factor)
    # (generic denoisers ignore sample.resolution and sample.max_sequence_length: their sample shape is the
    # pipeline's sample_shape, their text length the tokenizer's)
    # Text tokens of the encoders that take a length (FLUX's and SD3's T5, Qwen-Image's Qwen2.5-VL, Z-Image's Qwen3,
    # Wan's UMT5; SD3's T5 slot is zeros when the pipeline has no T5); CLIP-only families (SD, SDXL) always use 77.
    # 0 = the family's pipeline default, read from its __call__ (policies.settings.pipeline_text_length: FLUX.1 /
    # Kontext, Qwen-Image(-Edit), Z-Image, Wan 512; SD3 256). Recipes set their source's length (Flow-GRPO encodes 128
    # for SD3 and FLUX; docs/recipes.md).
    sample.max_sequence_length = 0
    # ---- family-specific sampling (ddpo_grpo/policies/, docs/models.md; families without the feature ignore them)
    # video families (Wan): frames per video in pixels, 4k + 1 for Wan's causal VAE; 0 = the family's default (81)
    sample.num_frames = 0
    # guidance-distilled models (FLUX.1-dev, Kontext): the guidance-embedding input of their single pass (3.5 in
    # FLUX.1-dev's recipes); sample.guidance_scale > 1 adds TRUE classifier-free guidance with the negative prompt
    sample.distilled_guidance = 3.5
    # two-expert models (Wan 2.2 A14B): which expert LoRA trains: "" = both, "transformer" (high noise) or
    # "transformer_2" (low noise); full fine-tuning (train.use_lora=False) trains both
    sample.experts = ""
    # two-expert models (Wan 2.2 A14B): the classifier-free guidance w of the low-noise expert (transformer_2, the
    # steps with t < boundary_ratio·1000), diffusers' guidance_scale_2; None or 0 = sample.guidance_scale. CFG runs
    # for both experts when sample.guidance_scale > 1 (as in the pipeline); refused on a one-transformer pipeline
    sample.guidance_scale_2 = ml_collections.config_dict.placeholder(float)
    # editing families that resize source images to a pixel area (Qwen-Image-Edit(-Plus): 1024·1024 for the
    # latent): that area in pixels; 0 = the pipeline's own. Smaller is cheaper but not what the model was trained on
    sample.source_pixels = 0
    # the denoiser's attention backend (diffusers' set_attention_backend: "native", "flash", "_native_cudnn",
    # "sage", …; the *_hub ones download kernels) where the family's model has one; "" = as loaded
    sample.attention_backend = ""
    # ---- language models (pretrained.model a transformers *ForCausalLM directory: ddpo_grpo/policies/causal_lm.py,
    # docs/language_models.md); the denoising fields above do not apply to them
    sample.temperature = 1.0  # the softmax temperature T of the rollouts (> 0); the trainer re-scores at the same T
    sample.top_p = 1.0  # nucleus sampling: draw among the most likely tokens whose mass reaches top_p; 1 = all tokens
    sample.max_prompt_length = 512  # tokens of a prompt (after the chat template); a longer one is refused, by row
    sample.max_response_length = 1024  # tokens generated per response at most (verl's data.max_response_length)
    # strings that end a response besides the tokenizer's EOS (the response keeps the stop string), e.g. ("\n\n",)
    sample.stop = ()
    # Flow-GRPO-Fast: only a window of sde_window_size consecutive steps is stochastic and trained,
    # the rest are ODE steps. 0 = off (every step stochastic). The window start is drawn per batch,
    # uniformly in sde_window_range = (lo, hi) inclusive; None = anywhere in (0, num_steps − size).
    sample.sde_window_size = 0
    sample.sde_window_range = ml_collections.config_dict.placeholder(tuple)  # None, overridable as '(0, 2)'
    # Memory of the stored trajectories (rollout latents x_0 … x_T, [B, T+1, …] per process): "float32" | "bfloat16" |
    # "float16". With a 16-bit store the sampler continues from the rounded latent and scores the rounded value, so
    # the stored transition is the one the policy drew; train/logp_mismatch grows with the rounding (docs/scaling.md
    # has the measured values per dtype).
    sample.store_dtype = "float32"
    # The VAE's dtype: "auto" | "fp32" | "bf16" | "fp16". "auto" = the checkpoint's rule: the weight dtype of the frozen
    # modules (mixed_precision), except float32 where the weights are float16 and the VAE's config says force_upcast
    # in a family whose pipeline honours it (SDXL, whose VAE overflows in float16: black / NaN images). Decoding casts
    # the latents to it and runs outside autocast. Flow-GRPO keeps the SD3, FLUX.1-dev, Qwen-Image(-Edit/-Plus) and Wan
    # VAEs in float32 (their recipes here set "fp32"); its Kontext trainer and Flow-Factory use the weight dtype.
    sample.vae_dtype = "auto"
    # Move the text encoders (and the VAE) to the accelerator only while they run: the epoch's prompt embeddings are
    # computed once at its start, then the encoders go back to the CPU; the VAE comes to the accelerator to decode.
    # Saves their memory for the denoiser's training at the cost of two host transfers per epoch. Off: all stay put.
    sample.offload_encoders = False

    # ---- training -----------------------------------------------------------------------------
    config.train = train = ml_collections.ConfigDict()
    train.batch_size = 4  # samples per training minibatch, PER PROCESS (need not equal sample.batch_size)
    train.gradient_accumulation_steps = 1  # minibatches per optimizer step (each with all its K steps)
    # "adamw" | "sgd". AdamW moves every parameter by about learning_rate per step whatever its
    # gradient's size, so when a policy gradient is mostly noise (small batches) its steps are mostly
    # noise too; SGD steps along the averaged gradient itself (step norm = learning_rate × train/grad_norm),
    # so its learning rate is read off the logged gradient norm (docs/metrics.md).
    train.optimizer = "adamw"
    train.sgd_momentum = 0.0  # "sgd" only
    train.learning_rate = 3e-4
    train.adam_beta1 = 0.9
    train.adam_beta2 = 0.999
    train.adam_weight_decay = 1e-4
    train.adam_epsilon = 1e-8
    train.warmup_steps = 0  # linear learning-rate warm-up over the first N optimizer steps
    # Gradient-norm clipping, logged before clipping as train/grad_norm: the norm is capped at
    # min(max_grad_norm, grad_norm_ratio × median of the last 20 steps' norms) (after 5 steps; ratio 0 = off).
    # The absolute cap is a backstop (policy-gradient norms are often ~1e-3, far below 1); the relative one
    # is what acts, on spikes. train/grad_clipped counts the clipped steps of an epoch.
    train.max_grad_norm = 1.0
    train.grad_norm_ratio = 3.0
    # Fail-safe (ddpo_grpo/guard.py): a step whose gradient norm is NaN / inf is skipped (train/skipped_steps);
    # this many skips in a row, or a non-finite weight, stop the run (exit status 1) naming the likely cause.
    train.max_consecutive_skips = 3
    # Epochs whose rewards are all NaN or whose prompt groups are all flat teach nothing (every advantage is
    # 0): the first is warned about; this many in a row stop the run. 0 = never stop.
    train.max_degenerate_epochs = 5
    # What is optimised (ddpo_grpo/updates.py, losses.py): "grpo" = the PPO clipped surrogate on the stored
    # transitions' log-probabilities (DDPO / Flow-GRPO); forward-process objectives on the rollout's final
    # samples, noised again (no transition log-probs: deterministic rollouts, any sampler, CFG-free training):
    # "awm" advantage-weighted matching, "nft" DiffusionNFT, "rwr" reward-weighted regression.
    train.objective = "grpo"
    train.forward_timesteps = 4  # forward objectives: noise levels per sample per epoch (K; one backward each)
    train.forward_time = "uniform"  # their density: "uniform" (one per stratum of (0, 1)) | "logit_normal"
    train.nft_beta = 1.0  # "nft": strength β of the implicit positive / negative policies (the paper's default)
    train.rwr_temperature = 1.0  # "rwr": weights exp(A / τ), normalised to mean 1; τ → 0 = best of group
    # Forward objectives: the sampling policy θ_s (it draws the rollouts and is the "nft" loss's v_old) may
    # trail the trained θ (DiffusionNFT's soft update, ddpo_grpo/weights.py LaggingSampler): after every
    # epoch θ_s ← d·θ_s + (1 − d)·θ, d = min(sampler_decay_max, sampler_decay_rate·max(0, n −
    # sampler_decay_flat)), n = optimizer steps so far. rate 0 = θ_s is θ at every epoch start (on-policy).
    # The paper's settings: (rate 0.001, max 0.5, flat 0) and, for a held anchor, (0.0075, 0.999, 75).
    train.sampler_decay_rate = 0.0
    train.sampler_decay_max = 0.5
    train.sampler_decay_flat = 0
    train.num_inner_epochs = 1  # passes over the stored transitions per epoch (1 = single-pass DDPO)
    # Trust region, PER SAMPLE: the per-sample ratio π_θ/π_old (the product over the latent's d dimensions)
    # is clipped to [1 − ε, 1 + ε] to first order (internally the per-dimension ratio to 1 ± ε/d), so one
    # value means the same at any resolution; train/approx_kl is per sample too. Converting a per-dimension
    # clip (Flow-GRPO's 1e-4, DDPO's 1e-4): multiply it by d = C·h·w of the latent (docs/migration.md).
    train.clip_range = 0.2
    # language models: DAPO's clip-higher, the ratio's upper bound 1 + clip_range_high (clip_range stays the lower
    # bound 1 − clip_range); 0 = clip_range (symmetric)
    train.clip_range_high = 0.0
    train.adv_clip_max = 5.0  # advantages are clipped to [−adv_clip_max, adv_clip_max]
    train.adv_mode = "zscore"  # "zscore" | "mean" | "global_std" | "buffer" | "running" (ddpo_grpo/advantages.py)
    # how zscore / global_std divide by a std: "max" = max(σ, 1e-6), σ the population std (ddof 0); "verl" = s + 1e-6
    # and "trl" = s + 1e-4, s the sample std (ddof 1), as those libraries compute GRPO's advantage
    train.adv_std_rule = "max"
    train.adv_buffer_size = 32  # "buffer" mode: rewards remembered per prompt across epochs
    train.adv_min_count = 16  # "buffer" mode: below this many, fall back to the batch's mean/std
    train.adv_ema_decay = 0.9  # "running" mode: decay of the running reward mean/variance
    train.beta = 0.0  # KL coefficient β of β·KL(π_θ ‖ π_ref); 0 skips the reference forward entirely
    # language models: fold β·KL into the reward instead of the loss (verl's algorithm.use_kl_in_reward, kl_penalty
    # "kl"): each response scores r − β·Σ_t (log π_old(y_t) − log π_ref(y_t)), its k1 sum at sampling time; needs
    # train.beta > 0 and reward.aggregation "reward"; the loss then has no KL term
    train.kl_in_reward = False
    train.kl_estimator = "gaussian"  # "k1" | "k2" | "k3" | "gaussian" (closed form, same std)
    train.kl_threshold = (
        0.0  # stop the inner epochs early when the mean per-sample approx KL to the sampler exceeds it; 0 = off
    )
    train.loss_aggregation = "mean"  # "mean" over trained transitions | "sum_norm" (Dr. GRPO: Σ_steps / C)
    train.loss_norm_constant = 0.0  # C of "sum_norm"; 0 = the number of trained steps per sample
    train.timestep_fraction = 1.0  # fraction of each sample's stochastic steps that are trained
    train.timestep_selection = "first"  # "first" ⌈fraction·S⌉ steps | "random" subset per sample
    train.shuffle_steps = True  # permute each sample's trained steps every inner epoch (as ddpo-pytorch)
    # "grpo", flow kernels: the weight of each trained step's policy term. "none"; "std_over_dt" = s_j / Δσ_j, the
    # transition's std over its σ decrement (= g/√Δσ for the flow_grpo and dance kernels, s = g·√Δσ): flow_grpo's Wan
    # trainer (scripts/train_wan2_1.py, `policy_loss * std_dev_t / dt` with its dt = √Δσ). It rescales each step's
    # gradient to velocity units, the same order at every step size and noise level (derivation: updates.step_weight);
    # the ratio and its clip are unchanged, the KL term is not weighted
    train.policy_step_weight = "none"
    train.cfg = True  # "grpo": use CFG in the training forward (must match sampling for an exact on-policy ratio)
    # "grpo" with CFG: "keep" = the exact gradient through both branches; "detach" = none through the
    # unconditional branch (Flow-GRPO's choice; the value, hence the ratio, is unchanged)
    train.cfg_uncond_grad = "keep"
    train.use_lora = True  # LoRA adapters via peft; False = full fine-tuning of the denoiser
    train.lora_rank = 4
    train.lora_alpha = 4.0
    train.lora_dropout = 0.0  # > 0 makes the recomputed log-prob differ from the stored one
    train.lora_target_modules = ()  # module names; () = the adapter's defaults (attention projections)
    # Recompute the activations of each of the denoiser's blocks (the adapter's shard_blocks) in the backward pass
    # instead of keeping them: activation memory ≈ one block's instead of all blocks', for ≈ one extra forward.
    train.gradient_checkpointing = False
    train.ema = False  # keep an EMA of the trainable weights, used for logged samples and the export
    train.ema_decay = 0.95
    # Reference policy of the KL term: "fixed" (the initial model), "hard" (copy the policy every
    # reference_update_freq epochs) or "soft" (ref ← α·ref + (1−α)·policy every reference_update_freq epochs).
    train.reference_update = "fixed"
    train.reference_update_freq = 10
    train.reference_mix_alpha = 0.9

    # Supervised-loss mixing (image-conditioned models; ddpo_grpo/supervised.py, schedules.py): the loss is
    # λ_sup · (the model's denoising loss on the rows' (condition, ground truth)) + λ_pg · (the objective above),
    # (λ_sup, λ_pg) per epoch from sup_schedule: "constant" (sup_weight, 1); "linear" (sup_weight decaying to
    # sup_floor over sup_ramp_epochs, 1); "staged" (sup_warmup_epochs supervised only, then sup_ramp_epochs of
    # hand-over, then GRPO with λ_sup = sup_floor). sup_weight 0 = no supervised term.
    train.sup_weight = 0.0
    train.sup_schedule = "constant"
    train.sup_warmup_epochs = 0
    train.sup_ramp_epochs = 0
    train.sup_floor = 0.0
    train.sup_key = "ground_truth"  # the row field holding the supervised target image (rows without it: skipped)
    # data consistency ‖D(x̂) − y‖² of the predicted clean image with the row's source image y, D the degradation:
    # "row" = each row's `degradation` field, or one spec for all (e.g. "blur:1.5"; ddpo_grpo/consistency.py)
    train.consistency_weight = 0.0
    train.degradation = ""

    # ---- rewards ------------------------------------------------------------------------------
    config.reward = reward = ml_collections.ConfigDict()
    reward.fns = {"jpeg_compressibility": 1.0}  # name -> weight (see reward.sources for user files)
    # "reward": advantages of the weighted sum Σ w·score; "advantage": each reward normalised within its
    # group by its own stat tracker, then Σ w·A (MixGRPO / DanceGRPO), for rewards on different scales.
    reward.aggregation = "reward"
    # Threads scoring batch b while batch b+1 is sampled (0 = score synchronously after each batch).
    # Results are collected in batch order, so the outcome does not depend on this setting.
    reward.num_workers = 1
    # Entries of the config file's own for rewards a command line drops from reward.fns are dropped with a note.
    reward.kwargs = {}  # name -> dict of keyword arguments for that reward's factory (only names in reward.fns)
    # name -> what it loads: a registry name or "path/to/file.py:fn". Config keys cannot contain dots,
    # so a user file gets an alias: reward.sources = {"mine": "my_reward.py:score"}, reward.fns = {"mine": 1.0}
    # (on the command line: --config.reward.sources="{'mine': 'my_reward.py:score'}" --config.reward.fns="{'mine': 1.0}").
    reward.sources = {}
    # Video families: an image reward scores every frame and the frame scores of a video are reduced by this rule
    # (reward_models/video.py): "mean" | "min" | "max" | "median" | "first" | "last"; a reward declaring
    # sample_kinds with "video" gets whole videos instead
    reward.frame_reduction = "mean"

    # ---- prompts ------------------------------------------------------------------------------
    config.prompts = prompts = ml_collections.ConfigDict()
    prompts.source = "simple"  # built-in name, a .txt file (one prompt a line) or a .json/.jsonl file of rows
    # "" = draw rows uniformly; a row field (e.g. "task") = every value of that field gets an equal share
    # of each epoch's prompts (for sources dominated by one kind of prompt)
    prompts.stratify_by = ""

    # ---- evaluation (ddpo_grpo/evaluation.py; scripts/evaluate.py does the same offline) ---------------
    # Deterministic samples (ODE / DDIM η=0, sample.eval_num_steps steps, fixed seeds) of eval.prompts,
    # scored by eval.reward; a reward's per-sample info (e.g. a judge's strict / partial) gives the
    # metrics and its group labels (info[group_by], else the row's field) the per-group table.
    config.eval = evaluation = ml_collections.ConfigDict()
    # evaluate once before training (report/before.json) and after every N epochs of training (epochs
    # N−1, 2N−1, … and the last), logging eval/* keys; 0 = never
    evaluation.freq = 0
    evaluation.prompts = ""  # a prompt source (as prompts.source); "" = prompts.source
    # The scorers of the held-out images (ddpo_grpo/heldout.py): a reward name or reward.sources alias, or several,
    # comma-separated, all scoring the same images — the first gives the headline eval/* keys, each other one its
    # own eval.<name>/* keys (e.g. "shapes,shapes_detector": the world judge and a scorer that shares no code with
    # it); "" = the first of reward.fns. The training reward is scored on the same images too (eval.train/score).
    evaluation.reward = ""
    # keyword arguments of the scorer's factory; with several scorers a dict name -> kwargs ({} with eval.reward "":
    # reward.kwargs of that reward)
    evaluation.reward_kwargs = {}
    # The hacking warning (ddpo_grpo/heldout.py): after an evaluation, paired with the untrained model's on the same
    # prompts and noise, z = mean difference / its standard error (the mean over groups). The run warns when the
    # training reward's z on the held-out images is at least hacking_rise_z while a held-out scorer's (one that is
    # not a training reward) is below hacking_hold_z.
    evaluation.hacking_rise_z = 3.0
    evaluation.hacking_hold_z = 1.0
    evaluation.group_by = ""  # a row field / per-sample info label to group by (e.g. "task"); "" = no groups
    # > 0: instead of every prompt × per_prompt, a balanced set of per_group samples per value of the rows'
    # group_by field (each group's prompts cycled, one new seed per pass); eval/<group_by>_mean/* weights
    # groups equally either way
    evaluation.per_group = 0
    evaluation.per_prompt = 1  # samples per prompt (with per_group: per_group / per_prompt prompts of each group)
    evaluation.limit = 0  # evaluate only the first N prompts (0 = all)
    evaluation.seed = 0  # initial-noise seed of the evaluation samples (fixed across epochs)

    # ---- paired probe (ddpo_grpo/probe.py): learning you can see at small effect sizes ---------------------
    # The same probe.prompts × probe.group_size samples (fixed prompts, initial and SDE noise) drawn with the
    # training sampler before the first update and after every probe.freq epochs of training: probe/reward,
    # probe/diff (paired difference to the untrained model) and probe/diff_se. 0 = off.
    config.probe = probe = ml_collections.ConfigDict()
    probe.freq = 0
    probe.prompts = 16
    probe.group_size = 4

    # ---- distributed (docs/scaling.md) -------------------------------------------------------------
    # The same command line runs as 1 process or P (torchrun / accelerate launch; GPUs with NCCL or CPU processes
    # with gloo). "ddp": every process holds the whole model, gradients are all-reduced. "fsdp": PyTorch FSDP2
    # (torch.distributed.fsdp.fully_shard) shards the denoiser's parameters, gradients and optimizer state over the P
    # processes, block by block (the adapter's shard_blocks; ddpo_grpo/sharding.py): per-process memory of those
    # ≈ 1/P; checkpoints are sharded (torch.distributed.checkpoint) and final/ is consolidated once.
    config.distributed = distributed = ml_collections.ConfigDict()
    distributed.strategy = "ddp"  # "ddp" | "fsdp"
    # fsdp: free each block's gathered parameters after its forward (and gather again for the backward): the
    # parameter memory of one block at a time, for a second all-gather per block. False keeps them until the backward.
    distributed.reshard_after_forward = True
    distributed.cpu_offload = False  # fsdp: parameters, gradients and optimizer state live on the CPU (FSDP2's offload)
    # fsdp: an epoch's sampling phase all-gathers every block once and keeps it for all its batches and denoising
    # steps (one all-gather per block per phase, not per block per step), for the memory of the whole denoiser (in
    # its compute dtype) on every process while sampling; on a GPU whose free memory cannot hold that, it gathers per
    # block per step (said at start-up). False: always per block per step (the least memory).
    distributed.gather_for_sampling = True
    # fsdp: class names of the denoiser's blocks to shard (each its own FSDP unit); () = the adapter's shard_blocks
    distributed.shard_blocks = ()

    # ---- logging ------------------------------------------------------------------------------
    config.logging = logging = ml_collections.ConfigDict()
    logging.tracker = "wandb"  # "wandb" (offline unless logged in) | "tensorboard" | "none"; metrics.jsonl always
    logging.project = "ddpo_grpo"  # wandb project
    logging.image_freq = 1  # save a grid of deterministic samples after every N epochs (and the last); 0 = never
    logging.num_images = 8  # images in that grid (the first prompts of the source, fixed seeds)
    logging.progress = True  # tqdm progress bars for sampling and training

    return config
