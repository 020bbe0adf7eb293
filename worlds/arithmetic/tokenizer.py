r"""ArithmeticWorld's tokenizer: a small byte-level BPE learned offline on the train split, saved as a
``Qwen2Tokenizer`` so that ``AutoTokenizer`` loads it as it is (transformers 5 rebuilds the tokenizer of a ``qwen2``
model directory as ``Qwen2Tokenizer`` from its vocabulary and merges, whatever ``tokenizer.json`` holds — so the
BPE is learned with that class's own normaliser (NFC), pre-tokenizer and byte-level alphabet).

* special tokens ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2;
* pre-tokenizer: Qwen2's split (a word with an optional leading space or punctuation mark, one digit — numbers are
  spelt digit by digit —, a run of punctuation, newlines, spaces), then bytes as characters (``ByteLevel``): every
  text encodes and decodes back exactly, nothing is unknown;
* model: a ``tokenizers`` BPE trained with ``BpeTrainer`` (at most :data:`VOCAB_SIZE` tokens, the 256 byte symbols as
  its initial alphabet) on the *train* split's texts only (question, ``\n``, worked answer);
* nothing is added around a text (like Qwen2's, the tokenizer puts no BOS in front).

BPE training is deterministic: the same split and ``tokenizers`` version give the same vocabulary and merges.

Text layout the model is pretrained on: ``question + "\n" + worked answer + <eos>``. A plain-text prompt is the bare
question (the model writes the ``\n`` first); the chat template renders a conversation as each message's content
followed by ``\n`` (an assistant message by ``<eos>``), so ``[{"role": "user", "content": question}]`` with
``add_generation_prompt=True`` is ``question + "\n"`` and the reply starts with the worked answer.
"""

from __future__ import annotations

import json

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIALS = (PAD, BOS, EOS)
VOCAB_SIZE = 512
SEPARATOR = "\n"  # between a question and its worked answer
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}{{ message['content'] }}{{ eos_token }}"
    "{%- else -%}{{ message['content'] }}{{ '\\n' }}{%- endif -%}"
    "{%- endfor -%}"
)


def corpus(rows: list[dict]) -> list[str]:
    r"""The texts the BPE learns from: ``question + "\\n" + worked answer`` per row."""
    return [r["prompt"] + SEPARATOR + r["extra_info"]["worked"] for r in rows]


def build_tokenizer(rows: list[dict] | None = None):
    """The ``Qwen2Tokenizer`` of the module docstring, its BPE learned on ``rows`` (default: the shipped train
    split); ``save_pretrained`` it beside the model."""
    from tokenizers import Regex
    from transformers import Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    from .problems import train_rows

    core = Tokenizer(models.BPE())
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(corpus(train_rows() if rows is None else rows), trainer)
    learned = json.loads(core.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in learned["merges"]]
    return Qwen2Tokenizer(
        vocab=learned["vocab"],
        merges=merges,
        unk_token=None,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        clean_up_tokenization_spaces=False,
        chat_template=CHAT_TEMPLATE,
        model_max_length=256,
    )


__all__ = ["BOS", "CHAT_TEMPLATE", "EOS", "PAD", "SEPARATOR", "VOCAB_SIZE", "build_tokenizer"]
