"""The README and the docs pages (issue #24): every relative link names a file that exists (and, with
`#anchor`, one of its headings), every hpstudy command in their code blocks uses only flags that the
command's `--help` lists, and the README stays a tour of at most 200 lines.

Fast tier: reading the pages takes milliseconds. Slow tier: each command's `python -m ... --help` runs once per
session, side by side (the slowest, `python -m hpstudy.trainers.train --help`, imports torch: ~3 s)."""

import functools
import os
import re
import shlex
import subprocess
import sys
import unicodedata
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CHANGELOG = ROOT / "CHANGELOG.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 200
CI_TEST_COMMAND = '    pip install -e ".[test]" && pytest'  # .ci/run greps README.md for this line


def pages():
    """The README, the changelog and every Markdown page under docs/."""
    return [README, CHANGELOG] + sorted(DOCS.rglob("*.md"))


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# ---------------------------------------------------------------- reading Markdown

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)")


def split_blocks(text: str):
    """[(kind, info, [(line_number, line), ...])]: kind "code" (a fenced block, info its language, or
    an indented block, info "indented") or "text"."""
    blocks, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if fence:
            marker, info, body = fence.group(1), fence.group(2).lower(), []
            closing = re.compile(rf"^ {{0,3}}{re.escape(marker[0])}{{{len(marker)},}}\s*$")
            i += 1
            while i < len(lines) and not closing.match(lines[i]):
                body.append((i + 1, lines[i]))
                i += 1
            blocks.append(("code", info, body))
            i += 1
            continue
        starts_indented = line.startswith(("    ", "\t")) and line.strip() and (i == 0 or not lines[i - 1].strip())
        if starts_indented:
            body = []
            while i < len(lines) and (lines[i].startswith(("    ", "\t")) or not lines[i].strip()):
                if not lines[i].strip() and (i + 1 == len(lines) or not lines[i + 1].startswith(("    ", "\t"))):
                    break
                body.append((i + 1, lines[i]))
                i += 1
            blocks.append(("code", "indented", body))
            continue
        if blocks and blocks[-1][0] == "text":
            blocks[-1][2].append((i + 1, line))
        else:
            blocks.append(("text", "", [(i + 1, line)]))
        i += 1
    return blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text lower-cased, punctuation dropped (letters, digits,
    marks, `_`, `-` and spaces stay), each space a `-`."""
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", heading)  # images
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    kept = "".join(c for c in text if c.isalnum() or c in "_- " or unicodedata.category(c).startswith("M"))
    return kept.replace(" ", "-")


@functools.cache
def anchors(path: Path) -> frozenset:
    """The anchors of a Markdown file's headings (a repeated heading's later ones get -1, -2, ...)."""
    seen, found = {}, set()
    for kind, _, body in split_blocks(path.read_text(encoding="utf-8")):
        if kind != "text":
            continue
        for _, line in body:
            heading = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
            if heading:
                base = slug(heading.group(1))
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]*(?:\([^()\s]*\)[^()\s<>]*)*)>?(?:\s+\"[^\"]*\")?\s*\)"
)
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")


def links(path: Path):
    """[(line_number, target)] of the Markdown links and images outside code."""
    found = []
    for kind, _, body in split_blocks(path.read_text(encoding="utf-8")):
        if kind != "text":
            continue
        for number, line in body:
            line = INLINE_CODE.sub("", line)
            found += [(number, m.group(1)) for m in LINK.finditer(line)]
            found += [(number, m.group(1)) for m in REFERENCE.finditer(line)]
    return found


def broken_link(page: Path, target: str):
    """Why `target`, a link on `page`, is broken, or None (an external link is never broken here)."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target) or target.startswith("//"):
        return None
    path_part, _, anchor = target.partition("#")
    path_part = urllib.parse.unquote(path_part)
    if not path_part:
        file = page
    elif path_part.startswith("/"):  # GitHub: from the repository's root
        file = (ROOT / path_part.lstrip("/")).resolve()
    else:
        file = (page.parent / path_part).resolve()
    if not file.exists():
        return f"{target}: no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}"
    if not file.is_relative_to(ROOT):
        return f"{target}: outside the repository"
    if anchor:
        if file.suffix != ".md" or file.is_dir():
            return f"{target}: an anchor into {rel(file)}, which is not a Markdown page"
        if urllib.parse.unquote(anchor).lower() not in anchors(file):
            return f"{target}: {rel(file)} has no heading whose anchor is #{anchor}"
    return None


# ---------------------------------------------------------------- commands in code blocks

