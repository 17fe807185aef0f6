"""Every third-party module the package imports is declared in pyproject.toml.

A module the code imports but no requirement names works only on machines where someone
installed it by hand. The checker walks ``src/lading`` with ``ast`` (imports inside functions
too), maps each top-level module to the distribution that provides it, and reports each one
that neither ``dependencies`` nor any optional extra names. README's test command must install
every extra, so a fresh environment runs every test and nothing is skipped for a declared
feature; ``.ci/run`` reads its extras and pytest arguments from that command.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "lading"
PYPROJECT = ROOT / "pyproject.toml"
README = ROOT / "README.md"

# import name -> distribution name, for modules not installed where the test runs (with them
# installed, importlib.metadata.packages_distributions() answers first)
KNOWN_DISTRIBUTIONS: dict[str, str] = {
    "yaml": "PyYAML",
    "sklearn": "scikit-learn",
    "ir_measures": "ir-measures",
    "ir_datasets": "ir_datasets",
    "pyarrow": "pyarrow",
    "safetensors": "safetensors",
    "zstandard": "zstandard",
    "PIL": "Pillow",
    "cv2": "opencv-python",
    "google": "protobuf",
    "dateutil": "python-dateutil",
    "attr": "attrs",
    "bs4": "beautifulsoup4",
}
# how README's test command reads; .ci/run parses the same line
README_TEST = re.compile(
    r'pip install -e "\.\[(?P<extras>[^\]]*)\]" && python -m pytest(?P<args>.*)$'
)


def normalize(name: str) -> str:
    """PEP 503 form of a distribution name: ``ir_datasets`` and ``IR-Datasets`` compare equal."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    """``"torch>=2.2"`` -> ``"torch"``; ``"tomli>=2; python_version < '3.11'"`` -> ``"tomli"``."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"{PYPROJECT}: cannot read a distribution name from {requirement!r}")
    return match.group(1)


def declared(pyproject: Path) -> set[str]:
    """Normalized names of every distribution in ``dependencies`` and every optional extra."""
    project = tomllib.loads(pyproject.read_text())["project"]
    requirements = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    return {normalize(requirement_name(r)) for r in requirements}


def imports(root: Path) -> Iterator[tuple[str, Path, int]]:
    """(top-level module, file, line) of every absolute import under ``root``."""
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield alias.name.split(".")[0], path, node.lineno
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                yield node.module.split(".")[0], path, node.lineno


@functools.cache
def installed_providers() -> Mapping[str, list[str]]:
    """Import name -> distributions, from the installed metadata (read once: it is slow)."""
    from importlib.metadata import packages_distributions

    return packages_distributions()


def distributions_of(module: str) -> list[str]:
    """Distributions that may provide ``module``: installed metadata, the table, or its name."""
    found = installed_providers().get(module)
    if found:
        return list(found)
    return [KNOWN_DISTRIBUTIONS.get(module, module)]


def undeclared_imports(root: Path, pyproject: Path, own: str = "lading") -> list[str]:
    """One line per import under ``root`` of a distribution that ``pyproject`` does not declare."""
    names = declared(pyproject)
    problems = []
    for module, path, line in imports(root):
        if module in sys.stdlib_module_names or module == own:
            continue
        candidates = distributions_of(module)
        if not any(normalize(d) in names for d in candidates):
            problems.append(
                f"{path}:{line}: imports {module!r}, provided by {' or '.join(candidates)}, "
                f"which {pyproject} declares neither in dependencies nor in an extra"
            )
    return problems


def readme_test_command() -> tuple[list[str], str]:
    """(extras, pytest arguments) of README's test command."""
    for line in README.read_text().splitlines():
        match = README_TEST.search(line.strip())
        if match:
            return [e.strip() for e in match.group("extras").split(",")], match.group("args")
    raise AssertionError(f"{README} has no line matching {README_TEST.pattern}")


def test_every_import_of_the_package_is_declared() -> None:
    problems = undeclared_imports(PACKAGE, PYPROJECT)
    assert not problems, "undeclared imports:\n" + "\n".join(problems)


def test_the_checker_catches_an_undeclared_import(tmp_path: Path) -> None:
    package = tmp_path / "src" / "demo"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("import os\nimport numpy\nfrom demo import sub\n")
    (package / "sub" / "__init__.py").write_text(
        "def late():\n    import leftpad_nonexistent.util\n\n\ndef later():\n"
        "    from yaml import safe_load\n    return safe_load\n"
    )
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "demo"\ndependencies = ["numpy>=1"]\n'
        "[project.optional-dependencies]\nx = [\"tomli>=2; python_version < '3.11'\"]\n"
    )
    problems = undeclared_imports(package, pyproject, own="demo")
    assert len(problems) == 2, problems
    assert problems[0].startswith(f"{package / 'sub' / '__init__.py'}:2: ")
    assert "'leftpad_nonexistent'" in problems[0] and "leftpad_nonexistent" in problems[0]
    assert problems[1].startswith(f"{package / 'sub' / '__init__.py'}:6: ")
    assert "PyYAML" in problems[1]  # the distribution, not the import name
    # declared in an extra, under another spelling of the name: no longer reported
    pyproject.write_text(pyproject.read_text() + 'y = ["pyyaml>=6", "Leftpad-Nonexistent"]\n')
    assert undeclared_imports(package, pyproject, own="demo") == []


# extras that are tools for the repository, not features: "all" leaves them out, README's
# test command names each
TOOLS = {"test", "docs"}


def test_readme_test_command_installs_every_extra() -> None:
    # every feature extra through "all" (the union of them, checked below), plus each tool
    extras, args = readme_test_command()
    optional = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    covered = set(extras) | (set(optional) - TOOLS if "all" in extras else set())
    assert covered == set(optional), (
        f"README's test command installs {sorted(covered)}; pyproject.toml declares "
        f"{sorted(optional)}: a test of a declared feature would skip"
    )
    assert args.strip() == "-q"


def test_all_is_the_union_of_every_feature_extra() -> None:
    # pip install "lading[all]" gives every feature: each requirement of every extra but the
    # test tools, by distribution name
    optional = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    # "peers" (the benchmark's comparison systems) stays out: mosaicml-streaming and litdata
    # pull torchvision, which breaks beside the pinned CPU torch (pyproject.toml says so)
    features = set(optional) - {"all", "peers"} - TOOLS
    union = {normalize(requirement_name(r)) for f in features for r in optional[f]}
    assert {normalize(requirement_name(r)) for r in optional["all"]} == union


def test_ci_runs_readme_test_command_in_a_fresh_venv() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "mktemp -d" in ci and "-m venv" in ci and "trap" in ci
    assert "torch==2.13.0" in ci
    assert "README.md" in ci and '-e ".[$extras]"' in ci  # extras come from README's command
    assert '"$py" -m pytest $pytest_args' in ci
    assert '"$py" -m mkdocs build --strict' in ci  # the docs site, warnings as errors


@pytest.mark.parametrize("module", ["os", "json", "importlib"])
def test_stdlib_is_never_reported(tmp_path: Path, module: str) -> None:
    (tmp_path / "m.py").write_text(f"import {module}\n")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "m"\n')
    assert undeclared_imports(tmp_path, tmp_path / "pyproject.toml") == []
