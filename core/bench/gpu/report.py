"""The check's Markdown report: a summary answering the questions, then one table per section."""

from __future__ import annotations

from typing import Any

ANSWER_SIZES = (16, 32, 64, 128)


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _notes(section: dict[str, Any]) -> list[str]:
    head = [f"*{section['status']}*"] if section.get("status") != "ok" else []
    lines = [f"- {n}" for n in section.get("notes", [])]
    if "error" in section:
        lines.append(f"- ERROR: {section['error']}")
    return head + lines


def summary(report: dict[str, Any]) -> list[str]:
    """One line per question of the issue."""
    s = report["sections"]
    lines = []
    exact = s.get("exactness", {})
    for dtype in ("fp32", "fp16"):
        rows = [r for r in exact.get("rows", []) if r["dtype"] == dtype]
        if rows:
            same = sum(r["identical"] for r in rows)
            total = sum(r["prompts"] for r in rows)
            verdict = "exact" if same == total else "NOT exact" if dtype == "fp32" else "parts sometimes"
            lines.append(
                f"- Lookahead vs plain greedy, {dtype}: {verdict}, {same}/{total} outputs identical ({100 * same / total:.0f}%)."
            )
    cost = s.get("step_cost", {})
    sizes = cost.get("sizes", [])
    for row in cost.get("rows", []):
        ratios = [f"{n}: {row['ratio'][sizes.index(n)]:.2f}x" for n in ANSWER_SIZES if n in sizes]
        lines.append(
            f"- Step cost {row['shape']} {row['mode']} (1 token {row['seconds'][0] * 1000:.1f} ms): {', '.join(ratios)}."
        )
    real = s.get("real_model", {})
    if real.get("rows"):
        best = max(real["rows"], key=lambda r: r["speedup_vs_fastest_plain"] or 0.0)
        lines.append(
            f"- Real model: fastest is {best['method']} at {_x(best['speedup_vs_fastest_plain'])} of the fastest plain decoding "
            f"({_x(best['speedup_vs_generate'])} of generate)."
        )
        auto_rows = [r for r in real["rows"] if r["method"].startswith("auto")]
        if auto_rows:
            lines.append(
                f"- Auto: {real['auto']['note']}; {_x(auto_rows[0]['speedup_vs_fastest_plain'])} of the fastest plain decoding."
            )
    if "auto" in real and not real["auto"]["available"]:
        lines.append(f"- {real['auto']['note']}.")
    oom = s.get("out_of_memory", {})
    if oom.get("status") == "ok":
        lines.append(
            f"- Out of memory in a step: raised {oom['raised']} (the app's worker catches it: {oom['caught_by_worker']}); "
            f"KV cache dropped: {oom['cache_dropped']}; "
            f"memory returned: {oom['memory_returned']}; decoding again works: {oom['recovered']}."
        )
    for row in s.get("syncs", {}).get("rows", []):
        total = sum(site["per_step"] for site in row["sites"])
        lines.append(
            f"- Host syncs per steady-state step, {row['mode']}: {total:.1f}"
            + ("" if row["debug_mode"] else " (CPU: explicit synchronize calls only)")
            + "."
        )
    return lines


