#!/usr/bin/env python3
"""Checks that keep the house in shape (`make lint`; issue 29, docs/decisions.md (cf)).

  sizes   Non-test functions over 100 lines and non-test source files over 600 lines in
          crates/*/src and bench/workloads/src: one line each, then a count. Reported only;
          with --enforce any of them fails the check.
  arch    docs/architecture.md in step with the tree: every `*.rs` file it names exists, and
          every source file of a crate is named in that crate's row of the crate table or in a
          module list headed with its directory (`### ... (`crates/X/src/DIR/`)`). Fails on any
          gap.

With no check named, both run. Exits 1 when a check fails.

What counts as test code: files declared as `#[cfg(test)] mod x;` (and every module below
them), items under `#[cfg(test)]`, and `#[test]` functions. A function's length runs from the
line of its `fn` to the line of its closing brace; a file's is all its lines.
"""

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_FN_LINES = 100
MAX_FILE_LINES = 600
SOURCE_DIRS = ["crates/*/src", "bench/workloads/src"]
ARCH = "docs/architecture.md"


# ---- a small Rust lexer: identifiers and punctuation with their line, literals and comments
# dropped (enough to find items and match braces; not a parser).

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RAW_STR = re.compile(r'(?:br|r)(#*)"')
NUMBER = re.compile(r"[0-9][0-9A-Za-z_.]*")


def tokens(text):
    """Yield (kind, value, line): kind is 'id', 'p' (one punctuation character) or 'attr'."""
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            line += text.count("\n", i, j)
            i = j
        elif (m := RAW_STR.match(text, i)) and (i == 0 or not _ident_char(text[i - 1])):
            end = text.find('"' + m.group(1), m.end())
            end = n if end < 0 else end + 1 + len(m.group(1))
            line += text.count("\n", i, end)
            i = end
        elif c == '"' or (c == "b" and text.startswith('b"', i) and not _ident_before(text, i)):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            line += text.count("\n", i, j + 1)
            i = j + 1
        elif c == "'" or (c == "b" and text.startswith("b'", i) and not _ident_before(text, i)):
            j = i + (2 if c == "b" else 1)
            if j < n and text[j] == "\\":
                k = text.find("'", j + 2)
                i = n if k < 0 else k + 1
            elif j + 1 < n and text[j + 1] == "'":
                i = j + 2
            else:  # a lifetime or a label
                m = IDENT.match(text, j)
                i = m.end() if m else j
        elif m := IDENT.match(text, i):
            yield ("id", m.group(0), line)
            i = m.end()
        elif m := NUMBER.match(text, i):
            i = m.end()
        else:
            yield ("p", c, line)
            i += 1


def _ident_char(c):
    return c.isalnum() or c == "_"


def _ident_before(text, i):
    return i > 0 and _ident_char(text[i - 1])


def is_test_attr(body):
    """Whether an attribute's tokens (joined, no spaces) mark test-only code."""
    return (
        body == "test"
        or body.endswith("::test")
        or re.match(r"cfg\((all\(|any\()?test\b", body) is not None
    )


class Item:
    def __init__(self, name, start, end, test):
        self.name, self.start, self.end, self.test = name, start, end, test

    @property
    def lines(self):
        return self.end - self.start + 1


