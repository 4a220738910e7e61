"""The documentation is in order: docs/check_docs.py (plain Python, no model) finds nothing to report."""
import importlib.util
from pathlib import Path

CHECKER = Path(__file__).resolve().parent.parent / "docs" / "check_docs.py"
CITED = "docs/decisions" + ".md"  # spelled in two pieces, so that this file cites no entry itself


def load_checker():
    spec = importlib.util.spec_from_file_location("check_docs", CHECKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_documentation_checker_finds_nothing_wrong():
    assert load_checker().main() == []


def test_the_checker_names_each_kind_of_fault(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# x\n" + "line\n" * 200 + "[gone](docs/missing.md)\n")
    (tmp_path / "docs" / "decisions.md").write_text(
        "# Decisions\n\nContents:\n- All: [Kept](#kept), [Nowhere](#nowhere)\n\n"
        "## Kept\n\n- **Decided:** kept.\n\n## Unlisted\n\n- **Measured:** nothing decided.\n")
    (tmp_path / "code.py").write_text(f'# why ({CITED}: "No such entry"); {CITED}: Kept.\n# {CITED}, Kept\n')
    problems = load_checker().main(tmp_path)
    expected = ["README.md: 202 lines", "'Unlisted' has no line starting with Decided:",
                "'Unlisted' is missing from Contents", "Contents links '#nowhere'", "cites 'No such entry'",
                "links 'docs/missing.md'"]
    assert all(any(part in problem for problem in problems) for part in expected), problems
    assert not any("Kept" in problem for problem in problems), problems  # listed, decided and cited: in order
