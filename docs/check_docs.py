"""Checks the documentation: `python3 docs/check_docs.py` prints what is wrong and exits 1, or exits 0.

- README.md has at most 200 lines (the rest lives under docs/);
- every `## ` entry of docs/decisions.md has a line starting with `Decided:` (as `- **Decided:** ...`);
- the Contents list at the top of docs/decisions.md links every entry, and each of its anchors names one;
- every citation of an entry in a .py or .md file (the file's name, a colon or a comma, then the entry's title,
  quoted or not) names an entry heading exactly;
- every relative link in README.md and docs/*.md points to a file that exists (and, into a markdown file, to one
  of its headings).

Standard library only: it runs before anything is installed, and imports nothing of the project.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 200
DECISIONS = Path("docs") / "decisions.md"
# Folders that hold no sources of the project (environments, outputs, data).
SKIPPED = {".git", ".venv", "venv", "node_modules", "__pycache__", "bench-results", "data", "build", "dist",
           ".lock-venv", ".cache", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
# A citation: the decisions file's name, then ": " or ", ", then the title. Spelled in two pieces so that this
# file does not cite anything itself.
CITATION = re.compile(re.escape("docs/decisions") + r"\.md[:,][ \t]+")
QUOTED_MORE = re.compile(r'^\s+and\s+"')
DECIDED = re.compile(r"^\s*(?:[-*]\s+)?(?:\*\*)?Decided:")
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", re.S)
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def slug(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title.strip())  # a link in a heading anchors on its text
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def prose(text: str) -> str:
    """The text outside fenced code blocks (blank lines in their place, so line numbers hold)."""
    out, fenced = [], False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return "\n".join(out)


def anchors(text: str) -> set[str]:
    """Every heading's anchor in a markdown text, repeated headings numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(text).split("\n"):
        if match := HEADING.match(line):
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def entries(text: str) -> list[tuple[str, list[str]]]:
    """docs/decisions.md's `## ` entries: (title, the lines under it)."""
    found: list[tuple[str, list[str]]] = []
    for line in prose(text).split("\n"):
        if line.startswith("## "):
            found.append((line[3:].strip(), []))
        elif found:
            found[-1][1].append(line)
    return found


def check_readme(root: Path) -> list[str]:
    lines = (root / "README.md").read_text(encoding="utf-8").count("\n")
    return [f"README.md: {lines} lines, more than {README_MAX_LINES}"] if lines > README_MAX_LINES else []


def check_decided(root: Path) -> list[str]:
    return [f"{DECISIONS}: entry {title!r} has no line starting with Decided:"
            for title, body in entries((root / DECISIONS).read_text(encoding="utf-8"))
            if not any(DECIDED.match(line) for line in body)]


def contents(text: str) -> str:
    """The Contents list: from the line `Contents:` to the next blank line."""
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if line.strip() == "Contents:"), None)
    if start is None:
        return ""
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    return "\n".join(lines[start + 1:end])


def check_contents(root: Path) -> list[str]:
    text = (root / DECISIONS).read_text(encoding="utf-8")
    listed = contents(text)
    if not listed:
        return [f"{DECISIONS}: no Contents list (a line `Contents:` and the links under it)"]
    targets = [target for target in LINK.findall(listed)]
    known = anchors(text)
    problems = [f"{DECISIONS}: Contents links {target!r}, which is no heading's anchor"
                for target in targets if not target.startswith("#") or target[1:] not in known]
    linked = {target[1:] for target in targets}
    problems += [f"{DECISIONS}: entry {title!r} is missing from Contents (#{slug(title)})"
                 for title, _ in entries(text) if slug(title) not in linked]
    return problems


def sources(root: Path, suffixes: tuple[str, ...]) -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED and not d.startswith("."))
        found += [Path(folder) / name for name in sorted(files) if name.endswith(suffixes)]
    return found


def joined(path: Path, text: str) -> str:
    """The text with its lines joined, so that a title wrapped over two lines (of a comment too) reads whole."""
    if path.suffix == ".py":
        return re.sub(r"[ \t]*\n[ \t]*(?:#[ \t]*)?", " ", text)
    return re.sub(r"[ \t]*\n[ \t]*(?:>[ \t]*)?", " ", text)


def cited_titles(rest: str) -> tuple[list[str], str | None]:
    """The quoted titles at the start of `rest` ("A" and "B"), or ([], None) when the citation is not quoted."""
    if not rest.startswith('"'):
        return [], None
    titles = []
    while rest.startswith('"'):
        end = rest.find('"', 1)
        if end < 0:
            break
        titles.append(rest[1:end])
        rest = rest[end + 1:]
        more = QUOTED_MORE.match(rest)
        if not more:
            break
        rest = rest[more.end() - 1:]
    return titles, rest


def check_citations(root: Path) -> list[str]:
    titles = [title for title, _ in entries((root / DECISIONS).read_text(encoding="utf-8"))]
    longest_first = sorted(titles, key=len, reverse=True)
    problems = []
    for path in sources(root, (".py", ".md")):
        text = joined(path, path.read_text(encoding="utf-8", errors="replace"))
        for match in CITATION.finditer(text):
            rest = text[match.end():]
            if rest.startswith("<"):  # a placeholder such as <entry title>
                continue
            where = path.relative_to(root)
            quoted, _ = cited_titles(rest)
            if quoted:
                problems += [f"{where}: cites {title!r}, which is no entry of {DECISIONS}"
                             for title in quoted if title not in titles]
                continue
            if not any(rest.startswith(title) and not rest[len(title):len(title) + 1].isalnum()
                       for title in longest_first):
                problems.append(f"{where}: cites {rest[:70]!r}..., which begins with no entry title of {DECISIONS}")
    return problems


def check_links(root: Path) -> list[str]:
    problems = []
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    for page in pages:
        text = prose(page.read_text(encoding="utf-8"))
        text = re.sub(r"`[^`\n]*`", "``", text)  # code spans hold no links
        for target in LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            where = page.relative_to(root)
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                problems.append(f"{where}: links {target!r}, which does not exist")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text(encoding="utf-8")):
                problems.append(f"{where}: links {target!r}, whose anchor names no heading of {path or where}")
    return problems


def main(root: Path | None = None) -> list[str]:
    """Every problem found, printed; an empty list when the documentation is in order."""
    root = ROOT if root is None else Path(root)
    problems = (check_readme(root) + check_decided(root) + check_contents(root) + check_citations(root)
                + check_links(root))
    for problem in problems:
        print(problem)
    return problems


if __name__ == "__main__":
    sys.exit(1 if main() else 0)
