"""Fine-tune a diffusion / flow-matching generator with GRPO (group-relative policy optimisation).

Algorithm (one epoch; see ddpo_grpo/trainer.py for the phases):
  1. For P = images_per_epoch / group_size prompts, sample group_size images each with the current
     policy. Every denoising step is a Gaussian transition π_θ(x_{j+1} | x_j, c): DDIM with η > 0 for
     SD-family models (DDPO, Black et al. 2023), or an SDE that shares the ODE's marginals for flow
     models (Flow-GRPO, Liu et al. 2025; DanceGRPO; coefficients-preserving sampling). The latents,
     timesteps and log π_old of every step are stored.
  2. Score the images with the reward plug-ins (weighted sum) and turn rewards into group-relative
     advantages A = (r − μ_prompt) / σ_prompt (or another train.adv_mode), clipped to ±adv_clip_max.
  3. For train.num_inner_epochs passes over the STORED transitions: recompute log π_θ of each stored
     x_{j+1}, ratio ρ = exp(log π_θ − log π_old), minimise the PPO clipped surrogate
     max(−A·ρ, −A·clip(ρ, 1 ± ε)) (+ β·KL(π_θ ‖ π_ref)), averaged over trained transitions.
     Stop the inner passes early when the mean approximate KL to π_old exceeds train.kl_threshold.
     (train.objective = "awm" | "nft" | "rwr": a forward-process objective on the final samples instead,
     which needs no transition log-probs: ddpo_grpo/updates.py.)

Deliberate departures from the papers:
  - the trust region is per sample: train.clip_range bounds the ratio of a sample's whole transition
    (the product over its d latent dimensions) to 1 ± ε to first order, so one value means the same at any
    resolution (the peers clip the per-dimension ratio; theirs × d = ours, docs/migration.md); log-probs are
    still averaged over dimensions, as Flow-GRPO does, and train/approx_kl is per sample;
  - a group may span sampling batches and processes (all processes agree on the epoch's prompts);
  - steps with zero transition std (e.g. CPS's last step, ODE steps outside an SDE window) are never
    trained, since they have no density;
  - the reference for LoRA runs is the base model with adapters disabled, not a second copy.

Launch:
  python scripts/train.py                                         # embedded quickstart (CPU, minutes)
  python scripts/train.py --config config/sd.py:aesthetic         # a named experiment
  python scripts/train.py --config config/sd3.py:pickscore --config.pretrained.model=/path/to/sd3.5m
  accelerate launch --num_processes 8 scripts/train.py --config config/sd3.py:pickscore # many GPUs
  ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 scripts/train.py  # 2 CPU processes
Any field can be overridden: --config.train.learning_rate=1e-4 --config.sample.num_steps=20

Exit status: 0 done; 2 a bad input (config field, file, model, reward: one message naming it and the fix);
1 a run that stopped itself (non-finite updates, epochs that teach nothing; ddpo_grpo/guard.py); 130 interrupted
(Ctrl-C: the last checkpoint stays, and the line printed is the command that resumes).
--debug shows the traceback instead; --help lists the options.
"""

import os
import sys

import config

DEFAULT_CONFIG = os.path.join(os.path.dirname(config.__file__), "quickstart.py")  # config/ is an installed package


def build_parser():
    from ddpo_grpo.script_args import config_script_parser

    p = config_script_parser(
        __file__,
        __doc__,
        usage="%(prog)s [--config FILE.py[:NAME]] [--config.<field>=<value> ...] [--print_config] [--debug]",
        config_help="the experiment: a config file and one of its functions (default: config/quickstart.py; with "
        "--config.resume_from alone, the run's saved config)",
        fields_help="--config.<field>=<value>   set one config field, e.g. --config.num_epochs=4 (every field: "
        "config/base.py)\n"
        "--config.resume_from=RUN   continue RUN with its saved config.json (no --config needed; only num_epochs,\n"
        "                           save_freq, logging.*, eval.freq may change)",
    )
    p.add_argument(
        "--print_config",
        action="store_true",
        help="check the resolved config as a start would (every field and cross-field rule, at the launch's "
        "WORLD_SIZE), print it as JSON and exit: nothing is loaded or written",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """``argv``: a command line with the program first (default ``sys.argv``); the exit status."""
    argv = list(sys.argv if argv is None else argv)

    def train(args):
        from ddpo_grpo import run_dir
        from ddpo_grpo.cli import load_config
        from ddpo_grpo.script_args import config_argv

        config = load_config(config_argv(argv[0], args), DEFAULT_CONFIG)
        if args.print_config:  # a dry run refuses what a start would (at the launch's WORLD_SIZE), reading nothing
            from ddpo_grpo import distributed
            from ddpo_grpo.config_checks import validate

            validate(config, distributed.world_size())
            print(run_dir.config_text(config), end="")
            return
        from ddpo_grpo.trainer import Trainer

        run_dir.launch_command = ["python", *(a for a in argv if a not in ("--debug", "--print_config"))]
        Trainer(config).run()

    from ddpo_grpo.script_args import run_script

    return run_script(build_parser(), train, argv[1:])


if __name__ == "__main__":
    sys.exit(main())
