"""Spec layer: bundled profiles, derived quantities, and bad input → SpecError (never anything else)."""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st
from typer.testing import CliRunner

from infersim.cli import app
from infersim.errors import SpecError
from infersim.specs import catalog, dump_spec
from infersim.specs.catalog import validate_kind

from conftest import bundled_ids

RUNNER = CliRunner()  # the runner fixture is function-scoped, which @given cannot use

# ---- the public contract: IDs that must exist (copied from shared/reference/ids.md and
# mlperf_benchmarks.md, because CI runs on a clean clone without shared/) -------------------
REQUIRED_HARDWARE = {
    "a100-sxm", "h100-sxm", "h100-pcie", "h200-sxm", "b200", "b300", "gb200-nvl72", "gb300-nvl72", "l40s",
    "mi300x", "mi325x", "mi355x", "tpu-v5e", "tpu-v5p", "tpu-v6e", "tpu-v7", "gaudi3",
}
REQUIRED_MODELS = {
    "deepseek-v3", "deepseek-r1", "llama2-70b", "llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "mixtral-8x7b",
    "gpt-oss-120b", "gpt-oss-20b", "qwen3-235b-a22b", "qwen3-vl-235b-a22b", "qwen3-32b", "kimi-k2",
}
# One scenario per MLPerf LLM benchmark and scenario (mlperf_benchmarks.md sections 1-2), named
# mlperf-MODEL-SCENARIO. Qwen3-VL's Interactive limits are unpublished, so it is not required.
MLPERF_SCENARIOS = {
    "llama2-70b": ("offline", "server", "interactive"),
    "mixtral-8x7b": ("offline", "server"),
    "llama3.1-405b": ("offline", "server", "interactive"),
    "llama3.1-8b": ("offline", "server", "interactive"),
    "deepseek-r1": ("offline", "server", "interactive"),
    "gpt-oss-120b": ("offline", "server", "interactive"),
    "qwen3-vl-235b-a22b": ("offline", "server"),
}
REQUIRED_SCENARIOS = {f"mlperf-{m}-{s}" for m, ss in MLPERF_SCENARIOS.items() for s in ss}
REQUIRED = {"hardware": REQUIRED_HARDWARE, "model": REQUIRED_MODELS, "scenario": REQUIRED_SCENARIOS}
ID_PATTERN = re.compile(r"^[a-z0-9]+(?:[.-][a-z0-9]+)*$")  # kebab-case; dots allowed (llama3.1-8b)


# ---- every bundled YAML ----------------------------------------------------------------------
def test_bundled_profile_loads_and_round_trips(bundled_profile):
    kind, path = bundled_profile
    spec = catalog.load(kind, path)
    again = validate_kind(kind, yaml.safe_load(dump_spec(spec)), file=f"{path} (round trip)")
    assert again == spec


@pytest.mark.parametrize("kind", sorted(REQUIRED))
def test_required_ids_are_bundled(kind):
    missing = REQUIRED[kind] - bundled_ids(kind)
    assert not missing, f"{kind} profiles missing from {catalog.FOLDERS[kind]}/: {sorted(missing)}"


@pytest.mark.parametrize("kind", sorted(REQUIRED))
def test_catalog_lists_every_bundled_id_in_kebab_case(kind):
    ids = bundled_ids(kind)
    assert ids <= set(catalog.list_ids(kind))
    assert [i for i in ids if not ID_PATTERN.match(i)] == []


def test_scenarios_name_bundled_models():
    models = bundled_ids("model")
    for sid in sorted(bundled_ids("scenario")):
        spec = catalog.load("scenario", sid)
        assert spec.model is None or spec.model in models, f"{sid}: model '{spec.model}' is not a bundled model"


@pytest.mark.parametrize("sid", sorted(REQUIRED_SCENARIOS))
def test_mlperf_scenario_kind_and_model_match_its_id(sid):
    if sid not in bundled_ids("scenario"):
        pytest.skip("missing; reported by test_required_ids_are_bundled")
    spec = catalog.load("scenario", sid)
    model, kind = next((m, s) for m, ss in MLPERF_SCENARIOS.items() for s in ss if sid == f"mlperf-{m}-{s}")
    assert (spec.kind, spec.model) == (kind, model)
    assert (spec.kind == "offline") == (getattr(spec, "slo", None) is None)


