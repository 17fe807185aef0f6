"""The "Remote token corpora and sessions, head to head (issue 41)" section: bench_remote_lm.py's
rows as tables, ratios taken within each repeat (systems measured side by side), median
[min-max] over repeats."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

RESUME_WHY = {
    "lading": "the loader's state (epoch, batch, seed, layout) replays the same windows, "
    "whatever the cache holds",
    "lading-local": "as above, from local disk",
    "mosaic": "StreamingDataLoader.state_dict: the samples seen this epoch; the shuffle is a "
    "function of (seed, epoch, canonical nodes)",
    "litdata": "StreamingDataLoader.state_dict: chunks and items consumed per worker, "
    "the shuffle a function of (seed, epoch)",
}


def spread(values: list[float], fmt: str) -> str:
    if not values:
        return "-"
    mid = statistics.median(values)
    if len(values) == 1:
        return fmt.format(mid)
    return f"{fmt.format(mid)} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def _paired(rows: list[dict[str, Any]], a: str, b: str, key: str) -> list[float]:
    """``key`` of system ``a`` over system ``b``, repeat by repeat."""
    by = {(r["system"], r["repeat"]): r for r in rows if "error" not in r}
    return [by[(a, n)][key] / by[(b, n)][key] for (s, n) in by if s == a and (b, n) in by]


def _lm_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| system | tokens/s (epoch) | tokens/s (warm) | client CPU s / M tokens | "
        "server CPU s / M tokens | GETs | bytes fetched / used | cache on disk | resume | load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for system in dict.fromkeys(r["system"] for r in rows):
        mine = [r for r in rows if r["system"] == system and "error" not in r]
        if not mine:
            why = next(r["error"] for r in rows if r["system"] == system)
            lines.append(f"| {system} | failed: {why} | | | | | | | | |")
            continue

        def cell(key: str, fmt: str, mine: list[Any] = mine) -> str:
            return spread([r[key] for r in mine], fmt)

        resume = next((r["resume"] for r in mine if "resume" in r), "not tested")
        lines.append(
            f"| {system} | {cell('tokens_s', '{:,.0f}')} | {cell('warm_tokens_s', '{:,.0f}')} | "
            f"{cell('cpu_s_per_mtok', '{:.2f}')} | {cell('server_s_per_mtok', '{:.2f}')} | "
            f"{cell('gets', '{:,.0f}')} | {cell('fetched_used', '{:.3f}')} | "
            f"{cell('disk', '{:,.0f}')} | {resume} | {cell('load', '{:.1f}')} |"
        )
    return lines


def _later(rows: list[dict[str, Any]]) -> list[str]:
    """The second epoch of each reader (``--epochs 2``): what its cache kept for it, with
    client CPU paired against the first system's in each repeat."""
    later = [r for r in rows if r.get("later") and "error" not in r]
    if not later:
        return []
    first = later[0]["system"]
    lines = [
        "",
        "The second epoch of the same reader (its cache as the first epoch left it):",
        "",
        f"| system | tokens/s | client CPU s / M tokens | {first} / system, paired | GETs | "
        "bytes fetched / used | cache on disk |",
        "|---|---|---|---|---|---|---|",
    ]
    by = {(r["system"], r["repeat"]): r["later"][0] for r in later}
    for system in dict.fromkeys(r["system"] for r in later):
        mine = [e for (s, _), e in by.items() if s == system]
        paired = [
            by[(first, n)]["cpu_s_per_mtok"] / e["cpu_s_per_mtok"]
            for (s, n), e in by.items()
            if s == system and (first, n) in by
        ]

        def cell(key: str, fmt: str, mine: list[Any] = mine) -> str:
            return spread([e[key] for e in mine], fmt)

        lines.append(
            f"| {system} | {cell('tokens_s', '{:,.0f}')} | {cell('cpu_s_per_mtok', '{:.4f}')} | "
            f"{spread(paired, '{:.2f}')} | {cell('gets', '{:,.0f}')} | "
            f"{cell('fetched_used', '{:.3f}')} | {cell('disk', '{:,.0f}')} |"
        )
    return lines


def _ratios(rows: list[dict[str, Any]], consume: str) -> list[str]:
    lines = ["", "Ratios within each repeat (median [min-max] over repeats):", ""]
    ratio: Callable[[str, str, str], str] = lambda a, b, k: spread(_paired(rows, a, b, k), "{:.3g}")  # noqa: E731
    lines.append(f"- lading remote / local, tokens/s once warm: "
                 f"{ratio('lading', 'lading-local', 'warm_tokens_s')} (goal >= 0.9); "
                 f"over the whole epoch {ratio('lading', 'lading-local', 'tokens_s')}")  # fmt: skip
    lines.append(f"- the same under a training step that takes {consume} tokens/s (`+step` rows: a "
                 f"sleep a batch, the GIL free): lading remote / local, tokens/s once warm "
                 f"{ratio('lading+step', 'lading-local+step', 'warm_tokens_s')}; with 2 "
                 f"DataLoader workers building the remote batches beside the step "
                 f"(`+workers`; their CPU counted in the client's) "
                 f"{ratio('lading+step+workers', 'lading-local+step', 'warm_tokens_s')}"
                 )  # fmt: skip
    for peer in ("mosaic", "litdata"):
        lines.append(f"- lading / {peer}, tokens/s over the epoch: "
                     f"{ratio('lading', peer, 'tokens_s')}; client CPU a token: "
                     f"{ratio('lading', peer, 'cpu_s_per_mtok')}; bytes fetched: "
                     f"{ratio('lading', peer, 'fetched_used')}")  # fmt: skip
    return lines