SHELL_BLOCKS = {"", "bash", "sh", "shell", "console", "indented"}


def logical_lines(body):
    """A code block's command lines: backslash continuations joined, and a usage line's wrapped
    options (a line that starts with `[` or `-`) joined to the line above."""
    out = []
    pending = None
    for number, line in body:
        stripped = line.strip().removeprefix("$ ")
        if pending is not None:
            pending[1] += " " + stripped
        elif out and stripped[:1] in ("[", "-") and not out[-1][1].rstrip().endswith("\\"):
            out[-1][1] += " " + stripped
            continue
        else:
            pending = [number, stripped]
        if pending[1].endswith("\\"):
            pending[1] = pending[1][:-1]
            continue
        out.append(pending)
        pending = None
    if pending is not None:
        out.append(pending)
    return [(n, text) for n, text in out]


def shell_segments(line: str):
    """The simple commands of a shell line: a `#` comment dropped, split at `&&`, `||`, `;` and `|`
    outside quotes and outside `[...]` (a usage line's `[--resume | --fresh]` is one command)."""
    segments, current, quote, depth, i = [], "", None, 0, 0
    while i < len(line):
        c = line[i]
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (not current or current[-1].isspace()):
            break
        elif c == "[":
            depth += 1
        elif c == "]":
            depth = max(0, depth - 1)
        elif depth == 0 and line.startswith(("&&", "||"), i):
            segments.append(current)
            current, i = "", i + 2
            continue
        elif depth == 0 and c in ";|":
            segments.append(current)
            current, i = "", i + 1
            continue
        current += c
        i += 1
    segments.append(current)
    return [s.strip() for s in segments if s.strip()]


FLAG = re.compile(r"(?<![\w-])--[A-Za-z][\w-]*")


def flags_of(tokens):
    """The long options among a command's tokens (`[--out DIR]`, `--x=1` and `--a|--b` included)."""
    return [m.group(0) for token in tokens for m in FLAG.finditer(token.split("=", 1)[0])]


def command_of(segment: str):
    """(help key, flags) for a command whose flags the test checks, else None. Help keys:
    ("hpstudy",) or ("hpstudy", sub), ("run_edf",), ("train",)."""
    if not re.match(r"(hpstudy|python3?|ray)(\s|$)", segment):
        return None
    tokens = shlex.split(segment)
    if not tokens:
        return None
    python = tokens[0] in ("python", "python3")
    if tokens[0] == "hpstudy" or (python and tokens[1:3] == ["-m", "hpstudy"]):
        rest = tokens[1:] if tokens[0] == "hpstudy" else tokens[3:]
        sub = rest[0] if rest and not rest[0].startswith(("-", "[")) else None
        key = ("hpstudy",) if sub is None else ("hpstudy", sub)
        return key, flags_of(rest if sub is None else rest[1:])
    if python and len(tokens) > 1 and tokens[1].endswith("study/run_edf.py"):
        return ("run_edf",), flags_of(tokens[2:])
    if python and tokens[1:3] == ["-m", "hpstudy.study.run_edf"]:
        return ("run_edf",), flags_of(tokens[3:])
    if python and tokens[1:3] == ["-m", "hpstudy.trainers.train"]:
        return ("train",), flags_of(tokens[3:])
    if tokens[:2] == ["ray", "submit"] and "--" in tokens:
        script = tokens[: tokens.index("--")]
        if any(t.endswith("run_edf.py") for t in script):
            return ("run_edf",), flags_of(tokens[tokens.index("--") + 1 :])
    return None


def commands(path: Path):
    """[(line_number, segment, help key, flags)] of the checked commands in a page's shell blocks."""
    found = []
    for kind, info, body in split_blocks(path.read_text(encoding="utf-8")):
        if kind != "code" or info not in SHELL_BLOCKS:
            continue
        for number, line in logical_lines(body):
            for segment in shell_segments(line):
                parsed = command_of(segment)
                if parsed:
                    found.append((number, segment, *parsed))
    return found


def argv_for(key):
    """The `python -m ...` arguments that print a help key's help."""
    if key[0] == "hpstudy":
        return ["-m", "hpstudy", *key[1:], "--help"]
    return ["-m", {"run_edf": "hpstudy.study.run_edf", "train": "hpstudy.trainers.train"}[key[0]], "--help"]


