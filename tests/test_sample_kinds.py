"""Sample kinds and evaluation extras as plug-ins (ddpo_grpo/sample_kinds.py, ddpo_grpo/evaluation_extras.py).

What the embedded worlds register (MotionWorld's "motion" kind and extras, ShapesWorld's "image" extras); a user's
package that declares a kind of its own, its extras, a reward and a prompt source — exactly the entry points
docs/rewards.md lists — served by scripts/sample.py and scripts/evaluate.py on a tiny generic denoiser pipeline;
and a registration of the wrong type, refused with its name.
"""

import json
import sys
import textwrap

import pytest
import torch

from ddpo_grpo.evaluation_extras import NONE, EvaluationExtras, default_reward_kwargs, extras_for
from ddpo_grpo.sample_kinds import kind_of_pipeline, kind_of_samples
from tests.conftest import load_script
from tests.entry_points_kit import checkout_entry_points, dist_info, first_on_path  # noqa: F401

pytestmark = pytest.mark.usefixtures("one_thread", "checkout_entry_points")

#: a user's package: a "trace" kind (samples [frames, 8]), its extras, a reward and a prompt source
USER_MODULE = """
import json

from ddpo_grpo.evaluation_extras import EvaluationExtras
from ddpo_grpo.sample_kinds import SampleKind


def is_trace(samples):
    return samples.ndim == 3 and samples.shape[-1] == 8


def is_trace_pipeline(pipeline):
    return list(getattr(pipeline.config, "sample_shape", None) or [])[-1:] == [8]


def write(sample, out, stem, title=""):
    (out / f"{stem}.json").write_text(json.dumps({"title": title, "frames": len(sample)}))
    return {"file": f"{stem}.json"}


def rows():
    return [{"prompt": "a", "team": "red"}, {"prompt": "bb", "team": "blue"}, {"prompt": "ccc", "team": "red"}]


def energy(scale=1.0):
    def fn(samples, prompts, metadata):
        scores = [scale * float(x.abs().mean()) for x in samples]
        return scores, {"scale": [scale] * len(prompts)}

    return fn


def with_length(reward):
    def fn(samples, prompts, metadata):
        scores, info = reward(samples, prompts, metadata)
        return scores, {**info, "length": [float(len(p)) for p in prompts]}

    return fn


def set_metrics(samples, prompts):
    return {"trace/n": float(len(samples))}


def table(samples, prompts, values, groups, base=None, seed=0):
    return {"mean_length": sum(values["length"]) / len(prompts), "samples": len(samples)}


def format_table(table, title):
    return f"TRACE TABLE {title}: mean length {table['mean_length']:.2f} over {table['samples']}"


SAMPLE_KIND = SampleKind("trace", of_samples=is_trace, write=write, of_pipeline=is_trace_pipeline)
EVALUATION = EvaluationExtras(
    prompts="trace_rows",
    reward="trace_energy",
    reward_kwargs={"trace_energy": {"scale": 2.0}},
    group_by="team",
    per_group=2,
    per_sample=with_length,
    set_metrics=set_metrics,
    table=table,
    format_table=format_table,
    table_title="trace table",
    table_keys=("length",),
)
"""


@pytest.fixture
def user_package(tmp_path):
    """The user's package installed (its module and its dist-info first on sys.path) for one test."""
    (tmp_path / "trace_world.py").write_text(textwrap.dedent(USER_MODULE))
    groups = {
        "ddpo_grpo.sample_kinds": {"trace": "trace_world:SAMPLE_KIND"},
        "ddpo_grpo.evaluation_extras": {"trace": "trace_world:EVALUATION"},
        "ddpo_grpo.rewards": {"trace_energy": "trace_world:energy"},
        "ddpo_grpo.prompt_sources": {"trace_rows": "trace_world:rows"},
    }
    with first_on_path(dist_info(tmp_path, "trace_world", groups)):
        yield tmp_path
    sys.modules.pop("trace_world", None)


@pytest.fixture(scope="module")
def tiny_denoiser(tmp_path_factory):
    """A tiny generic DenoiserPipeline: samples [16 frames, 8 features] (no world's kind)."""
    from ddpo_grpo.tiny import build_tiny_denoiser

    path = tmp_path_factory.mktemp("tiny") / "denoiser"
    build_tiny_denoiser(path)
    return path


