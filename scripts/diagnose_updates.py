"""Why an update does (not) learn, measured at a run's weights: the gradient's noise scale, the KL anchor's pull
and whether one epoch's update lowers the objective on samples it never saw (ddpo_grpo/update_diagnostics.py
derives each number).

    python scripts/diagnose_updates.py --config config/motion.py:motion_quick --epochs 4
    python scripts/diagnose_updates.py --checkpoint RUN --epochs 4
    python scripts/diagnose_updates.py --config config/motion.py:motion_tiny --epochs 3 --out /tmp/diag.json

The config is a training config, read as scripts/train.py reads it (the untrained weights); ``--checkpoint RUN``
(a run directory or one of its checkpoints) measures instead at that checkpoint's weights, optimizer state and
reference, with the run's saved config (there the KL anchor has something to pull against). Draws ``--epochs``
epochs of the config's size at the same weights (``--epochs`` sample phases of time), then one training epoch's
update. The run is only read: the trainer this builds lives in a temporary directory, removed at the end.
One process.
"""

import json
import os
import shutil
import sys
import tempfile

import config

DEFAULT_CONFIG = os.path.join(os.path.dirname(config.__file__), "quickstart.py")


def build_parser():
    from ddpo_grpo.script_args import config_script_parser

    p = config_script_parser(
        __file__,
        __doc__,
        usage="%(prog)s [--config FILE.py[:NAME]] [--config.<field>=<value> ...] [--epochs N] [--out FILE] [--debug]",
        config_help="the training config to diagnose (default: config/quickstart.py)",
        fields_help="--config.<field>=<value>   set one config field, as scripts/train.py takes it",
    )
    p.add_argument("--checkpoint", default="", help="a run directory or checkpoint: measure at its weights")
    p.add_argument("--epochs", type=int, default=4, help="epochs drawn at the same weights (the first is trained on)")
    p.add_argument(
        "--first_epoch",
        type=int,
        default=0,
        help="the epoch index of the first draw (prompts and noise); with --checkpoint, the epoch after it",
    )
    p.add_argument("--seed", type=int, default=0, help="the order of the groups in the minibatches")
    p.add_argument("--out", default="", help="also write the numbers as JSON to this file")
    return p


def main(argv: list[str] | None = None) -> int:
    """``argv``: the arguments after the program (default ``sys.argv[1:]``); the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = "scripts/diagnose_updates.py"

    def run(args):
        from ddpo_grpo.cli import UsageError, load_config
        from ddpo_grpo.script_args import config_argv
        from ddpo_grpo.trainer import Trainer
        from ddpo_grpo.update_diagnostics import diagnose, report_lines

        if args.checkpoint and (args.config or args.overrides):
            raise UsageError("--checkpoint measures with the run's saved config: drop --config and --config.* there")
        if args.checkpoint:  # the run's saved config (resume_from's reading), then a fresh trainer loads its state
            cfg = load_config([prog, f"--config.resume_from={args.checkpoint}"], DEFAULT_CONFIG)
            cfg.resume_from = ""
        else:
            cfg = load_config(config_argv(prog, args), DEFAULT_CONFIG)
        cfg.logdir, cfg.run_name = tempfile.mkdtemp(prefix="diagnose_updates_"), "diagnose"
        try:
            trainer = Trainer(cfg)
            first = trainer.state.resume(args.checkpoint, log=trainer.log) if args.checkpoint else args.first_epoch
            result = diagnose(trainer, epochs=args.epochs, first_epoch=first, seed=args.seed)
        finally:
            shutil.rmtree(cfg.logdir, ignore_errors=True)
        for line in report_lines(result):
            print(line)
        if args.out:
            from foundation.atomic_io import atomic_write_text

            atomic_write_text(args.out, json.dumps(result, indent=1))

    from ddpo_grpo.script_args import run_script

    return run_script(build_parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
