"""docs/architecture.md's claims that code can check: its layer table is the import contract lint-imports enforces,
every path it names exists, `core/` holds only what both sides use, and no method's name appears in code outside
its folder but as the registry's default."""
import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "architecture.md").read_text()


def contract_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [contract for contract in config["contracts"] if contract["type"] == "layers"]
    return layers["layers"]


def modules(package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of `package`."""
    found = {}
    for path in (ROOT / package).rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(path: Path) -> set[str]:
    """The modules a file imports (every name `from x import y` could mean: x and x.y)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return names


def test_the_layer_table_is_the_import_contract():
    rows = [row for row in DOC.splitlines() if re.match(r"\|\s*\d+\s*\|", row)]
    table = [re.sub(r"`|/", "", row.split("|")[2]).strip() for row in rows]
    layers = [each for layer in contract_layers() for each in layer.split(" | ")]
    assert sorted(table) == sorted(layers), "docs/architecture.md's layer table and pyproject.toml's contract differ"


def test_every_path_it_names_exists():
    named = set(re.findall(r"`((?:core|methods|service|serving|workers|research|bench|ckl|tests|docs)/[\w/.]*)`", DOC))
    assert named and [p for p in sorted(named) if not (ROOT / p.rstrip("/")).exists()] == []


def test_core_holds_only_what_both_sides_use():
    """Each module or package of core/ is reached from the API side and from the workers (each process loads every
    method), through the methods and core's own imports."""
    shared = {**modules("core"), **modules("methods")}
    graph = {name: {m for m in imported(path) if m in shared} for name, path in shared.items()}

    def reached(packages: list[str]) -> set[str]:
        todo = {m for package in packages if (ROOT / package).is_dir() for path in modules(package).values()
                for m in imported(path) if m in shared}
        seen: set[str] = set()
        while todo:
            seen.add(name := todo.pop())
            todo |= graph[name] - seen
        return {".".join(name.split(".")[:2]) for name in seen if name.startswith("core.")}

    api, workers = reached(["service", "serving", "methods"]), reached(["workers", "methods"])  # both load methods
    tops = {".".join(name.split(".")[:2]) for name in modules("core")} - {"core"}
    assert {"API only": sorted(tops - workers), "workers only": sorted(tops - api)} == \
        {"API only": [], "workers only": []}


def test_no_method_is_named_outside_its_folder_but_as_the_default():
    names = sorted(p.name for p in (ROOT / "methods").iterdir() if (p / "__init__.py").exists())
    found = []
    for package in ("core", "service", "serving", "workers", "ckl"):
        for path in (ROOT / package).rglob("*.py") if (ROOT / package).is_dir() else []:
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and node.value in names:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    defaults = [f for f in found if f.startswith("core/settings.py:")]  # CKL_METHOD's default
    assert len(defaults) == 1 and [f for f in found if f not in defaults] == []
