"""The docs say what is, briefly, and point only at what exists: each docs/*.md fits a reading
budget, every path a doc or the README names in backticks exists in the repository, code
comments say why rather than narrate how the code came to be, and nothing points outside
the repository (the product is self-contained)."""

import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINE_BUDGET = 250

# A comment or doc that tells the code's past (an issue, a branch, an earlier version) ages the
# day it is written; it belongs in the commit message. "branch and bound" is an algorithm.
PAST = r"\bissue\s*#?\d+|\bthe issue\b|\bissue's\b|(?-i:\bBRIEF\b)|\bbranch\b(?! and bound)|\bpreviously\b"
# In code, also "no longer" and "used to be" (an upstream source that has stopped listing
# something is a fact about that source).
HISTORY = re.compile(PAST + r"|\bused to be\b|\bno longer\b(?! (?:list|lists|listed|exist|exists|made)\b)", re.IGNORECASE)
# Docs state upstream's own changes ("v2.10.0 no longer encodes it"), so they get the diary's
# words instead.
DIARY = re.compile(PAST + r"|previous design|tried and not kept|\bnot kept\b|scratch (?:clone|merge)", re.IGNORECASE)
# Another checkout's files and a developer's home directory. Built from pieces so that this
# file does not match itself.
OUTSIDE = re.compile("|".join(re.escape(s) for s in (
    "../" + "shared", "/" + "work/", "shared/" + "ARCHITECTURE", "/" + "home/", "/" + "root/", "/" + "Users/")))

CODE_SUFFIXES = {".py", ".sql", ".yaml", ".yml", ".toml"}
CODE_NAMES = {"Makefile", "Dockerfile", "run"}
# A bare file name is checked when it names the project's own source; others (`slices.csv`,
# `publishers.yaml`) are files the product writes or reads on a deployment.
SOURCE_SUFFIXES = (".py", ".sql")


def tracked_files() -> list[Path]:
    names = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()
    return [ROOT / n for n in names if (ROOT / n).is_file()]


def doc_files() -> list[Path]:
    return sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]


def top_level() -> set[str]:
    return {p.relative_to(ROOT).parts[0] for p in tracked_files()}


def backticked_paths(text: str, bare_names: bool = True) -> list[str]:
    """The backticked tokens of a Markdown text that name a repository path: a first segment
    that is a top-level entry of the repository, or (bare_names) a source file name."""
    top = top_level()
    found = []
    for token in re.findall(r"`([^`\n]+)`", text):
        token = token.split("::")[0].strip()
        if not token or any(c in token for c in " {<=") or token.startswith(("/", "http", "-", "~", "$", "slicemeter.")):
            continue
        if ("/" in token and token.split("/")[0] in top) or (bare_names and "/" not in token and token.endswith(SOURCE_SUFFIXES)):
            found.append(token)
    return found


def plain_paths(text: str) -> list[str]:
    """Paths written without backticks: a top-level folder, then a file name with a suffix or a
    closing slash (`deploy/slicemeter-ingest` in a kubectl line is a Kubernetes object)."""
    top = "|".join(map(re.escape, sorted(top_level())))
    pattern = re.compile(rf"(?<![\w/.-])((?:{top})/[\w./*\[\]-]*(?:\.(?:py|sql|yaml|yml|md|toml|json|png|sh)|/))(?![\w-])")
    return [m.group(1) for m in pattern.finditer(text)]


def path_exists(token: str) -> bool:
    """A path from the root; a bare file name anywhere in the tree (a doc names a file beside
    the folder it just named); globs allowed."""
    pattern = token.rstrip("/")
    if "/" in pattern:
        return any(ROOT.glob(pattern))
    return any(p for p in ROOT.rglob(pattern) if ".venv" not in p.parts and ".git" not in p.parts)


def package_dirs() -> dict[str, Path]:
    """Import name -> folder, as pyproject's package-dir installs them."""
    text = (ROOT / "pyproject.toml").read_text()
    return {name: ROOT / folder for name, folder in re.findall(r'"(slicemeter(?:\.\w+)?)" = "(\w+)"', text)}


def dotted_name_exists(name: str) -> bool | None:
    """`slicemeter.ingest.writer.write_batch`: the module file, then each attribute defined at
    its top level (or a class's). None when the name is no code reference (`slicemeter.ticks`
    is the Kafka topic): its second part names no package or module."""
    dirs = package_dirs()
    parts = name.split(".")
    base = dirs.get(".".join(parts[:2])) or dirs["slicemeter"]
    rest = parts[2:] if ".".join(parts[:2]) in dirs else parts[1:]
    if base == dirs["slicemeter"] and not (base / f"{rest[0]}.py").exists():
        return None
    folder = base
    while rest and (folder / rest[0]).is_dir():
        folder, rest = folder / rest[0], rest[1:]
    if not rest:
        return True
    module = folder / f"{rest[0]}.py"
    if not module.exists():
        return False
    source = module.read_text()
    return all(re.search(rf"^\s*(?:def|class|async def)\s+{re.escape(attr)}\b|^\s*{re.escape(attr)}\s*[:=]", source, re.M)
               for attr in rest[1:])


def python_comments(source: str) -> list[tuple[int, str]]:
    out = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
           if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out += [(node.body[0].lineno + i, line) for i, line in enumerate(doc.splitlines())]
    return out


