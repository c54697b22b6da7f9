"""The step profile splits real steps of both implementations into categories that add up."""

from __future__ import annotations

from core.bench.overhead import CATEGORIES, category, curve_table, profile_steps, profile_table
from core.runtime.prepared import PreparedModel
from core.runtime.weights.packed import packing_available
from tests.conftest import make_model, tiny_llama_config


def test_operators_fall_into_the_categories_that_explain_a_step() -> None:
    assert category("aten::mm") == category("aten::addmm") == category("mkldnn::_linear_pointwise") == "weights"
    assert category("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert category("aten::cat") == category("aten::copy_") == "cache"
    assert category("aten::mul") == "other ops"
    assert category("compiled layers") == "compiled layers"


def test_every_implementation_is_profiled_and_their_parts_add_up() -> None:
    model = make_model(tiny_llama_config(96), seed=0)
    profiles = profile_steps(model, sizes=(1, 6), context=512, repeats=5)
    names = ["transformers", "lean"] + (
        ["lean, packed weights"] if packing_available() else []
    )  # fp32: no plain row copy
    names.append("lean, compiled")  # the plain-layout model compiles (the packed one has no plain weights)
    assert [(p.implementation, p.size) for p in profiles] == [(n, s) for s in (1, 6) for n in names]
    for p in profiles:
        assert set(p.parts_ms) == set(CATEGORIES)
        compiled = "compiled" in p.implementation  # products, head and attention inside the compiled code (6 rows too)
        assert (p.parts_ms["weights"] > 0) != compiled and (p.parts_ms["attention"] > 0) != compiled
        assert (p.parts_ms["compiled layers"] > 0) == compiled
    cache_copies = {p.implementation: p.parts_ms["cache"] for p in profiles if p.size == 1}
    assert cache_copies["lean"] < cache_copies["transformers"]  # no concatenation of the whole cache per layer
    table = profile_table(profiles)
    assert table.count("\n") == 1 + len(profiles) and "| lean | 6 |" in table


def test_the_curve_table_gives_each_models_step_costs_in_ms_and_in_one_token_steps() -> None:
    model = make_model(tiny_llama_config(96), seed=0)
    table = curve_table({"fp32": PreparedModel(model)}, sizes=(1, 2, 4))
    header, rule, ms, ratios = table.splitlines()
    assert header == "| step cost curve | 1 | 2 | 4 |" and rule == "|---|---:|---:|---:|"
    assert ms.startswith("| fp32, ms | ") and all(float(cell) > 0 for cell in ms.strip("|").split("|")[1:])
    cells = [float(cell) for cell in ratios.strip("|").split("|")[1:]]
    assert ratios.startswith("| fp32, x 1-token | 1.00 |") and all(c > 0 for c in cells)
    default = curve_table({"fp32": PreparedModel(model)})  # on the CPU, the sizes CPU calibration measures
    assert default.splitlines()[0] == "| step cost curve | 1 | 2 | 4 | 8 | 16 | 32 |"