def scan(text):
    """(functions, test module declarations) of one file. Functions as Items; declarations as
    (name, path attribute or None, is test)."""
    toks = list(tokens(text))
    n = len(toks)

    def matching(k):
        """Index of the token closing the bracket at k."""
        open_, close = toks[k][1], {"{": "}", "(": ")", "[": "]"}[toks[k][1]]
        depth = 0
        for j in range(k, n):
            if toks[j][0] == "p":
                if toks[j][1] == open_:
                    depth += 1
                elif toks[j][1] == close:
                    depth -= 1
                    if depth == 0:
                        return j
        return n - 1

    def item_end(k):
        """From an item's first token: the index of its `;` or of its body's `}`, and whether
        it has a body."""
        j = k
        while j < n:
            kind, v, _ = toks[j]
            if kind == "p" and v in "([":
                j = matching(j) + 1
                continue
            if kind == "p" and v == ";":
                return j, False
            if kind == "p" and v == "{":
                return matching(j), True
            j += 1
        return n - 1, False

    fns, mods, test_spans = [], [], []
    pending_test, pending_path = False, None
    k = 0
    while k < n:
        kind, v, line = toks[k]
        if kind == "p" and v == "#" and k + 1 < n and toks[k + 1][1] in ("[", "!"):
            open_at = k + 1 if toks[k + 1][1] == "[" else k + 2
            close = matching(open_at)
            body = "".join(t[1] for t in toks[open_at + 1 : close])
            if toks[k + 1][1] == "[":
                if is_test_attr(body):
                    pending_test = True
                m = re.match(r"path=", body)
                if m:
                    pending_path = _attr_string(text, toks[open_at][2])
            k = close + 1
            continue
        if pending_test and kind == "id" and v not in ("pub", "crate", "super", "in"):
            end, has_body = item_end(k)
            test_spans.append((toks[k][2], toks[end][2]))
            if v == "mod" and not has_body and k + 1 < n:
                mods.append((toks[k + 1][1], pending_path, True))
            pending_test, pending_path = False, None
        elif kind == "id" and v == "mod" and k + 2 < n and toks[k + 2][1] == ";":
            mods.append((toks[k + 1][1], pending_path, False))
            pending_path = None
        if kind == "id" and v == "fn" and k + 1 < n and toks[k + 1][0] == "id":
            end, has_body = item_end(k)
            if has_body:
                fns.append(Item(toks[k + 1][1], line, toks[end][2], False))
        k += 1
    for f in fns:
        f.test = any(a <= f.start and f.end <= b for a, b in test_spans)
    return fns, mods


def _attr_string(text, line):
    """The string of a `#[path = "..."]` attribute on `line`."""
    m = re.search(r'path\s*=\s*"([^"]*)"', text.splitlines()[line - 1])
    return m.group(1) if m else None


def source_files():
    """{path relative to ROOT: is test code}, module tree by module tree."""
    out = {}
    for pattern in SOURCE_DIRS:
        for src in sorted(ROOT.glob(pattern)):
            roots = [p for p in (src / "lib.rs", src / "main.rs") if p.exists()]
            roots += sorted((src / "bin").glob("*.rs")) if (src / "bin").is_dir() else []
            for r in roots:
                _walk(r, False, True, out)
            for f in sorted(src.rglob("*.rs")):  # not reached by a `mod`: still source
                out.setdefault(f.relative_to(ROOT).as_posix(), False)
    return out


def _walk(path, test, is_mod_root, out):
    rel = path.relative_to(ROOT).as_posix()
    if rel in out:
        return
    out[rel] = test
    _, mods = scan(path.read_text())
    base = path.parent if is_mod_root or path.name == "mod.rs" else path.with_suffix("")
    for name, attr_path, is_test in mods:
        if attr_path:
            cands = [path.parent / attr_path]
        else:
            cands = [base / f"{name}.rs", base / name / "mod.rs"]
        for c in cands:
            if c.exists():
                _walk(c, test or is_test, False, out)
                break


# ---- sizes


def sizes(enforce):
    files = source_files()
    long_fns, long_files, total_fns = [], [], 0
    for rel, test in sorted(files.items()):
        if test:
            continue
        text = (ROOT / rel).read_text()
        count = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if count > MAX_FILE_LINES:
            long_files.append((count, rel))
        fns, _ = scan(text)
        for f in fns:
            if f.test:
                continue
            total_fns += 1
            if f.lines > MAX_FN_LINES:
                long_fns.append((f.lines, f"{rel}:{f.start}", f.name))
    for lines, where, name in sorted(long_fns, key=lambda x: (-x[0], x[1])):
        print(f"sizes: function {name} ({where}) has {lines} lines (over {MAX_FN_LINES})")
    for lines, rel in sorted(long_files, key=lambda x: (-x[0], x[1])):
        print(f"sizes: file {rel} has {lines} lines (over {MAX_FILE_LINES})")
    print(
        f"sizes: {len(long_fns)} of {total_fns} non-test functions over {MAX_FN_LINES} lines, "
        f"{len(long_files)} non-test source files over {MAX_FILE_LINES} lines"
        + ("" if enforce else " (reported, not enforced)")
    )
    return not enforce or not (long_fns or long_files)


# ---- arch