def line_comments(source: str, marker: str) -> list[tuple[int, str]]:
    return [(n, line.split(marker, 1)[1]) for n, line in enumerate(source.splitlines(), 1) if marker in line]


def comments(path: Path) -> list[tuple[int, str]]:
    source = path.read_text()
    if path.suffix == ".py":
        return python_comments(source)
    return line_comments(source, "--" if path.suffix == ".sql" else "#")


def code_files() -> list[Path]:
    return [p for p in tracked_files()
            if (p.suffix in CODE_SUFFIXES or p.name in CODE_NAMES) and p != Path(__file__).resolve()]


@pytest.mark.parametrize("doc", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_each_doc_reads_in_minutes(doc):
    lines = len(doc.read_text().splitlines())
    assert lines <= LINE_BUDGET, f"{doc.name}: {lines} lines, over the {LINE_BUDGET}-line budget"


def test_every_backticked_path_in_the_docs_exists():
    # docs/upstream.md names upstream files too (`pynvml.py`); its paths into this repository
    # start with a top-level folder.
    missing = [f"{doc.relative_to(ROOT)}: `{token}`"
               for doc in doc_files() for token in backticked_paths(doc.read_text(), doc.name != "upstream.md") + plain_paths(doc.read_text())
               if not path_exists(token)]
    assert not missing, "paths that do not exist:\n" + "\n".join(missing)


def test_every_test_the_docs_cite_exists():
    """`tests/test_x.py::test_name`: a doc that cites a test as its evidence names one that runs."""
    cited = [(doc, path if "/" in path else f"tests/{path}", name) for doc in doc_files()
             for path, name in re.findall(r"\b((?:tests/(?:\w+/)?|bench/)?test_\w+\.py)::\s*(\w+)", doc.read_text())]
    missing = [f"{doc.relative_to(ROOT)}: {path}::{name}" for doc, path, name in cited
               if not (ROOT / path).exists()
               or not re.search(rf"^\s*(?:async )?def {name}\b|^class {name}\b", (ROOT / path).read_text(), re.M)]
    assert not missing, "cited tests that do not exist:\n" + "\n".join(missing)


def test_every_module_the_docs_name_exists():
    missing = [f"{doc.relative_to(ROOT)}: {name}" for doc in doc_files()
               for name in sorted(set(re.findall(r"\bslicemeter(?:\.\w+)+", doc.read_text())))
               if dotted_name_exists(name.rstrip(".")) is False]
    assert not missing, "modules or names that do not exist:\n" + "\n".join(missing)


def test_no_doc_narrates_history():
    """A doc says what is and why; how it came to be is in the commit log."""
    found = [f"{doc.relative_to(ROOT)}:{n}: {m.group(0)!r}"
             for doc in doc_files() + [ROOT / "bench" / "RESULTS.md"]
             for n, line in enumerate(doc.read_text().splitlines(), 1)
             for m in [DIARY.search(line)] if m]
    assert not found, "docs that tell the past:\n" + "\n".join(found)


def test_no_comment_narrates_history():
    found = [f"{path.relative_to(ROOT)}:{line}: {m.group(0)!r}"
             for path in code_files() for line, text in comments(path)
             for m in [HISTORY.search(text)] if m]
    assert not found, "comments that tell the past instead of why:\n" + "\n".join(found)


def test_nothing_points_outside_the_repository():
    found = [f"{path.relative_to(ROOT)}:{n}" for path in tracked_files() if path != Path(__file__).resolve()
             for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1) if OUTSIDE.search(line)]
    assert not found, "references outside the repository:\n" + "\n".join(found)


def test_the_checks_catch_what_they_are_for():
    """Each check fails on a sample of what it is for, so a green run means something."""
    assert HISTORY.search("# the chargeback branch's loader")
    assert HISTORY.search("-- see issue 4")
    assert HISTORY.search("it previously copied the file")
    assert HISTORY.search("against the issue's target") and HISTORY.search("the CLIs in the BRIEF")
    assert not HISTORY.search("a brief outage")
    assert not HISTORY.search("# an exact branch and bound")
    assert not HISTORY.search("# tenants the source no longer lists")
    assert OUTSIDE.search("see " + "../" + "shared/ARCHITECTURE.md")
    assert backticked_paths("`ingest/chargeback.py` and `sql/queries/` and `x.sql`") == [
        "ingest/chargeback.py", "sql/queries/", "x.sql"]
    assert plain_paths("see ingest/chargeback.py, sql/queries/ and deploy/slicemeter-ingest.") == [
        "ingest/chargeback.py", "sql/queries/"]
    assert not path_exists("ingest/chargeback.py") and not path_exists("sql/queries/")
    assert path_exists("chargeback/bill.py") and path_exists("sql/testkit/*_from_raw.sql")
    assert dotted_name_exists("slicemeter.ingest.writer.write_batch")
    assert dotted_name_exists("slicemeter.ingest.chargeback") is False
    assert dotted_name_exists("slicemeter.rightsizing.plan.no_such_function") is False
    assert dotted_name_exists("slicemeter.ticks") is None
    assert python_comments('"""Doc."""\nx = 1  # why\n') == [(2, "# why"), (1, "Doc.")]
    assert python_comments('def f():\n    """One.\n\n    Two."""\n') == [(2, "One."), (3, ""), (4, "    Two.")]
