"""What the package declares (pyproject.toml) against what its code imports: every library the
installed packages import is a dependency, every dependency is imported, each with a range
that admits the tested version (constraints.txt); the benchmarks are not installed, and every
installed package carries its `py.typed` marker. The wheel itself is installed and run by the
CI step `.ci/wheel-check`."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# Declared, though never imported: run as a program (where the code says so).
RUN_AS_PROGRAMS = {"uvicorn": ("crawlflow/boot.py", r'"-m",\s*"uvicorn"')}


def installed_packages() -> list[str]:
    include = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted(pattern.removesuffix("*") for pattern in include)


def dependencies() -> dict[str, Requirement]:
    return {
        canonicalize_name(req.name): req
        for req in map(Requirement, PYPROJECT["project"]["dependencies"])
    }


def _runtime_imports(tree: ast.Module) -> set[str]:
    """Top-level names of the modules `tree` imports when it runs: what an
    `if TYPE_CHECKING:` block imports is for the type checker only."""
    modules: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and ast.unparse(node.test) in {
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        }:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return modules


def third_party_imports() -> dict[str, set[str]]:
    """Distribution name -> the installed modules importing it."""
    ours = set(installed_packages()) | {"bench", "tests"}
    providers = packages_distributions()
    used: dict[str, set[str]] = {}
    for package in installed_packages():
        for path in sorted((REPO / package).rglob("*.py")):
            for module in _runtime_imports(ast.parse(path.read_text(), str(path))):
                if module in ours or module in sys.stdlib_module_names or module == "__future__":
                    continue
                assert module in providers, f"{path}: imports {module}, which nothing provides"
                for distribution in providers[module]:
                    used.setdefault(canonicalize_name(distribution), set()).add(
                        str(path.relative_to(REPO))
                    )
    return used


def test_every_imported_library_is_a_dependency_and_every_dependency_is_used():
    used, declared = third_party_imports(), set(dependencies())
    assert sorted(set(used) - declared) == [], "imported but not declared"
    unused = declared - set(used) - set(RUN_AS_PROGRAMS)
    assert sorted(unused) == [], "declared but not imported by the installed packages"
    for program, (path, call) in RUN_AS_PROGRAMS.items():
        assert program in declared
        assert re.search(call, (REPO / path).read_text()), f"{path} no longer runs {program}"


def test_prefects_compatibility_pins_are_constraints_not_dependencies():
    assert {"fastapi", "sqlalchemy"}.isdisjoint(dependencies())
    pinned = pinned_versions()
    assert {"fastapi", "sqlalchemy"} <= set(pinned)


def pinned_versions() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version
    return pins


def test_every_dependency_is_a_range_that_admits_its_tested_version():
    pinned = pinned_versions()
    for name, requirement in dependencies().items():
        specifiers = list(requirement.specifier)
        assert specifiers, f"{name}: no version range"
        assert all(spec.operator != "==" for spec in specifiers), f"{name}: an exact pin"
        assert any(spec.operator == ">=" for spec in specifiers), f"{name}: no lower bound"
        assert name in pinned, f"{name}: not in constraints.txt"
        assert requirement.specifier.contains(pinned[name]), (
            f"{name}: {requirement.specifier} excludes the tested {pinned[name]}"
        )


def test_installed_packages_are_the_layers_and_carry_py_typed():
    top_level = sorted(
        path.parent.name
        for path in REPO.glob("*/__init__.py")
        if path.parent.name not in {"bench", "tests"}
    )
    assert installed_packages() == top_level
    assert "bench" not in installed_packages()
    for package in top_level:
        assert (REPO / package / "py.typed").is_file(), f"{package}/py.typed missing"
    assert PYPROJECT["tool"]["setuptools"]["package-data"] == {"*": ["py.typed"]}


def test_license_is_apache_2():
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    text = (REPO / "LICENSE").read_text()
    assert re.search(r"Apache License\s+Version 2\.0, January 2004", text)
