"""Memory planner: a recipe's per-GPU peak memory, part by part, for DDP and FSDP, before launching anything.

    python scripts/plan.py --config config/flux.py:pickscore --gpus 8 --gpu-memory 80
    python scripts/plan.py --config config/qwen_image.py:pickscore --gpus 16 --config.train.gradient_checkpointing=True
    python scripts/plan.py --model config/model_configs/qwen2.5-7b --gpus 8 --gpu-memory 80 --config.train.use_lora=False

--model DIR plans DIR (a pipeline or causal LM directory, or a shipped name) instead of the recipe's pretrained.model;
a causal LM (a config.json naming a *ForCausalLM architecture) is planned from closed formulas
(ddpo_grpo/planner/causal_lm.py, lm_estimate.py) with the recipe's train / sample / distributed fields.

The model is built on the meta device from its configs (pretrained.model: a pipeline directory, or a hub id whose
configs ship under config/model_configs/); no weights are read and nothing is downloaded. The recipe is loaded as
train.py would load it under --gpus processes (WORLD_SIZE), so its per-process batch counts are the launched ones.
Prints the model's sizes, a table of the parts (GiB per process) for ddp and fsdp, and the one-line summary that
train.py prints at start-up. docs/scaling.md explains each part; ddpo_grpo/planner/estimate.py derives them.

Options: --config FILE[:NAME], --config.<field>=<value>, --model DIR, --gpus N (processes, ≥ 1; default 1), --gpu-memory GiB
(per GPU, > 0; default 80), --debug. Exit status 2 on a bad input (one line naming it).
"""

import os
import sys

import config

DEFAULT_CONFIG = os.path.join(os.path.dirname(config.__file__), "quickstart.py")


def _take(argv: list[str], flag: str, default: str) -> tuple[str, list[str]]:
    """The value of ``flag`` (``--flag V`` or ``--flag=V``) and argv without it."""
    value, rest, i = default, [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == flag and i + 1 < len(argv):
            value, i = argv[i + 1], i + 2
            continue
        if arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        i += 1
    return value, rest


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv[1:]):
        print(__doc__)
        return 0
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    gpus, argv = _take(argv, "--gpus", "1")
    memory, argv = _take(argv, "--gpu-memory", "80")
    model, argv = _take(argv, "--model", "")

    def run():
        from ddpo_grpo.cli import UsageError, load_config

        try:
            n, gib = int(gpus), float(memory)
        except ValueError:
            raise UsageError(
                f"--gpus {gpus!r} / --gpu-memory {memory!r}: give an integer ≥ 1 and a number > 0"
            ) from None
        if n < 1:
            raise UsageError(f"--gpus {n}: the number of processes must be ≥ 1")
        if not gib > 0:
            raise UsageError(f"--gpu-memory {memory}: GiB per GPU must be > 0")
        previous = os.environ.get("WORLD_SIZE")
        os.environ["WORLD_SIZE"] = str(n)  # the recipes derive per-process counts from it
        try:
            cfg = load_config(argv, DEFAULT_CONFIG)
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

    from ddpo_grpo.cli import run_main

    return run_main(run, debug=debug)


if __name__ == "__main__":
    sys.exit(main())
