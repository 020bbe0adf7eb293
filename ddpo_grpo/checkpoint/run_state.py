"""A run's state: what a checkpoint holds, how a run resumes from one, and the export of its result to final/.

A checkpoint of epoch e (``files.save_checkpoint``, atomic) holds

    model.safetensors      the trainable weights (LoRA factors, or the whole denoiser), float32
    ema / reference / sampler.safetensors   the EMA, the reference's own weights, the lagging sampler (when used)
    optimizer.pt           the optimizer state
    state.json             epoch, global_step, the recent gradient norms (``optim.OptimizerStep``), the stat
                           tracker (``advantages``), every RNG of the process, and the config

and resuming from it replays epochs e + 1, … exactly as the uninterrupted run would have (every random stream of
an epoch derives from the seed and the epoch; the RNG state covers the rest).

``final/`` is written once, at the end, through the same atomic move into place as a checkpoint: the LoRA layers in
diffusers' format (``Pipeline.from_pretrained(base).load_lora_weights(final)``) or the complete pipeline, the
manifest ``ddpo_grpo_final.json`` (kind, base model, pipeline class) and ``sampling.json``: the settings the run
sampled and evaluated with, in the schema of a shipped model's recommended settings (``run_sampling``), so that
``scripts/sample.py --model <final or a copy of it>`` samples as the run evaluated.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

import torch

from ddpo_grpo import distributed
from ddpo_grpo.checkpoint.files import (
    TMP_PREFIX,
    find_checkpoint,
    fsync_tree,
    load_latest,
    move_into_place,
    save_checkpoint,
)
from ddpo_grpo.checkpoint.rng import rng_state, set_rng_state
from ddpo_grpo.checkpoint.sharded import load_sharded, save_sharded
from foundation.errors import ConfigError

#: config fields whose change makes a checkpoint's trainable weights not fit the model
WEIGHT_FIELDS = ("train.use_lora", "train.lora_rank", "train.lora_target_modules", "pretrained.model")


class RunState:
    """Save, resume and export the trainable state of a run (module docstring).

    ``weights``: ``components.Weights`` — the trainable params, and the ``train.ema`` average, the lagging sampler and
    the reference (objects with ``state_dict`` / ``load_state_dict``; None when not used).
    """

    def __init__(self, run_dir: Path, config, weights, optimizer, step, tracker, *, model=None, sharded=False):
        self.run_dir, self.config, self.params = Path(run_dir), config, weights.params
        self.optimizer, self.step, self.tracker = optimizer, step, tracker
        self.ema, self.reference, self.sampler = weights.ema, weights.reference, weights.sampler
        self.model, self.sharded = model, sharded  # sharded: an FSDP run (checkpoint/sharded.py), every process saves

    def _tensors(self) -> dict:
        """stem -> name -> tensor: the trainable weights and the other copies of them the run keeps."""
        tensors = {"model": dict(self.params)}
        if self.ema is not None:
            tensors["ema"] = self.ema.state_dict()
        if self.reference is not None and self.reference.state_dict():
            tensors["reference"] = self.reference.state_dict()
        if self.sampler is not None:
            tensors["sampler"] = self.sampler.state_dict()
        return tensors

    def _state(self, epoch: int) -> dict:
        return {
            "epoch": epoch,
            **self.step.state_dict(),
            "tracker": self.tracker.state_dict(),
            "config": json.loads(self.config.to_json()),
        }

    # ---- checkpoints ----------------------------------------------------------------------------
    def save(self, epoch: int) -> Path:
        """The checkpoint of epoch ``epoch``: by the main process, or by every process of a sharded run."""
        keep = self.config.num_checkpoint_limit or None
        if self.sharded:
            from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

            tensors = {**self._tensors(), "optimizer": get_optimizer_state_dict(self.model, self.optimizer)}
            rank, world = distributed.rank(), distributed.world_size()
            return save_sharded(
                self.run_dir, epoch, tensors, self._state(epoch), rank=rank, world=world, keep_last=keep
            )
        tensors = {stem: {k: t.detach().float().cpu() for k, t in sd.items()} for stem, sd in self._tensors().items()}
        state = {**self._state(epoch), "rng": rng_state()}
        return save_checkpoint(
            self.run_dir,
            epoch,
            tensors=tensors,
            optimizer_state=self.optimizer.state_dict(),
            state=state,
            keep_last=keep,
        )

    def resume(self, path, log=print) -> int:
        """Restore the newest complete checkpoint under ``path`` (falling back past a corrupt one, logged);
        return the epoch to continue at."""
        if self.sharded:
            return self._resume_sharded(path, log)
        loaded = load_latest(path, log=log)
        found, state = loaded["path"], loaded["state"]
        if state.get("sharded"):
            raise ConfigError(
                f"resume_from: checkpoint {found} is sharded (distributed.strategy='fsdp' over "
                f"{state.get('world_size')} processes); resume it the same way"
            )
        self.check_fits(loaded["tensors"]["model"], state.get("config", {}), found)
        with torch.no_grad():
            for name, p in self.params.items():
                p.copy_(loaded["tensors"]["model"][name].to(p.device))
        if loaded["optimizer_state"] is not None:
            self.optimizer.load_state_dict(loaded["optimizer_state"])
        if self.ema is not None and "ema" in loaded["tensors"]:
            self.ema.load_state_dict(loaded["tensors"]["ema"])
        if self.reference is not None and "reference" in loaded["tensors"]:
            self.reference.load_state_dict(loaded["tensors"]["reference"])
        if self.sampler is not None:  # a checkpoint of a run without one: the sampler starts from the weights
            saved = loaded["tensors"].get("sampler")
            self.sampler.load_state_dict(saved if saved is not None else loaded["tensors"]["model"])
        return self._restored(state, found, log, rng=True)

    def _resume_sharded(self, path, log) -> int:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

        found = find_checkpoint(path)
        tensors = {**self._tensors(), "optimizer": get_optimizer_state_dict(self.model, self.optimizer)}
        state = load_sharded(found, tensors, rank=distributed.rank(), world=distributed.world_size())
        set_optimizer_state_dict(self.model, self.optimizer, optim_state_dict=tensors["optimizer"])
        return self._restored(state, found, log, rng=False)

    def _restored(self, state: dict, found, log, *, rng: bool) -> int:
        self.tracker.load_state_dict(state["tracker"])
        if rng:
            set_rng_state(state["rng"])
        self.step.load_state_dict(state)
        log(f"resumed from {found} (continuing at epoch {state['epoch'] + 1})")
        return state["epoch"] + 1

    def check_fits(self, weights: dict, saved: dict, found: Path) -> None:
        """ConfigError explaining a checkpoint whose trainable weights do not fit this model."""
        missing = sorted(set(self.params) - set(weights))
        unexpected = sorted(set(weights) - set(self.params))
        shapes = [k for k in self.params if k in weights and tuple(weights[k].shape) != tuple(self.params[k].shape)]
        if not (missing or unexpected or shapes):
            return
        differ = []
        for field in WEIGHT_FIELDS:
            section, key = field.split(".")
            before, now = saved.get(section, {}).get(key), self.config[section][key]
            if before is not None and _plain(before) != _plain(now):
                differ.append(f"{field}={now!r} (the checkpoint's run: {before!r})")
        detail = (
            f"{len(missing)} trainable weights missing (e.g. {missing[:1]}), {len(unexpected)} unexpected, "
            f"{len(shapes)} of another shape"
        )
        if shapes:
            k = shapes[0]
            detail += f" (e.g. {k}: {tuple(weights[k].shape)} saved, {tuple(self.params[k].shape)} now)"
        fix = (
            ("; ".join(differ) + ": resume with the checkpoint's values")
            if differ
            else "check train.use_lora / train.lora_rank / pretrained.model against the resumed run"
        )
        raise ConfigError(f"resume_from: checkpoint {found} does not fit this model: {detail}. {fix}")

    # ---- the result -----------------------------------------------------------------------------
    def export(
        self, policy, manifest: dict, weights=contextlib.nullcontext, *, main: bool = True, base: str = ""
    ) -> Path:
        """Write ``<run>/final/`` atomically: the LoRA layers or the whole pipeline, under the ``weights()`` context
        (e.g. the EMA applied), the manifest and, from its "sampling" (``final_manifest``), ``sampling.json``.
        Every process calls it; the main one writes. A sharded run's trainable weights are gathered to the main
        process alone, one tensor at a time (the others keep nothing), and a full fine-tune's pipeline is saved from
        the base's other components with the gathered denoiser in place of the base's (which is not read again)."""
        from ddpo_grpo.console import quiet_library_logs
        from ddpo_grpo.policies import FINAL_MANIFEST, load_pipeline
        from ddpo_grpo.run_sampling import MODEL_SAMPLING_FILE

        final = self.run_dir / "final"
        with weights():
            gathered = self._gathered() if self.sharded else None
            if not main:
                return final
            tmp = self.run_dir / f"{TMP_PREFIX}final-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            sampling = manifest.get("sampling", {})
            try:
                with quiet_library_logs():
                    if manifest["kind"] == "lora":
                        policy.save_lora(tmp, policy.denoiser, state_dict=gathered)
                    elif gathered is None:
                        policy.save_pipeline(tmp)
                    else:
                        fresh = load_pipeline(base, components=whole_denoisers(policy, gathered))
                        fresh.save_pretrained(str(tmp))
                described = {k: v for k, v in manifest.items() if k != "sampling"}  # (one file holds the settings)
                (tmp / FINAL_MANIFEST).write_text(json.dumps(described, indent=2))
                (tmp / MODEL_SAMPLING_FILE).write_text(json.dumps(sampling, indent=2) + "\n")
                fsync_tree(tmp)
                move_into_place(tmp, final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        return final

    def _gathered(self) -> dict:
        """The sharded model's trainable weights (and persistent buffers) whole, on the CPU of process 0 only ({} on
        the others): ``get_model_state_dict`` gathers them one tensor at a time (a collective)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
        return get_model_state_dict(self.model, options=options)