# ---- derived quantities ----------------------------------------------------------------------
# OpenAI counts gpt-oss's active parameters without the unembedding (models.md, Notes).
ACTIVE_EXCLUDES_UNEMBEDDING = {"gpt-oss-120b", "gpt-oss-20b"}


def test_parameter_counts_match_recomputed_figures(bundled_model):
    m = catalog.load("model", bundled_model)
    if getattr(m, "kind", None) is not None:
        pytest.skip("non-LLM model (diffusion / recommender): counts checked in test_workloads_non_llm.py")
    pub = m.published
    assert pub.computed_total_params_b and pub.computed_active_params_b, "published.computed_* must be given"
    # computed totals of multimodal models include the vision encoder (run once per image)
    total = m.total_params + (m.vision_encoder.params_b * 1e9 if m.vision_encoder else 0.0)
    active = m.active_params - (m.lm_head_params if bundled_model.stem in ACTIVE_EXCLUDES_UNEMBEDDING else 0.0)
    assert total / 1e9 == pytest.approx(pub.computed_total_params_b, rel=0.01)
    assert active / 1e9 == pytest.approx(pub.computed_active_params_b, rel=0.01)
    # official figures are rounded ("1T", "70B") but still within a few percent
    for official, derived in ((pub.total_params_b, total), (pub.active_params_b, active)):
        if official is not None:
            assert derived / 1e9 == pytest.approx(official, rel=0.05)


def test_deepseek_r1_is_671b_total_37b_active():
    m = catalog.load("model", "deepseek-r1")
    assert round(m.total_params / 1e9) == 671
    assert m.active_params / 1e9 == pytest.approx(37.55, abs=0.05)  # 37 B official, + embeddings


def test_kv_bytes_per_token():
    llama = catalog.load("model", "llama3.1-8b")
    # 32 layers x 2 (K and V) x 8 KV heads x 128 head_dim x 2 B (bf16) = 131,072 B
    assert llama.kv_bytes_per_token("bf16") == 32 * 2 * 8 * 128 * 2 == 131_072
    assert llama.kv_bytes_per_token("fp8") == 65_536
    r1 = catalog.load("model", "deepseek-r1")
    # MLA caches the latent: 61 layers x (kv_lora_rank 512 + rope 64) x 2 B = 70,272 B
    assert r1.kv_bytes_per_token("bf16") == 61 * (512 + 64) * 2 == 70_272
    assert r1.kv_bytes_per_token("fp8") == 70_272 / 2


def test_unknown_id_suggests_the_nearest():
    with pytest.raises(SpecError, match="h100-sxm"):
        catalog.resolve("hardware", "h100")
    with pytest.raises(SpecError, match="deepseek-r1"):
        catalog.load("model", "deepseek-r")


# ---- bad input: hypothesis mutations of valid profiles ---------------------------------------
BASES = {"hardware": "h100-sxm", "model": "llama3.1-8b", "scenario": "mlperf-deepseek-r1-server"}

