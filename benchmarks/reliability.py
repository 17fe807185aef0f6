"""Run the fault tests harder than CI does and write what they tried into RELIABILITY.md.

    python benchmarks/reliability.py [--kills 20] [--rounds 5]

- Fuzzing: every hypothesis test of tests/sources/test_fuzz_readers.py, the TSV block path and the
  elastic-resume properties, ``--rounds`` times with fresh random seeds; the number of examples
  run is read from hypothesis's statistics.
- Build kills: tests/disk/test_crash_builds.py with ``--kills`` SIGKILLs per tool.
- Training kills: tests/loading/test_kill_resume.py ``--rounds`` times (each round draws new
  kill steps and kills every loader twice: once resumed on the same world size, once on another).

Writes the "Fuzzing" and "Kills" sections of benchmarks/RELIABILITY.md. The soak is separate
(benchmarks/soak.py): it needs minutes of a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from common import HERE, add_write_flag, write_section

REPO = HERE.parent
FUZZ_TESTS = [
    "tests/sources/test_fuzz_readers.py",
    "tests/sources/test_tsv_blocks.py",
    "tests/loading/test_dataloader.py::test_chained_elastic_resumes_keep_the_global_order",
    "tests/loading/test_plan.py::test_runs_slice_and_within_match_the_listed_positions",
]


def pytest(args: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        # every mark: the kill and fuzz tests are slow ones, which pyproject's default leaves out
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "slow or not slow",
         *args],
        cwd=REPO, capture_output=True, text=True, env={**os.environ, **(env or {})},
    )  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"pytest {' '.join(args)} failed:\n{done.stdout[-4000:]}{done.stderr[-2000:]}")
    return done.stdout


def fuzzing(rounds: int) -> str:
    out = "\n".join(
        pytest([*FUZZ_TESTS, "--hypothesis-show-statistics", "--hypothesis-seed=random"])
        for _ in range(rounds)
    )
    examples: Counter[str] = Counter()
    test = ""
    for line in out.splitlines():
        header = re.match(r"^(\S+::[^\s\[]+)(\[.*\])?:$", line)
        if header:
            test = header.group(1)
        # hypothesis < 6.1xx: "N passing examples, M failing"; later "N passing, M failing"
        found = re.search(r"(\d+) passing(?: examples)?, (\d+) failing", line)
        if found and test:
            examples[test] += int(found.group(1))
            assert int(found.group(2)) == 0, line
    total = sum(examples.values())
    rows = "\n".join(f"| `{test}` | {n:,} |" for test, n in sorted(examples.items()) if n)
    return (
        f"{total:,} generated inputs passed, none failed ({rounds} runs of hypothesis, each with "
        "a random seed). Each reader "
        "gave either the right result or an error naming file and line.\n\n"
        f"| test | inputs |\n|---|---|\n{rows}"
    )


def kills(n_kills: int, rounds: int) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log.jsonl"
        env = {"LADING_KILLS": str(n_kills), "LADING_RELIABILITY_LOG": str(log)}
        pytest(["tests/disk/test_crash_builds.py"], env)
        for _ in range(rounds):
            pytest(["tests/loading/test_kill_resume.py"], env)
        records = [json.loads(line) for line in log.read_text().splitlines()]
    builds = [
        "Each kill hits a build of the version the destination does not hold (so a build is "
        'never a no-op); "broken" counts destinations that existed but did not open with valid '
        "checksums and a version's row count.",
        "",
        "| build killed | SIGKILLs | killed while writing "
        "| destination afterwards: v1 / v2 / absent / broken |",
        "|---|---|---|---|",
    ]
    for r in (r for r in records if r["test"] == "crash_build"):
        seen = Counter(r["versions"])
        builds.append(
            f"| `lading {r['tool']}` | {r['kills']} | {r['interrupted']} | "
            f"{seen[1]} / {seen[2]} / {seen[0]} / 0 |"
        )
    resumes = [r for r in records if r["test"] == "kill_resume"]
    loaders = [
        "| loader | rounds | SIGKILLs (steps the same-size runs had checkpointed) "
        "| bitwise same-size resumes | elastic 2→3 resumes, every sample read |",
        "|---|---|---|---|---|",
    ]
    for kind, count in sorted(Counter(r["kind"] for r in resumes).items()):
        steps = sorted({r["same_world_killed_at"] for r in resumes if r["kind"] == kind})
        loaders.append(f"| {kind} | {count} | {2 * count} (at steps {steps}) | {count} | {count} |")
    return "\n".join([*builds, "", *loaders])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    add_write_flag(parser)
    args = parser.parse_args()
    target = HERE / "RELIABILITY.md"
    command = f"python benchmarks/reliability.py --kills {args.kills} --rounds {args.rounds}"
    body = fuzzing(args.rounds)
    print(body)
    write_section(target, "Fuzzing", body, command, write=args.write)
    body = kills(args.kills, args.rounds)
    print(body)
    write_section(target, "Kills", body, command, write=args.write)


if __name__ == "__main__":
    main()
