"""Memory planner: a recipe's per-GPU peak memory, part by part, for DDP and FSDP, before launching anything.

    python scripts/plan.py --config config/flux.py:pickscore --gpus 8 --gpu_memory 80
    python scripts/plan.py --config config/qwen_image.py:pickscore --gpus 16 --config.train.gradient_checkpointing=True
    python scripts/plan.py --model config/model_configs/qwen2.5-7b --gpus 8 --gpu_memory 80 --config.train.use_lora=False

--model DIR plans DIR (a pipeline or causal LM directory, or a shipped name) instead of the recipe's pretrained.model;
a causal LM (a config.json naming a *ForCausalLM architecture) is planned from closed formulas
(ddpo_grpo/planner/causal_lm.py, lm_estimate.py) with the recipe's train / sample / distributed fields.

The model is built on the meta device from its configs (pretrained.model: a pipeline directory, or a hub id whose
configs ship under config/model_configs/); no weights are read and nothing is downloaded. The recipe is loaded as
train.py would load it under --gpus processes (WORLD_SIZE), so its per-process batch counts are the launched ones.
Prints the model's sizes, a table of the parts (GiB per process) for ddp and fsdp, and the one-line summary that
train.py prints at start-up. docs/scaling.md explains each part; ddpo_grpo/planner/estimate.py derives them.

Options (--help lists them with their defaults): --config FILE[:NAME], --config.<field>=<value>, --model DIR, --gpus N,
--gpu_memory GiB, --debug (--gpu-memory, the old spelling, still works until 0.3.0). Exit status 2 on a bad input (one
line naming it).
"""

import os
import sys

import config

DEFAULT_CONFIG = os.path.join(os.path.dirname(config.__file__), "quickstart.py")


def build_parser():
    from ddpo_grpo.script_args import config_script_parser

    p = config_script_parser(
        __file__,
        __doc__,
        usage="%(prog)s [--config FILE.py[:NAME]] [--config.<field>=<value> ...] [--model DIR] [--gpus N] "
        "[--gpu_memory GiB] [--debug]",
        config_help="the recipe: a config file and one of its functions (default: config/quickstart.py)",
        fields_help="--config.<field>=<value>   set one config field, e.g. --config.train.use_lora=False (every "
        "field: config/base.py)",
    )
    p.add_argument(
        "--model",
        metavar="DIR",
        default="",
        help="plan DIR (a pipeline or causal LM directory, or a shipped name) instead of the recipe's "
        "pretrained.model (default: the recipe's)",
    )
    p.add_argument("--gpus", type=int, default=1, metavar="N", help="processes (WORLD_SIZE), >= 1")
    p.add_argument("--gpu_memory", type=float, default=80.0, metavar="GiB", help="memory per GPU in GiB, > 0")
    return p


def main(argv: list[str] | None = None) -> int:
    """``argv``: a command line with the program first (default ``sys.argv``); the exit status."""
    argv = list(sys.argv if argv is None else argv)

    def run(args):
        from ddpo_grpo.cli import UsageError, load_config
        from ddpo_grpo.script_args import config_argv

        n, gib, model = args.gpus, args.gpu_memory, args.model
        if n < 1:
            raise UsageError(f"--gpus {n}: the number of processes must be ≥ 1")
        if not gib > 0:
            raise UsageError(f"--gpu_memory {gib:g}: GiB per GPU must be > 0")
        previous = os.environ.get("WORLD_SIZE")
        os.environ["WORLD_SIZE"] = str(n)  # the recipes derive per-process counts from it
        try:
            cfg = load_config(config_argv(argv[0], args), DEFAULT_CONFIG)
        finally:
            if previous is None:
                os.environ.pop("WORLD_SIZE")
            else:
                os.environ["WORLD_SIZE"] = previous
        if not (model or cfg.pretrained.model):
            raise UsageError("pretrained.model is empty (the tiny builds): the planner is for a real model's configs")
        from ddpo_grpo import planner
        from ddpo_grpo.planner import report

        p = planner.plan(cfg, n, gib, model=model or None)
        print(report.header(p))
        print()
        print(report.table(p))
        print()
        for e in p.estimates:
            print(report.summary(p, e))

    from ddpo_grpo.script_args import run_script

    return run_script(build_parser(), run, argv[1:])


if __name__ == "__main__":
    sys.exit(main())