# Fields that must be > 0 and have an upper bound, so 0, negatives, 1e300 and inf all fail.
BOUNDED_POSITIVE = {
    "hardware": ["memory.hbm_capacity_gib", "memory.hbm_bandwidth_tb_s", "compute.exp_rate_tera_per_s", "scale_up.domain_size",
                 "scale_up.bandwidth_gb_s", "scale_up.latency_us", "scale_out.bandwidth_gbit_s",
                 "scale_out.latency_us", "price.usd_per_hour"],
    "model": ["n_layers", "hidden_size", "vocab_size", "attention.n_heads", "attention.head_dim"],
    "scenario": ["workload.isl.mean", "workload.osl.mean", "slo.ttft_ms", "slo.tpot_ms", "max_batch"],
}
# Fields whose value must come from a fixed set.
ENUMS = {
    "hardware": ["scale_up.topology"],
    "model": ["native_precision"],
    "scenario": ["precision.weights", "precision.kv_cache"],
}
REQUIRED_KEYS = {
    "hardware": ["name", "vendor", "source", "compute", "memory", "scale_up", "scale_out", "price",
                 "compute.dense_tflops", "memory.hbm_capacity_gib", "memory.hbm_bandwidth_tb_s",
                 "scale_up.technology", "scale_up.domain_size", "scale_up.bandwidth_gb_s", "scale_up.topology",
                 "scale_out.bandwidth_gbit_s", "price.usd_per_hour", "price.source", "price.date"],
    "model": ["name", "source", "n_layers", "hidden_size", "vocab_size", "attention", "native_precision",
              "max_context_tokens", "attention.n_heads", "attention.n_kv_heads", "attention.head_dim"],
    "scenario": ["name", "source", "workload", "slo", "workload.isl", "workload.osl", "workload.isl.mean",
                 "slo.percentile"],
}
# Required keys that are not reported at their own path: a missing discriminator is reported
# at the mapping that lacks it ("<root>" for the document); slo.percentile has a default.
REQUIRED_KEYS["model"].append("attention.kind")
REQUIRED_KEYS["scenario"].append("kind")
REQUIRED_KEYS["scenario"].remove("slo.percentile")
DISCRIMINATOR_PARENT = {"attention.kind": "attention", "kind": "<root>"}

not_a_number = st.one_of(
    st.floats(max_value=0.0, allow_nan=False),
    st.sampled_from([1e300, -1e300, float("inf"), float("-inf"), float("nan"), 10**30]),
    st.floats(min_value=1e8, allow_nan=False),  # above every bound in BOUNDED_POSITIVE
    st.sampled_from(["fast", "", "3.35 TB/s", "1e3x", [], [1.0], {}, {"value": 1.0}]),
)
not_an_enum_value = st.one_of(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=12).filter(
        lambda s: s not in {"switch", "mesh", "torus", "pcie", "auto", "fp32", "tf32", "bf16", "fp16", "fp8", "int8",
                            "fp6", "fp4"}),
    st.sampled_from([0, 1.5, [], {}]),
)
unknown_key = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=16)
scalar_or_list = st.one_of(st.integers(), st.text(max_size=10), st.lists(st.integers(), max_size=3))


def _base(kind: str) -> dict:
    return yaml.safe_load(catalog.resolve(kind, BASES[kind]).read_text(encoding="utf-8"))


_BASE_DATA = {k: _base(k) for k in BASES}


def _mappings(data: dict, prefix: str = "") -> list[str]:
    """Dotted paths of every mapping inside ``data`` ('' = the document)."""
    out = [prefix]
    for key, value in data.items():
        if isinstance(value, dict):
            out += _mappings(value, f"{prefix}.{key}" if prefix else str(key))
    return out


def _parent_and_key(data: dict, dotted: str) -> tuple[dict, str]:
    *parents, key = dotted.split(".")
    for p in parents:
        data = data[p]
    return data, key


@st.composite
def field_mutations(draw, kind: str):
    """(mutated document, dotted path the error must name)."""
    data = copy.deepcopy(_BASE_DATA[kind])
    how = draw(st.sampled_from(["number", "enum", "missing", "unknown", "not_a_mapping"]))
    if how == "number":
        path = draw(st.sampled_from(BOUNDED_POSITIVE[kind]))
        parent, key = _parent_and_key(data, path)
        parent[key] = draw(not_a_number)
    elif how == "enum":
        path = draw(st.sampled_from(ENUMS[kind]))
        parent, key = _parent_and_key(data, path)
        parent[key] = draw(not_an_enum_value)
    elif how == "missing":
        path = draw(st.sampled_from(REQUIRED_KEYS[kind]))
        parent, key = _parent_and_key(data, path)
        del parent[key]
        path = DISCRIMINATOR_PARENT.get(path, path)
    elif how == "unknown":
        where = draw(st.sampled_from(_mappings(data)))
        parent = _parent_and_key(data, f"{where}.x")[0] if where else data
        key = draw(unknown_key.filter(lambda k: k not in parent))
        parent[key] = draw(scalar_or_list)
        path = f"{where}.{key}" if where else key
    else:
        path = draw(st.sampled_from([m for m in _mappings(data) if m]))
        parent, key = _parent_and_key(data, path)
        parent[key] = draw(scalar_or_list)
    return yaml.safe_dump(data, sort_keys=False).encode(), path


