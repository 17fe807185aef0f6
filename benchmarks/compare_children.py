"""The code each child of ``benchmarks/compare_trees.py`` runs, by name.

Each child is a fresh interpreter whose ``sys.path`` holds one tree's ``benchmarks/`` and whose
``PYTHONPATH`` is that tree's ``src``; ``A`` holds its arguments. The code must end with
``OUT``: a dict of numbers, printed as JSON on the last stdout line. Kept apart from the driver
so that it stays small; the driver's tree supplies it to both trees alike.
"""

from __future__ import annotations

# Code each child runs after ``sys.path`` holds the tree's benchmarks/ and ``A`` the arguments.
# It must end with ``OUT``: a dict of numbers printed as JSON on the last stdout line.
PRELUDE = """
import json, sys, time
sys.path.insert(0, A["benchmarks"])
import lading
assert lading.__file__.startswith(A["tree_src"]), (lading.__file__, A["tree_src"])
if A["torch_threads"]:
    import torch
    torch.set_num_threads(A["torch_threads"])
"""

CHILD_CODE: dict[str, str] = {
    "lm-naive": """
import bench_lm
cpu = time.process_time()
OUT = bench_lm.run("naive", A["corpus"])
OUT["cpu_s"] = time.process_time() - cpu
""",
    "lm-lading": """
import bench_lm
from lading.lm import LanguageModelLoader, TokenCorpus
from lading.world import World
cpu = time.process_time()
OUT = bench_lm.run("lading", A["corpus"])
OUT["cpu_s"] = time.process_time() - cpu
try:  # the sequence options object (issue 23) ...
    from lading.lm import Streams
    sequence = Streams(bench_lm.BPTT)
except ImportError:  # ... or a tree from before it, where bptt was the third argument
    sequence = bench_lm.BPTT
loader = LanguageModelLoader(TokenCorpus.open(A["corpus"]), bench_lm.BATCH, sequence,
                             world=World())
tokens, cpu, wall, best = 0, time.process_time(), time.perf_counter(), 0.0
for epoch in range(A["epochs"]):
    loader.set_epoch(epoch + 1)
    at, before = time.process_time(), tokens
    for x, _ in loader:
        tokens += x.numel()
    best = max(best, (tokens - before) / (time.process_time() - at))
OUT["epochs_tokens_per_cpu_s"] = tokens / (time.process_time() - cpu)
OUT["epochs_tokens_per_s"] = tokens / (time.perf_counter() - wall)
OUT["best_epoch_tokens_per_cpu_s"] = best  # the epoch least disturbed by other work
""",
    "parquet-straightforward": """
import bench_parquet
cpu = time.process_time()
OUT = bench_parquet.run("straightforward", A["files"])
OUT["cpu_s"] = time.process_time() - cpu
OUT["rows_per_cpu_s"] = OUT["rows"] / OUT["cpu_s"]
""",
    "parquet-lading": """
import bench_parquet
cpu = time.process_time()
OUT = bench_parquet.run("lading", A["files"])
OUT["cpu_s"] = time.process_time() - cpu
OUT["rows_per_cpu_s"] = OUT["rows"] / OUT["cpu_s"]
""",
    "ir": """
import os
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from pathlib import Path
import bench_ir
from lading.ir import CrossEncoderCollator, TrainingGroups
work, n = Path(A["work"]), A["n"]
tokens = lading.open_store(work / f"passages-{n}-int.tokens512")
plain = lading.open_store(work / f"passages-{n}-int.packed")
tok_path = work / "bert-like-tokenizer.json"
queries, qrels = bench_ir.query_set(plain)
kw = {"group_size": bench_ir.GROUP_SIZE, "sampling": "random"}
fast_groups = TrainingGroups(tokens, queries, qrels, **kw)
slow_groups = TrainingGroups(plain, queries, qrels, **kw)
fast = CrossEncoderCollator(tokens, max_length=bench_ir.MAX_LENGTH)
slow = CrossEncoderCollator(plain, tok_path, max_length=bench_ir.MAX_LENGTH, use_tokens=False)
OUT = {}
for name, collate, groups in (("text", slow, slow_groups), ("tokens", fast, fast_groups)):
    cpu, wall = time.process_time(), time.perf_counter()
    rate = bench_ir.pairs_per_second(collate, groups, A["pair_seconds"])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    OUT[f"{name}_pairs_per_s"] = rate
    OUT[f"{name}_pairs_per_cpu_s"] = rate * wall / cpu
OUT["ratio"] = OUT["tokens_pairs_per_s"] / OUT["text_pairs_per_s"]
samples = bench_ir.loader_memory(fast_groups, fast, A["seconds"])
probes = [s for s in samples if "anon_mib" in s]
OUT["loader_pairs_per_s"] = samples[-1]["pairs"] / samples[-1]["t"]
OUT["loader_anon_peak_mib"] = max(p["anon_mib"] for p in probes)
OUT["loader_pss_peak_mib"] = max(p["pss_mib"] for p in probes)
steady = probes[len(probes) // 4 :] or probes
OUT["loader_anon_growth_mib"] = steady[-1]["anon_mib"] - steady[0]["anon_mib"]
""",
    "stores-build": """
from pathlib import Path
src, dest = Path(A["src"]), Path(A["dest"])
dest.mkdir(parents=True, exist_ok=True)
OUT = {}
for name, extra in (("packed", {}), ("tokens", {"tokenizer": A["tokenizer"], "max_length": 256})):
    cpu, wall = time.process_time(), time.perf_counter()
    lading.build_store(src, dest / f"{src.stem}.{name}", overwrite=True, progress=False, **extra)
    OUT[f"build_{name}_s"] = time.perf_counter() - wall
    OUT[f"build_{name}_cpu_s"] = time.process_time() - cpu
""",
    "stores-lookups": """
import bench_stores
cpu = time.process_time()
OUT = bench_stores.measure_lookups(A["strategy"], A["src"], A["dest"], A["seconds"])
OUT["cpu_s"] = time.process_time() - cpu
""",
}