def whole_denoisers(policy, state: dict) -> dict:
    """pipeline component name -> a plain (unsharded) CPU copy of each denoiser module of ``policy`` holding the
    tensors of ``state`` (named as in ``policy.denoiser``; every parameter of a full fine-tune), built empty and
    filled by assignment (no second copy)."""
    from ddpo_grpo import sharded_loading

    names = {id(m): n for n, m in policy.pipeline.components.items()}
    prefixes = {id(m): p for p, m in policy.denoiser.named_modules()}
    out = {}
    for module in policy.denoiser_modules():
        head = f"{prefixes[id(module)]}." if prefixes[id(module)] else ""
        own = {k[len(head) :]: v for k, v in state.items() if k.startswith(head)}
        out[names[id(module)]] = sharded_loading.whole_from(module, own)
    return out


def final_manifest(config, policy, model_path: str) -> dict:
    """What ``RunState.export`` writes beside the weights: kind (lora | full), base model and pipeline class (the
    manifest), and "sampling", the run's sampling settings (``run_sampling.settings_of_run``), written as
    ``final/sampling.json`` (scripts/sample.py and evaluate.py sample a run's output with them by default)."""
    from ddpo_grpo.policies import canonical_model
    from ddpo_grpo.run_sampling import settings_of_run

    manifest = (
        {"kind": "lora", "base_model": canonical_model(model_path)} if config.train.use_lora else {"kind": "full"}
    )
    manifest["pipeline_class"] = type(policy.pipeline).__name__
    manifest["sampling"] = settings_of_run(config, policy)
    return manifest


def _plain(value):
    """A config value in comparable form (tuples and lists alike)."""
    return list(value) if isinstance(value, (list, tuple)) else value