# Whole documents that are not a valid profile of any kind.
BAD_DOCUMENTS = [
    b"\xff\xfe\x00garbage",                                      # invalid UTF-8
    b"name: caf\xe9\n",                                          # latin-1, not UTF-8
    b"!!python/object/apply:os.system ['echo pwned']\n",         # unsafe tag
    b"name: !!python/object:builtins.dict {}\n",                 # unsafe tag on a field
    b"- a\n- b\n", b"42\n", b"just a string\n", b"", b"null\n", b"~\n",  # not a mapping
    b"!!set {a, b}\n",
    b"name: x\n  bad: indent\n", b"{unclosed: [1, 2\n", b"\t- tab\n",  # YAML syntax errors
    b"? [1, 2]\n: 3\n",                                          # unhashable key
    b"date: 2001-13-01\n",                                       # timestamp out of range
    b"n: " + b"9" * 5000 + b"\n",                                # int past Python's digit limit
    b"[" * 5000 + b"]" * 5000,                                   # nested too deeply
    b'"\\ud800": 1\n',                                           # lone surrogate key
]
bad_documents = st.one_of(
    st.sampled_from(BAD_DOCUMENTS),
    st.binary(max_size=200),
    st.binary(max_size=100).map(lambda b: b"\x80" + b),          # never valid UTF-8
    st.lists(st.integers(), max_size=5).map(lambda v: yaml.safe_dump(v).encode()),
    st.text(max_size=50).map(lambda t: t.encode("utf-8", "surrogatepass")),
)

_counter = itertools.count()


def _write(tmp_dir: Path, content: bytes) -> Path:
    path = tmp_dir / f"profile-{next(_counter)}.yaml"  # unique: the loader caches by path and mtime
    path.write_bytes(content)
    return path


@pytest.fixture(scope="module")
def tmp_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mutations")


def _assert_spec_error(kind: str, path: Path, field: str | None) -> SpecError:
    with pytest.raises(SpecError) as info:  # any other exception type fails the test
        catalog.load(kind, path)
    message = str(info.value)
    assert str(path) in message
    if field is not None:
        assert f": {field}: " in message, message
    return info.value


@pytest.mark.parametrize("kind", sorted(BASES))
def test_unmutated_bases_are_valid(kind, tmp_dir):
    catalog.load(kind, _write(tmp_dir, yaml.safe_dump(_BASE_DATA[kind]).encode()))


@given(case=st.one_of(*(st.tuples(st.just(k), field_mutations(k)) for k in sorted(BASES))))
def test_field_mutation_is_spec_error_naming_file_and_field(case, tmp_dir):
    kind, (content, field) = case
    _assert_spec_error(kind, _write(tmp_dir, content), field)


@given(content=bad_documents, kind=st.sampled_from(sorted(BASES)))
@example(content=b"price: {date: 2026-02-30}\n", kind="hardware")
def test_bad_document_is_spec_error_naming_file(content, kind, tmp_dir):
    _assert_spec_error(kind, _write(tmp_dir, content), None)


def test_missing_file_is_spec_error(tmp_dir):
    with pytest.raises(SpecError, match="no such file"):
        catalog.load("hardware", tmp_dir / "absent.yaml")


def _assert_cli_exit_2(runner, path: Path, *args: str) -> None:
    result = runner.invoke(app, ["profiles", "show", str(path), *args])
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and path.name in lines[0], result.stderr


@given(case=st.one_of(*(st.tuples(st.just(k), field_mutations(k)) for k in sorted(BASES))))
def test_cli_field_mutation_exits_2_with_one_line(case, tmp_dir):
    kind, (content, field) = case
    _assert_cli_exit_2(RUNNER, _write(tmp_dir, content), "--kind", kind)