def _parquet(rows: list[dict[str, Any]], corpus: dict[str, Any]) -> list[str]:
    mine = [r for r in rows if r["system"].startswith("parquet")]
    if not mine:
        return []
    lines = ["", f"Parquet: `PartitionedParquet(files, 256)` over {corpus.get('parquet_origin')} "
             f"({corpus.get('parquet_bytes', 0) / 2**20:.1f} MiB), remote with the node cache "
             f"at {corpus.get('parquet_cap', 0) / 2**20:.2f} MiB.", "",
             "| files | sessions/s | client CPU us / session | bytes fetched | load |",
             "|---|---|---|---|---|"]  # fmt: skip
    for system in ("parquet-local", "parquet-remote", "parquet-local+step",
                   "parquet-remote+step"):  # fmt: skip
        ok = [r for r in mine if r["system"] == system and "error" not in r]
        if not ok:
            if "+step" not in system:
                why = next((r["error"] for r in mine if r["system"] == system), "not run")
                lines.append(f"| {system[8:]} | failed: {why} | | | |")
            continue
        lines.append(
            f"| {system[8:]} | {spread([r['sessions_s'] for r in ok], '{:,.0f}')} | "
            f"{spread([r['cpu_us'] for r in ok], '{:.1f}')} | "
            f"{spread([r['fetched'] for r in ok], '{:,.0f}')} | "
            f"{spread([r['load'] for r in ok], '{:.1f}')} |"
        )
    paired = _paired(mine, "parquet-remote", "parquet-local", "sessions_s")
    lines += ["", f"Remote / local sessions/s within each repeat: {spread(paired, '{:.2f}')}."]
    stepped = _paired(mine, "parquet-remote+step", "parquet-local+step", "sessions_s")
    if stepped:
        lines[-1] += (f" Under a training step of {args_step(mine)} ms a batch (`+step`: a sleep, "
                      f"the GIL free): {spread(stepped, '{:.2f}')}.")  # fmt: skip
    return lines


def args_step(rows: list[dict[str, Any]]) -> str:
    """The +step rows' step, in ms a batch, as run."""
    found = [r.get("step_ms") for r in rows if r.get("step_ms")]
    return f"{found[0]:g}" if found else "?"


def render(results: dict[str, Any]) -> str:
    corpus, args, rows = results["corpus"], results["args"], results["rows"]
    lm = [r for r in rows if not r["system"].startswith("parquet")]
    latency = 1e3 * float(args.get("latency", 0.03))
    head = (
        f"Corpus: {corpus['origin']}: {corpus['documents']:,} documents, {corpus['n_tokens']:,} "
        f"tokens ({corpus['token_bytes'] / 2**20:.1f} MiB), on one local S3 bucket (moto behind "
        f"lading's proxy, {latency:.0f} ms ± {latency / 3:.0f} a request, objects served from "
        f"the proxy's copy). Node cache "
        f"{corpus['cap'] / 2**20:.2f} MiB ({float(args['share']):.0%} of the corpus). One "
        f"shuffled epoch of windows of {corpus['seq_len']:,} tokens in batches of "
        f"{corpus['batch']}, in this process (DataLoader workers only in `+workers` rows), a "
        f"cold cache each time; 'warm': after the "
        f"first {float(args['warm']):.0%} of the epoch. {args['repeats']} repeats, the systems "
        f"in turn within each; median [min-max]. CPU: the client process's own (all its "
        f"threads, and its DataLoader workers'); the server's: the local S3's process tree. "
        f"Bytes used: windows x "
        f"({corpus['seq_len']:,} + 1) tokens x 2 bytes. This machine: {results['cores']} cores "
        f"shared with other work (load in the table); {results['seconds']:.0f} s in all."
    )
    consume = f"{float(args.get('consume', 0)):,.0f}"
    lines = [head, "", *_lm_table(lm), *_ratios(lm, consume), *_later(lm)]
    lines += ["", "Resume, as tested here (k batches, save, a fresh reader with a cold cache, "
              "the next two batches compared):", ""]  # fmt: skip
    for system in dict.fromkeys(r["system"] for r in lm):
        found = next((r["resume"] for r in lm if r["system"] == system and "resume" in r), None)
        if found is not None:
            why = RESUME_WHY.get(system) or RESUME_WHY.get(system.split("@")[0].split("+")[0], "")
            lines.append(f"- {system}: {found}" + (f" ({why})" if why else ""))
    lines += _parquet(rows, corpus)
    roof = results.get("ceiling")
    if roof:
        lines += ["", f"The server's ceiling in the same run: lading's fetcher alone, 256 in "
                  f"flight, random 400-byte ranges: {roof['gets_s']:,.0f} GETs/s at "
                  f"{roof['cpu_us']:.0f} us of client CPU a GET."]  # fmt: skip
    return "\n".join(lines)