RS_NAME = re.compile(r"(?<![\w/.*{,-])([\w*][\w/*.-]*\.rs)\b")
BRACED = re.compile(r"([\w/.-]*)\{([\w,]+)\}\.rs")
DIR_NAME = re.compile(r"`([\w-]+/)`")
CRATE_ROW = re.compile(r"^\|\s*`[\w-]+`\s*\(`((?:crates|bench)/[\w-]+)`")
MODULE_HEADING = re.compile(r"^#+ .*\(`((?:crates|bench)/[\w-]+)/src/([\w/]+/)`\)")
LIST_HEAD = re.compile(r"^((?:crates|bench)/[\w-]+)/src/([\w/]*)(\s|$)")


def rs_names(line):
    """The `*.rs` names a line of the document holds, `{a,b}.rs` expanded."""
    names = RS_NAME.findall(line)
    for prefix, alts in BRACED.findall(line):
        names += [f"{prefix}{a}.rs" for a in alts.split(",")]
    return names


def described(doc):
    """{crate dir: [(directory below src/ the names are relative to, line)]}: the crate table's
    rows; the text under a heading naming a directory (`### ... (`crates/X/src/DIR/`)`); and
    in a code block, the lines after one that names a crate's source directory
    (`crates/X/src/`), up to a blank line."""
    named = {}
    section, listing, fenced = None, None, False
    for line in doc.splitlines():
        if line.startswith("```"):
            fenced, listing = not fenced, None
            continue
        if fenced:
            m = LIST_HEAD.match(line)
            if m:
                listing = (m.group(1), m.group(2))
            elif not line.strip():
                listing = None
            where = listing or section
            if where:
                named.setdefault(where[0], []).append((where[1], line))
            continue
        if line.startswith("#"):
            m = MODULE_HEADING.match(line)
            section = (m.group(1), m.group(2)) if m else None
            continue
        m = CRATE_ROW.match(line)
        if m:
            named.setdefault(m.group(1), []).append(("", line))
        elif section:
            named.setdefault(section[0], []).append((section[1], line))
    return named


def arch():
    doc = (ROOT / ARCH).read_text()
    files = source_files()
    every_rs = sorted(
        p.relative_to(ROOT).as_posix()
        for d in ("crates", "bench")
        for p in (ROOT / d).rglob("*.rs")
        if "target" not in p.parts
    )
    problems = []

    # Every file the document names exists.
    for lineno, line in enumerate(doc.splitlines(), 1):
        for name in rs_names(line):
            if not any(_names(name, f) for f in every_rs):
                problems.append(f"{ARCH}:{lineno}: names {name}, which no crate has")

    # Every source file is named where its crate is described.
    named = described(doc)
    for rel, test in sorted(files.items()):
        crate = "/".join(rel.split("/")[:2])
        below = rel.split("/src/", 1)[1]
        if test or below in ("lib.rs", "main.rs"):
            continue
        if crate not in named:
            problems.append(f"{ARCH}: crate {crate} is described nowhere")
        elif not any(_described(below, sub, text) for sub, text in named[crate]):
            problems.append(f"{ARCH}: {rel} is named nowhere its crate is described")
    for p in problems:
        print(f"arch: {p}")
    print(f"arch: {len(problems)} problems" + ("" if problems else f" ({ARCH} in step with the tree)"))
    return not problems


def _names(name, path):
    """Whether a name written in the document (`alloc.rs`, `config/node.rs`, `cmd_*.rs`) names
    `path`: a glob on the path's last components."""
    pat = re.escape(name).replace(r"\*", r"[^/]*")
    return re.search(rf"(^|/){pat}$", path) is not None


def _described(below, sub, text):
    """Whether `below` (a path under src/) is named by `text`, whose names are relative to the
    directory `sub` of src/."""
    if not below.startswith(sub):
        return False
    below = below[len(sub) :]
    if any(_names(name, below) for name in rs_names(text)):
        return True
    # A module directory named as `dir/` stands for its mod.rs.
    return any(below == f"{d}mod.rs" for d in DIR_NAME.findall(text))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checks", nargs="*", metavar="sizes|arch")
    ap.add_argument("--enforce", action="store_true", help="fail on a function or file too long")
    ap.add_argument("--root", type=Path, help="the tree to check (default: this script's)")
    a = ap.parse_args()
    checks = a.checks or ["sizes", "arch"]
    if set(checks) - {"sizes", "arch"}:
        ap.error(f"unknown check: {' '.join(sorted(set(checks) - {'sizes', 'arch'}))}")
    if a.root:
        global ROOT
        ROOT = a.root.resolve()
    ok = True
    if "sizes" in checks:
        ok &= sizes(a.enforce)
    if "arch" in checks:
        ok &= arch()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