def test_the_worlds_register_their_kinds_and_extras():
    assert kind_of_samples(torch.zeros(2, 3, 8, 8)) == "image"
    assert kind_of_samples(torch.zeros(2, 5, 3, 8, 8)) == "video"
    assert kind_of_samples(torch.zeros(2, 24, 263)) == "motion"  # MotionWorld's plug-in
    assert kind_of_samples(torch.zeros(2, 24, 7)) == "array"
    motion, image = extras_for("motion"), extras_for("image")
    assert (motion.prompts, motion.reward, motion.per_group, motion.grid_columns) == (
        "motion_test",
        "motion_judge",
        100,
        4,
    )
    assert motion.keeps_all_samples and "physics" in motion.table_keys
    assert (image.prompts, image.reward, image.per_group, image.keeps_all_samples) == (
        "shapes_test",
        "shapes",
        128,
        False,
    )
    for name in ("shapes", "shapes_detector", "motion_judge"):
        assert default_reward_kwargs(name) == {"score": "strict"}
    assert default_reward_kwargs("jpeg_compressibility") is None
    assert extras_for("no_such_kind") is NONE


def test_a_users_package_adds_a_kind_to_sample_and_evaluate(user_package, tiny_denoiser, tmp_path, capsys):
    from ddpo_grpo.policies import load_pipeline

    assert kind_of_pipeline(load_pipeline(str(tiny_denoiser))) == "trace"
    fast = ["--model", str(tiny_denoiser), "--num_steps", "2", "--device", "cpu"]
    out = tmp_path / "samples"
    assert load_script("sample").main([*fast, "--prompts", "trace_rows", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "index.jsonl").read_text().splitlines()]
    assert [r["file"] for r in rows] == ["00000.json", "00001.json", "00002.json"]  # written by the user's kind
    assert json.loads((out / "00001.json").read_text()) == {"title": "bb", "frames": 16}

    ev = tmp_path / "eval"
    assert load_script("evaluate").main([*fast, "--out", str(ev)]) == 0  # every default from the user's extras
    data = json.loads((ev / "eval.json").read_text())
    args, metrics = data["args"], data["metrics"]
    assert (args["prompts"], args["reward"], args["group_by"], args["per_group"]) == (
        "trace_rows",
        "trace_energy",
        "team",
        2,
    )
    assert metrics["eval/num_samples/red"] == metrics["eval/num_samples/blue"] == 2  # per_group 2 of each team
    assert metrics["eval/scale"] == 2.0  # the extras' reward kwargs
    assert metrics["eval/length/blue"] == 2.0 and metrics["eval/length/red"] == 2.0  # per_sample: "a", "ccc"
    assert data["set_metrics"] == {"trace/n": 4.0} and data["table"] == {"mean_length": 2.0, "samples": 4}
    printed = capsys.readouterr().out
    assert f"TRACE TABLE trace table ({tiny_denoiser}): mean length 2.00 over 4" in printed
    table = printed[printed.index("team ") :]
    assert "scale" in table.splitlines()[0] and "length" not in table.splitlines()[0]  # shown by the user's table


def test_a_registration_of_the_wrong_type_is_named(tmp_path):
    groups = {
        "ddpo_grpo.sample_kinds": {"broken": "json:dumps"},
        "ddpo_grpo.evaluation_extras": {"broken": "json:dumps"},
    }
    with first_on_path(dist_info(tmp_path, "broken_world", groups)):
        with pytest.raises(
            ValueError, match=r"sample_kinds plug-in 'broken' .* must be a ddpo_grpo.sample_kinds.SampleKind"
        ):
            kind_of_samples(torch.zeros(2, 7))
        with pytest.raises(
            ValueError,
            match=r"evaluation_extras plug-in 'broken' .* must be a ddpo_grpo.evaluation_extras.EvaluationExtras",
        ):
            extras_for("broken")
    with pytest.raises(ValueError, match="give table and format_table together"):
        EvaluationExtras(table=lambda *args, **kwargs: {})