@given(content=bad_documents, with_kind=st.booleans())
def test_cli_bad_document_exits_2_with_one_line(content, with_kind, tmp_dir):
    _assert_cli_exit_2(RUNNER, _write(tmp_dir, content), *(["--kind", "hardware"] if with_kind else []))


def test_dates_round_trip_as_strings():
    hw = catalog.load("hardware", "h100-sxm")
    assert isinstance(hw.price.date, str) and dt.date.fromisoformat(hw.price.date)


def test_exp_rate_is_optional_and_needs_its_source(tmp_dir):
    data = copy.deepcopy(_BASE_DATA["hardware"])
    assert catalog.load("hardware", _write(tmp_dir, yaml.safe_dump(data).encode())).compute.exp_rate == pytest.approx(3.86e12)
    del data["compute"]["exp_rate_source"]
    _assert_spec_error("hardware", _write(tmp_dir, yaml.safe_dump(data).encode()), "compute")
    del data["compute"]["exp_rate_tera_per_s"]  # neither: no exponential roof
    assert catalog.load("hardware", _write(tmp_dir, yaml.safe_dump(data).encode())).compute.exp_rate is None
    data["compute"]["exp_rate_source"] = "a source without a rate"
    _assert_spec_error("hardware", _write(tmp_dir, yaml.safe_dump(data).encode()), "compute")


OPTIONAL_FRACTIONS = {  # optional efficiency field -> (out-of-range values, a valid value)
    "mla_decode_fraction": ([0, -0.2, 1.5, "fast", [0.5]], 0.45),
    "all_reduce_fraction": ([0, -0.1, 1.6, "nvls"], 1.07),  # in-switch reduction beats the link rate
}


@pytest.mark.parametrize("field, value", [(f, v) for f, (bad, _) in OPTIONAL_FRACTIONS.items() for v in bad])
def test_optional_fraction_out_of_range_is_spec_error(field, value, tmp_dir):
    data = copy.deepcopy(_BASE_DATA["hardware"])
    data.setdefault("efficiency", {})[field] = value
    _assert_spec_error("hardware", _write(tmp_dir, yaml.safe_dump(data).encode()), f"efficiency.{field}")


@pytest.mark.parametrize("field", list(OPTIONAL_FRACTIONS))
def test_optional_fraction_is_optional_and_loads(field, tmp_dir):
    data = copy.deepcopy(_BASE_DATA["hardware"])
    data.setdefault("efficiency", {}).pop(field, None)
    assert getattr(catalog.load("hardware", _write(tmp_dir, yaml.safe_dump(data).encode())).efficiency, field) is None
    data["efficiency"][field] = good = OPTIONAL_FRACTIONS[field][1]
    assert getattr(catalog.load("hardware", _write(tmp_dir, yaml.safe_dump(data).encode())).efficiency, field) == good


@pytest.mark.parametrize("moe, field", [
    ({"n_groups": 8, "top_k_groups": 4}, None),
    ({}, None),
    ({"n_groups": 8}, "moe"),              # one without the other
    ({"top_k_groups": 4}, "moe"),
    ({"n_groups": 8, "top_k_groups": 9}, "moe"),   # more groups picked than exist
    ({"n_groups": 7, "top_k_groups": 4}, "moe"),   # 7 does not divide 256 experts
    ({"n_groups": 0, "top_k_groups": 4}, "moe.n_groups"),
])
def test_group_limited_routing_fields(moe, field, tmp_dir):
    """``moe.n_groups``/``moe.top_k_groups`` (DeepSeek's 8 groups, top 4) go together and must fit
    the experts; a bad pair is a spec error naming the moe block."""
    data = yaml.safe_load(catalog.resolve("model", "deepseek-r1").read_text())
    data["moe"].pop("n_groups"), data["moe"].pop("top_k_groups")
    data["moe"].update(moe)
    path = _write(tmp_dir, yaml.safe_dump(data).encode())
    if field is None:
        spec = catalog.load("model", path)
        assert (spec.moe.n_groups, spec.moe.top_k_groups) == (moe.get("n_groups"), moe.get("top_k_groups"))
    else:
        _assert_spec_error("model", path, field)
