"""The size limits a newcomer can read within: no module over 350 lines, no function over 60, no class over 250; the
learner's orchestrator at most 150 lines and each of its stages at most 250 (it grew back twice without a check)."""
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["ckl", "bench", "research", "service", "workers", "serving", "methods", "core", "tests"]
LIMITS = {"module": 350, "function": 60, "class": 250}
STAGES = (ROOT / "workers" / "stages").glob("*.py")
OWN_LIMITS = {"workers/learner.py": 150, **{str(p.relative_to(ROOT)): 250 for p in STAGES}}


def sources() -> list[Path]:
    return sorted(p for package in PACKAGES if (ROOT / package).is_dir() for p in (ROOT / package).rglob("*.py"))


def too_long(path: Path) -> list[str]:
    """What in `path` passes its limit, as 'path: what (lines > limit)'."""
    text = path.read_text()
    name = str(path.relative_to(ROOT))
    found = []
    module_limit = OWN_LIMITS.get(name, LIMITS["module"])
    if (lines := len(text.splitlines())) > module_limit:
        found.append(f"{name}: the module ({lines} > {module_limit})")
    for node in ast.walk(ast.parse(text)):
        kind = "class" if isinstance(node, ast.ClassDef) else \
            "function" if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else None
        if kind and (lines := node.end_lineno - node.lineno + 1) > LIMITS[kind]:
            found.append(f"{name}: {kind} {node.name} ({lines} > {LIMITS[kind]})")
    return found


def test_no_module_class_or_function_passes_its_limit():
    assert sources(), "no sources found"
    assert [found for path in sources() for found in too_long(path)] == []


def test_the_check_finds_what_passes_a_limit(tmp_path, monkeypatch):
    long = tmp_path / "core" / "long.py"
    long.parent.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    long.write_text(f"def f():\n{body}\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert too_long(long) == ["core/long.py: function f (62 > 60)"]
