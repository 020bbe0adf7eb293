"""Sampling a causal language model from the command line: ``scripts/sample.py`` and ``scripts/evaluate.py`` on a
model whose samples are text (``sample_kinds.TEXT_KIND``: a causal-LM directory, or a run's output on one).

Settings (:func:`add_text_flags`; ``run_sampling.TEXT_SAMPLING_KEYS``): --temperature, --top_p, --max_prompt_length,
--max_response_length and --stop (repeatable; ``--stop ''`` = none), each from, in order: the flag; the run's own
(``final/sampling.json``; an older run's manifest "sampling", else its newest checkpoint's ``sample.*``); the model's
``sampling.json`` (``sampling_cli.MODEL_SAMPLING_FILE``); else the adapter's defaults (``LanguageSettings.unset``:
temperature 1, top_p 1, 512 prompt and 256 response tokens, no stop string). The values used, and where each came
from, are printed (``sampling_cli.resolve_settings``).

--greedy takes the most likely token at each step (``LanguageSettings.greedy``); the temperature then only scales
the recorded log-probs. The adapter refuses temperature 0, which has no distribution to train, hence a flag.

Seeds: response k of prompt i is drawn from its own generator seeded by ``evaluation.image_seed(--seed, i, k)``, so
``sample.py --seed s`` writes the responses ``evaluate.py --seed s`` scores, whatever --batch_size (up to the float
arithmetic of batching).

``index.jsonl`` of scripts/sample.py: one row per response, ``{"prompt": the row's prompt (text or chat messages),
"response": the text, "tokens": its length in tokens (its EOS included), "finished": it ended by EOS or a stop string
(false: cut at --max_response_length), "seed", "index": k (with --images_per_prompt > 1), "metadata": the row's other
fields}``; no file is written beside it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ddpo_grpo.cli import UsageError
from ddpo_grpo.run_sampling import TEXT_SAMPLING_KEYS
from ddpo_grpo.sample_kinds import TEXT_KIND, kind_of_pipeline, write_sample, written_formats
from ddpo_grpo.sampling_cli import resolve_settings


def is_text(pipeline) -> bool:
    """Whether ``pipeline`` samples text (a language model)."""
    return kind_of_pipeline(pipeline) == TEXT_KIND


def default_text_sampling() -> dict:
    """The settings no flag, run or sampling.json gives: the adapter's own defaults (``LanguageSettings.unset``)."""
    from dataclasses import asdict

    from ddpo_grpo.policies.causal_lm import LanguageSettings

    defaults = asdict(LanguageSettings.unset())
    return {key: defaults[key] for key in TEXT_SAMPLING_KEYS}


def add_text_flags(p: argparse.ArgumentParser) -> None:
    """The language-model sampling flags (module docstring); None = not given."""
    group = p.add_argument_group("language models (a causal-LM directory or a run's output on one)")
    group.add_argument("--temperature", type=float, default=None, help="softmax temperature, > 0 (sample.temperature)")
    group.add_argument("--top_p", type=float, default=None, help="nucleus mass in (0, 1] (sample.top_p)")
    group.add_argument("--max_prompt_length", type=int, default=None, help="prompt tokens at most (a longer: refused)")
    group.add_argument("--max_response_length", type=int, default=None, help="response tokens at most")
    group.add_argument(
        "--stop", action="append", default=None, help="a string that ends a response besides EOS; repeat for several"
    )
    group.add_argument(
        "--greedy", action="store_true", help="the most likely token at each step (the temperature is then unused)"
    )


def resolve_text(args) -> dict:
    """Fill the language-model settings left None (module docstring; the line saying where each came from is
    printed) and return ``{setting: value}``, ``greedy`` included."""
    used = resolve_settings(args, args.model, default_text_sampling())
    args.stop = [s for s in (args.stop or ()) if s]  # ('' = none: every text contains it)
    used["stop"] = list(args.stop)
    if args.greedy:
        print("greedy decoding: the most likely token at each step (--greedy)", flush=True)
    return {**used, "greedy": bool(args.greedy)}


#: the words of an adapter's refusal -> the flag that set the value
_FLAGS = (
    ("max_prompt_length + sample.max_response_length", "--max_prompt_length / --max_response_length"),
    ("sample.max_prompt_length=", "--max_prompt_length"),
    ("temperature", "--temperature"),
    ("top_p", "--top_p"),
    ("max_response_length", "--max_response_length"),
    ("pad token", "--model"),
    ("EOS", "--model / --stop"),
)


def text_policy(pipeline, args):
    """The ``CausalLMPolicy`` of ``pipeline`` with the resolved settings of ``args``; a refused setting is a UsageError
    naming its flag."""
    from ddpo_grpo.policies import build_policy
    from ddpo_grpo.policies.causal_lm import LanguageSettings

    settings = LanguageSettings.unset(
        temperature=args.temperature,
        top_p=args.top_p,
        max_prompt_length=args.max_prompt_length,
        max_response_length=args.max_response_length,
        stop=tuple(args.stop),
        greedy=bool(args.greedy),
    )
    try:
        return build_policy(pipeline, settings)
    except ValueError as exc:
        flag = next((f for words, f in _FLAGS if words in str(exc)), "--model")
        raise UsageError(f"{flag}: {exc}") from exc


def check_rows(policy, rows: list[dict], source: str) -> None:
    """Every prompt renders and fits --max_prompt_length (a UsageError naming --prompts), before any sampling."""
    for start in range(0, len(rows), 64):
        try:
            policy.encode_rows(rows[start : start + 64])
        except ValueError as exc:
            raise UsageError(f"--prompts {source!r}: {exc}") from exc


def write_text_samples(args, rows: list[dict], pipeline, device) -> list[dict]:
    """scripts/sample.py on a language model: index.jsonl under --out (module docstring); returns its rows."""
    from ddpo_grpo.evaluation import image_seed
    from ddpo_grpo.token_rollout import sample_tokens

    if args.noise_level:
        raise UsageError(f"--noise_level {args.noise_level}: a language model samples at --temperature; drop it")
    resolve_text(args)
    policy = text_policy(pipeline, args)
    check_rows(policy, rows, args.prompts)
    pipeline.to(device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    many = args.images_per_prompt > 1
    items = [(i, k) for i in range(len(rows)) for k in range(args.images_per_prompt)]
    index_rows = []
    with open(out / "index.jsonl", "w", encoding="utf-8") as index:
        for start in range(0, len(items), args.batch_size):
            batch = items[start : start + args.batch_size]
            seeds = [image_seed(args.seed, i, k) for i, k in batch]
            rollout = sample_tokens(policy, policy.model, [rows[i] for i, _ in batch], seeds=seeds)
            lengths, finished = rollout.response_lengths.tolist(), rollout.finished.tolist()
            for j, ((i, k), seed) in enumerate(zip(batch, seeds)):
                text = write_sample(rollout.samples[j], TEXT_KIND, out, f"{i:05d}", rows[i]["prompt"], policy)
                entry = {"prompt": rows[i]["prompt"], **text, "tokens": int(lengths[j]), "finished": bool(finished[j])}
                entry.update({"index": k} if many else {})
                entry["seed"] = seed
                metadata = {key: v for key, v in rows[i].items() if key != "prompt"}
                entry.update({"metadata": metadata} if metadata else {})
                index.write(json.dumps(entry) + "\n")
                index_rows.append(entry)
            index.flush()
            print(f"{len(index_rows)}/{len(items)} responses written to {out / 'index.jsonl'}", flush=True)
    print(written_formats(TEXT_KIND, {}), flush=True)
    return index_rows