@functools.cache
def help_text(key: tuple) -> tuple:
    """(exit code, stdout, stderr) of the key's `python -m ... --help`, run once per session."""
    done = subprocess.run(
        [sys.executable, *argv_for(key)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    return done.returncode, done.stdout, done.stderr


COMMAND_PAGES = [README] + sorted(DOCS.glob("*.md"))
COMMANDS = [(path, *found) for path in COMMAND_PAGES for found in commands(path)]
HELP_KEYS = tuple(sorted({key for *_, key, _ in COMMANDS} | {("hpstudy",)}))


def command_id(case):
    path, number, segment = case[0], case[1], case[2]
    words = re.sub(r"[^\w.-]+", "_", segment)[:48]
    return f"{rel(path)}:{number}:{words}"


@pytest.fixture(scope="session")
def help_texts():
    """Every help text the checked commands need, fetched side by side (each process is its own)."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        return dict(zip(HELP_KEYS, pool.map(help_text, HELP_KEYS)))


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("page", pages(), ids=rel)
def test_relative_links_point_to_files_and_headings(page):
    assert page.exists(), f"{rel(page)} is missing"
    broken = [f"{rel(page)}:{number}: {why}" for number, target in links(page) if (why := broken_link(page, target))]
    assert not broken, "broken links:\n" + "\n".join(broken)


# slow tier: fetching the help texts runs every command's `--help` in a process of its own (~6 s)
@pytest.mark.slow
@pytest.mark.parametrize("case", COMMANDS, ids=command_id)
def test_commands_use_only_flags_their_help_lists(case, help_texts):
    path, number, segment, key, flags = case
    code, out, err = help_texts[key]
    shown = "python " + " ".join(argv_for(key))
    assert code == 0, f"{rel(path)}:{number}: `{segment}`: `{shown}` exited {code}:\n{(err or out)[-1500:]}"
    known = set(FLAG.findall(out))
    unknown = [flag for flag in flags if flag not in known]
    assert not unknown, f"{rel(path)}:{number}: `{segment}` uses {', '.join(unknown)}, which `{shown}` does not list"


def test_the_readme_has_commands_of_every_kind():
    """The command check covers the README's main commands (a parser change would otherwise pass
    by finding none)."""
    keys = {key for path, _, _, key, _ in COMMANDS if path == README}
    for key in [
        ("run_edf",),
        ("hpstudy", "train"),
        ("hpstudy", "run"),
        ("hpstudy", "report"),
        ("hpstudy", "query"),
        ("hpstudy", "status"),
    ]:
        assert key in keys, f"no `{' '.join(key)}` command found in README.md's code blocks"


def test_hpstudy_help_and_version():
    code, out, err = help_text(("hpstudy",))  # one light process: the fast tier skips the session's fixture
    assert code == 0, f"`python -m hpstudy --help` exited {code}:\n{(err or out)[-1500:]}"
    for word in ["run", "status", "report", "query", "compact", "prepare", "suggest", "--version"]:
        assert word in out, f"`hpstudy --help` does not mention {word}"


def test_readme_is_a_tour_of_at_most_200_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"


def test_readme_keeps_the_quickstart_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert CI_TEST_COMMAND in lines, f"README.md lost the line .ci/run greps for: {CI_TEST_COMMAND!r}"
    assert "    pip install -e . && python study/run_edf.py" in lines


def test_readme_links_every_docs_page():
    linked = {(README.parent / target.partition("#")[0]).resolve() for _, target in links(README)}
    missing = [rel(page) for page in sorted(DOCS.glob("*.md")) if page.resolve() not in linked]
    assert not missing, f"README.md links no {', '.join(missing)}"
    assert CHANGELOG.resolve() in linked, "README.md does not link CHANGELOG.md"


def test_link_checker_knows_broken_links():
    """The checker itself: a missing file, a missing heading and an anchor into a non-Markdown file are
    broken; GitHub's slugs (code, punctuation, a repeated heading) resolve."""
    page = ROOT / "docs" / "store.md"
    assert broken_link(page, "no-such-page.md")
    assert broken_link(page, "store.md#no-such-heading")
    assert broken_link(page, "../pyproject.toml#x")
    assert broken_link(page, "https://example.org/x") is None
    assert slug("`run_edf.py` and *more*: (yes)") == "run_edfpy-and-more-yes"
    assert slug('What "nothing lost" means') == "what-nothing-lost-means"
    assert slug("Δ-EDF panels") == "δ-edf-panels"
    assert shell_segments("a [--x | --y] && b # c | d") == ["a [--x | --y]", "b"]
    assert command_of("ray submit --tmux c.yaml study/run_edf.py -- --config x --address auto") == (
        ("run_edf",),
        ["--config", "--address"],
    )
