"""The memory planner on causal language models (ddpo_grpo/planner/causal_lm.py, lm_estimate.py): the closed formulas
equal what transformers builds and autograd keeps on tiny models, the shipped Qwen2.5 configs give the published
sizes, the parts move the way FSDP and LoRA say, scripts/plan.py prints the 7B table."""

import contextlib
import io
import json

import pytest
import torch

from ddpo_grpo import planner
from ddpo_grpo.planner import causal_lm, sources
from ddpo_grpo.planner.activations import _key
from tests.conftest import load_script
from tests.test_model_configs import README, _bounds

TINY = dict(vocab_size=97, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96)
LM_DIRS = ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b")


def _shape(config) -> causal_lm.LMShape:
    d = json.loads(config.to_json_string())
    d["architectures"] = [type(config).__name__.replace("Config", "ForCausalLM")]
    return causal_lm.LMShape.from_config(d)


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("family", ["qwen2", "llama", "llama_bias"])
def test_parameter_count_equals_the_built_model(family, tied):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if family == "qwen2":
        config, cls = Qwen2Config(num_hidden_layers=3, tie_word_embeddings=tied, **TINY), Qwen2ForCausalLM
    else:
        bias = family == "llama_bias"
        config = LlamaConfig(num_hidden_layers=3, tie_word_embeddings=tied, attention_bias=bias, **TINY)
        cls = LlamaForCausalLM
    model = cls(config)
    assert causal_lm.parameter_count(_shape(config)) == sum(p.numel() for p in model.parameters())


def test_lora_count_equals_the_targeted_linear_layers():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(num_hidden_layers=2, **TINY)
    model = Qwen2ForCausalLM(config)
    targets, rank = ("q_proj", "v_proj", "down_proj"), 8
    expected = sum(
        rank * (m.in_features + m.out_features)
        for n, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and n.split(".")[-1] in targets
    )
    assert causal_lm.lora_count(_shape(config), rank, targets)[0] == expected


def _saved_bytes(layers: int) -> int:
    """Bytes autograd saves in a tiny Qwen2's decoder forward (float32, SDPA on CPU), weights left out."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(num_hidden_layers=layers, attn_implementation="sdpa", **TINY))
    weights = {_key(t) for t in list(model.parameters()) + list(model.buffers())}
    saved = {}

    def pack(t):
        if _key(t) not in weights:
            saved[_key(t)] = t.untyped_storage().nbytes()
        return t

    ids = torch.randint(0, TINY["vocab_size"], (2, 16))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.model(input_ids=ids, use_cache=False)
    return sum(saved.values())


def test_one_decoder_layer_keeps_what_the_formula_says():
    """One more layer adds exactly T·a bytes (T = 2 × 16 tokens, a the per-token formula in float32)."""
    from transformers import Qwen2Config

    shape = _shape(Qwen2Config(num_hidden_layers=1, **TINY))
    assert _saved_bytes(2) - _saved_bytes(1) == 32 * causal_lm.layer_activation_bytes(shape, 4)


def test_kv_cache_equals_the_generated_cache():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(num_hidden_layers=2, **TINY)
    out = Qwen2ForCausalLM(config)(input_ids=torch.randint(0, 97, (3, 7)), use_cache=True)
    cache = out.past_key_values
    held = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    assert held == causal_lm.kv_cache_bytes(_shape(config), 3, 7, 4)


def _published(name: str) -> str:
    row = next(line for line in README.split("## Published sizes", 1)[1].splitlines() if f"| {name} |" in line)
    return [c.strip() for c in row.strip().strip("|").split("|")][2]


@pytest.mark.parametrize("name", LM_DIRS)
def test_shipped_configs_give_the_published_sizes(name):
    directory = sources.model_dir(name)
    config = causal_lm.read_config(directory)
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    value, tolerance = _bounds(_published(name))
    assert abs(causal_lm.parameter_count(causal_lm.LMShape.from_config(config)) - value) <= tolerance


def _config(**fields):
    from config.base import get_config

    c = get_config()
    c.mixed_precision = "bf16"
    for dotted, value in fields.items():
        section, name = dotted.split("__")
        setattr(getattr(c, section), name, value)
    return c


def test_fsdp_divides_the_sharded_parts():
    c = _config(train__use_lora=False, train__beta=0.001)
    one = planner.plan(c, 1, 80, model=str(sources.model_dir("qwen2.5-7b"))).estimate("ddp")
    eight = planner.plan(c, 8, 80, model=str(sources.model_dir("qwen2.5-7b"))).estimate("fsdp")
    for part in ("weights", "gradients", "optimizer", "reference"):
        assert one.parts[part] > 0
        assert eight.parts[part] == -(-one.parts[part] // 8), part
    assert eight.parts["activations"] == one.parts["activations"]  # per process: not sharded
    assert eight.parts["logits"] == one.parts["logits"]


def test_lora_is_much_smaller_than_full_fine_tuning():
    model = str(sources.model_dir("qwen2.5-7b"))
    full = planner.plan(_config(train__use_lora=False, train__beta=0.001), 1, 80, model=model)
    lora = planner.plan(_config(train__use_lora=True, train__lora_rank=16, train__beta=0.001), 1, 80, model=model)
    f, lo = full.estimate("ddp").parts, lora.estimate("ddp").parts
    assert lora.facts.lora_numel < 0.01 * full.facts.params
    assert lo["reference"] == 0 < f["reference"]  # LoRA's reference is the adapter switched off
    states = ("weights", "gradients", "optimizer", "reference")
    assert sum(lo[k] for k in states) < 0.2 * sum(f[k] for k in states)


def test_logits_dominate_checkpointed_activations_for_qwen():
    facts = planner.plan(_config(), 1, 80, model=str(sources.model_dir("qwen2.5-7b"))).facts
    assert facts.logits_per_sample > facts.activations.checkpointed_per_sample
    assert facts.logits_per_sample == 1536 * 152064 * (2 + 8)  # (512 + 1024) tokens × V × (bf16 + 2 float32)


def test_plan_script_prints_the_7b_table():
    plan = load_script("plan")
    out = io.StringIO()
    argv = ["plan.py", "--model", "config/model_configs/qwen2.5-7b", "--gpus", "8", "--gpu_memory", "80"]
    argv += ["--config.train.use_lora=False", "--config.distributed.strategy=fsdp", "--config.mixed_precision=bf16"]
    with contextlib.redirect_stdout(out):
        assert plan.main(argv) == 0
    text = out.getvalue()
    assert "Qwen2ForCausalLM; 7.616 B parameters" in text
    assert "| part (GiB per process) | ddp × 8 | fsdp × 8 |" in text and "| logits |" in text
    assert "memory plan (fsdp × 8): peak" in text and "per process" in text