def render(report: dict[str, Any]) -> str:
    """The whole report as Markdown."""
    meta = report["meta"]
    s = report["sections"]
    lines = [
        f"# GPU check: {meta['device_name']}",
        "",
        f"torch {meta['torch']}, transformers {meta['transformers']}, {meta['bitsandbytes']}; "
        f"{meta['seconds']:.0f} s of a {meta['time_budget']:.0f} s budget.",
        "",
        "## Answers",
        "",
        *summary(report),
        "",
    ]
    cost = s.get("step_cost", {})
    if cost:
        sizes = cost.get("sizes", [])
        lines += [
            "## Step cost",
            "",
            f"One step feeding n tokens after {cost.get('context')} cached, relative to a 1-token step.",
            "",
            "| model | mode | 1 token ms | " + " | ".join(str(n) for n in sizes) + " | weights MiB | peak MiB |",
            "|---|---|---:|" + "---:|" * len(sizes) + "---:|---:|",
        ]
        for row in cost.get("rows", []):
            lines.append(
                f"| {row['shape']} ({row['like']}) | {row['mode']} | {row['seconds'][0] * 1000:.2f} | "
                + " | ".join(f"{r:.2f}" for r in row["ratio"])
                + f" | {_mb(row['weight_bytes'])} | {_mb(row['peak_bytes'])} |"
            )
        lines += ["", *_notes(cost), ""]
    exact = s.get("exactness", {})
    if exact:
        lines += [
            "## Exactness (random model)",
            "",
            f"{exact.get('prompts')} random prompts of {exact.get('prompt_tokens')} tokens, "
            f"{exact.get('max_new_tokens')} new tokens, shape {exact.get('shape')}; pool 'seeded' holds plain decoding's "
            "own output, so most steps accept N-1 guessed tokens.",
            "",
            "| dtype | setting | pool | identical | tokens/step | distinct tokens | first divergences (prompt@position, top-2 margin) |",
            "|---|---|---|---:|---:|---:|---|",
        ]
        for r in exact.get("rows", []):
            parts = (
                ", ".join(f"{d['prompt']}@{d['position']} ({d['top2_margin']:.3g})" for d in r["divergences"][:4])
                or "-"
            )
            lines.append(
                f"| {r['dtype']} | {r['config']} | {r['pool']} | {r['identical']}/{r['prompts']} "
                f"| {r['tokens_per_step']:.2f} | {r['distinct_tokens']} | {parts} |"
            )
        lines += ["", *_notes(exact), ""]
    real = s.get("real_model", {})
    if real:
        lines += ["## Real model", ""]
        if real.get("rows"):
            lines += [
                f"{real['model']}, {real['dtype']}, {real.get('prompts_done')} prompts, {real['max_new_tokens']} new tokens.",
                "",
                "| method | tok/s | tokens/step | vs generate | vs fastest plain | identical | peak MiB |",
                "|---|---:|---:|---:|---:|---:|---:|",
            ]
            for r in real["rows"]:
                lines.append(
                    f"| {r['method']} | {r['tokens_per_second']:.1f} | {r['tokens_per_step']:.2f} | {_x(r['speedup_vs_generate'])} | "
                    f"{_x(r['speedup_vs_fastest_plain'])} | {r['identical_to_generate']} | {_mb(r['peak_bytes'])} |"
                )
            lines.append("")
        lines += [*_notes(real), ""]
    oom = s.get("out_of_memory", {})
    if oom:
        lines += ["## Out of memory during a step", ""]
        if oom.get("status") == "ok":
            lines += [
                f"- raised: {oom['raised']} ({oom['message']})",
                f"- tokens decoded before it: {oom['tokens_kept']}; KV cache dropped: {oom['cache_dropped']}",
                f"- allocated before decoding {_mb(oom['allocated_before'])} MiB, after {_mb(oom['allocated_after'])} MiB: "
                f"returned {oom['memory_returned']}; a new decoding runs: {oom['recovered']}",
            ]
        lines += [*_notes(oom), ""]
    sync = s.get("syncs", {})
    if sync:
        lines += [
            "## Host synchronisation per steady-state step",
            "",
            "| mode | kind | per step | where | code |",
            "|---|---|---:|---|---|",
        ]
        for row in sync.get("rows", []):
            for site in row["sites"] or [{"kind": "-", "per_step": 0.0, "where": "none", "code": ""}]:
                lines.append(
                    f"| {row['mode']} | {site['kind']} | {site['per_step']:.2f} | {site['where']} | `{site['code']}` |"
                )
        lines += ["", *_notes(sync), ""]
    return "\n".join(lines)
