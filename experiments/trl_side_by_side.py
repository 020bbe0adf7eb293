"""TRL's GRPOTrainer on a model directory and a JSONL of prompts: held-out accuracy and wall time (issue 37, 6b).

The TRL half of the side-by-side: the same tiny model, data, reward and number of generated samples as a run of ours
(`config/llm.py:quick`), so that held-out accuracy and wall time can be compared. TRL is not a dependency of the
package: run this in the experiment venv of docs/experiments/2026-11-27-trl-equivalence.md, e.g.

    /work/trlvenv/bin/python experiments/trl_side_by_side.py --model DIR --train train.jsonl \
        --heldout heldout.jsonl --samples 2048 --group 8 --out trl_seed0.json --seed 0

Rows are `{prompt, ground_truth, data_source}` (prompt: text, or a list of chat messages). The reward is 1.0 when the
number after the response's last `####` equals `ground_truth` numerically, else 0.0 (`math_score`). Training runs
`samples // (prompts_per_step · group)` optimiser steps of `prompts_per_step · group` generated responses each, fp32,
a constant learning rate, no gradient checkpointing. Held-out accuracy is the mean score of one greedy response and
of one sampled at T = 1 (top-k and top-p off) per held-out row, before (unless --no-base-eval) and after training.
The JSON written holds the settings, the accuracies, the training wall time (generation included, evaluation not),
the number of responses generated and TRL's per-step log.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from pathlib import Path

#: the number after the last "####": an optional sign, digits with optional thousands commas, an optional fraction
_ANSWER = re.compile(r"####\s*([-+]?\d[\d,]*(?:\.\d+)?)")


def math_score(response: str, ground_truth) -> float:
    """1.0 when the response's final answer (the number after its last ``####``) equals ``ground_truth``."""
    found = _ANSWER.findall(response)
    if not found:
        return 0.0
    try:
        return float(math.isclose(float(found[-1].replace(",", "")), float(str(ground_truth).replace(",", ""))))
    except ValueError:
        return 0.0


def _text(completion) -> str:
    """A completion as TRL hands it to a reward: text, or a list of messages for chat prompts."""
    return completion if isinstance(completion, str) else completion[-1]["content"]


def math_reward(completions, ground_truth, **_) -> list[float]:
    """TRL reward function: ``math_score`` per completion (the dataset's ground_truth column comes as a kwarg)."""
    return [math_score(_text(c), g) for c, g in zip(completions, ground_truth, strict=True)]


def read_rows(path: str) -> list[dict]:
    """JSONL rows with ``prompt`` and ``ground_truth`` (``data_source`` kept when present)."""
    rows = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        if "prompt" not in row or "ground_truth" not in row:
            raise SystemExit(f"{path}:{number}: a row needs 'prompt' and 'ground_truth' (got {sorted(row)})")
        rows.append({"prompt": row["prompt"], "ground_truth": str(row["ground_truth"]),
                     "data_source": str(row.get("data_source", "math"))})  # fmt: skip
    if not rows:
        raise SystemExit(f"{path}: no rows; give a JSONL file of {{prompt, ground_truth, data_source}} rows")
    return rows


def _prompt_text(tokenizer, prompt) -> str:
    if isinstance(prompt, str):
        return prompt
    return tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)


def accuracy(model, tokenizer, rows: list[dict], max_new_tokens: int, sample: bool, seed: int, batch: int = 64):
    """Mean ``math_score`` of one response per row: greedy, or sampled from softmax(logits) (T = 1, no top-k/p)."""
    import torch

    was_training = model.training
    model.eval()
    padding_side, tokenizer.padding_side = tokenizer.padding_side, "left"
    torch.manual_seed(seed)
    scores, lengths = [], []
    with torch.no_grad():
        for start in range(0, len(rows), batch):
            chunk = rows[start : start + batch]
            texts = [_prompt_text(tokenizer, r["prompt"]) for r in chunk]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            options = (
                {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0} if sample else {"do_sample": False}
            )
            out = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id, **options)
            for row, ids in zip(chunk, out[:, enc["input_ids"].shape[1] :], strict=True):
                keep = ids[ids != tokenizer.pad_token_id]
                scores.append(math_score(tokenizer.decode(keep, skip_special_tokens=True), row["ground_truth"]))
                lengths.append(int(keep.numel()))
    tokenizer.padding_side = padding_side
    model.train(was_training)
    return sum(scores) / len(scores), sum(lengths) / len(lengths)


def evaluate(model, tokenizer, rows, args) -> dict:
    greedy, greedy_len = accuracy(model, tokenizer, rows, args.max_completion_length, False, args.seed)
    sampled, sampled_len = accuracy(model, tokenizer, rows, args.max_completion_length, True, args.seed)
    return {"greedy": greedy, "sampled_t1": sampled, "greedy_length": greedy_len, "sampled_length": sampled_len}


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", required=True, help="a transformers causal-LM directory (config.json + tokenizer)")
    p.add_argument("--train", required=True, help="JSONL of {prompt, ground_truth, data_source} to train on")
    p.add_argument("--heldout", required=True, help="JSONL of held-out rows to measure accuracy on")
    p.add_argument("--out", required=True, help="the JSON file to write")
    p.add_argument("--samples", type=int, required=True, help="responses to generate in training, in all")
    p.add_argument("--group", type=int, default=8, help="responses per prompt (TRL num_generations)")
    p.add_argument("--prompts-per-step", type=int, default=8, help="prompts per optimiser step")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--beta", type=float, default=0.0, help="KL coefficient (TRL's k3 estimator)")
    p.add_argument("--loss-type", default="dapo", help="TRL loss_type: grpo, dr_grpo, dapo, bnpo, ...")
    p.add_argument("--scale-rewards", default="group", choices=["group", "batch", "none"])
    p.add_argument("--epsilon", type=float, default=0.2, help="clip range below 1")
    p.add_argument("--epsilon-high", type=float, default=None, help="clip range above 1 (default: --epsilon)")
    p.add_argument("--num-iterations", type=int, default=1, help="optimisation passes over each generation batch")
    p.add_argument("--max-completion-length", type=int, default=64)
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature in training")
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-base-eval", action="store_true", help="skip the held-out evaluation before training")
    p.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay (ours: train.adam_weight_decay)")
    p.add_argument(
        "--save", default="", help="also save the trained model and tokenizer here (for scripts/evaluate.py)"
    )
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse(argv)
    import datasets
    import torch
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    per_step = args.prompts_per_step * args.group
    steps = args.samples // per_step
    if steps < 1:
        raise SystemExit(f"--samples={args.samples} is below one step of {per_step} responses; raise it")
    train_rows, heldout_rows = read_rows(args.train), read_rows(args.heldout)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    if tokenizer.pad_token is None:
        raise SystemExit(f"{args.model}: the tokenizer has no pad token; save one with it (tokenizer.pad_token)")
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    result = {"settings": vars(args), "trl": trl.__version__, "torch": torch.__version__, "steps": steps}
    if not args.no_base_eval:
        result["base"] = evaluate(model, tokenizer, heldout_rows, args)

    config = GRPOConfig(
        output_dir=str(Path(args.out).with_suffix("")) + "_trl",
        per_device_train_batch_size=per_step,
        gradient_accumulation_steps=1,
        num_generations=args.group,
        max_steps=steps,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_grad_norm=args.max_grad_norm,
        weight_decay=args.weight_decay,
        beta=args.beta,
        use_bias_correction_kl=False,  # plain k3, as ours (TRL 1.16's default multiplies the KL by the ratio)
        loss_type=args.loss_type,
        scale_rewards=args.scale_rewards,
        epsilon=args.epsilon,
        epsilon_high=args.epsilon_high,
        num_iterations=args.num_iterations,
        max_completion_length=args.max_completion_length,
        temperature=args.temperature,
        seed=args.seed,
        bf16=False,
        use_cpu=not torch.cuda.is_available(),
        gradient_checkpointing=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=math_reward,
        args=config,
        train_dataset=datasets.Dataset.from_list(train_rows),
        processing_class=tokenizer,
    )
    start = time.perf_counter()
    trainer.train()
    result["train_wall_s"] = time.perf_counter() - start
    result["responses_generated"] = steps * per_step
    result["final"] = evaluate(trainer.model, tokenizer, heldout_rows, args)
    if args.save:
        trainer.model.save_pretrained(args.save)
        tokenizer.save_pretrained(args.save)
    result["log"] = [entry for entry in trainer.state.log_history if "reward" in entry or "loss" in entry]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(json.dumps({k: result[k] for k in ("steps", "train_wall_s", "final") if k in result}))
    return result


if __name__ == "__main__":
    main()
