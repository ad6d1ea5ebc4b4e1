#!/usr/bin/env python3
"""README's figures against the results files they come from (scripts/readme-check.sh).

A figure is a number with a decimal point, a sign or a unit (`1.98 s`, `+154%`, `4.85 µs`,
`8.0 KiB`, `2.0–3.1×`); bare counts (`2 CPUs`, `n=10`) are not figures. Outside code blocks,
inline code, link targets and the generated blocks (scripts/bench-readme.sh checks those):

- a paragraph that cites results files (links to bench/results/*.md, or docs/placement.md, whose
  tables `pjw sim` generates) may quote figures only from them: every figure's number must be a
  number of one of those files, as written there;
- a paragraph that cites none holds no figure, but the specifications listed in SPECS (defaults,
  limits, budgets, sizes a user types: what pjw is told, not what it measured).

Prints one line per failure and a summary; exits 1 on any failure.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Figures that are specifications, not measurements: (pattern in the paragraph, why it is not
# a measurement). A figure in an uncited paragraph must lie inside one of these matches.
SPECS = [
    (r"cargo 1\.80", "the Rust version needed"),
    (r"priorities 1–16", "the priority range"),
    (r"75 minutes", "the CI budget"),
    (r"stops at 90", "the CI gate's limit"),
    (r"15 s by default", "the fuzz run's default length"),
    (r"\(default 10 s\)|default 10 s", "profile.interval's default"),
    (r"every second", "the young jobs' sampling step"),
    (r"\(1 s\)", "bind_interval_ms's default"),
    (r"1 ms child", "an example of what samples miss"),
    (r"under a second|more than 1 % of it", "where efficiency is not shown, and why"),
    (r"80×24", "the smallest terminal pjw top needs"),
    (r"default 60 s", "PJW_RECONNECT_SECS's default"),
    (r"\(\s*,\s*30 s\)", "PJW_CONNECT_WAIT's default (the variable's name is inline code)"),
    (r"1-10000", "the I/O weight's range"),
    (r"100 MiB/s|50 MiB/s", "the limits the I/O scenario sets"),
    (r"within 10%", "the I/O throttle's goal"),
    (r"64 MiB", "the NUMA scenario's buffer per thread"),
    (r"growing to 300 MiB", "the example job's shape"),
    (r"95%", "the confidence level"),
    (r"0\.5 s", "how fresh status figures are"),
    (r"30 days", "profile.retention's default"),
    (r"--tmp 256M|--mem 8G|wbps=100M", "options in examples"),
    (r"half an hour", "the bench's length, in words"),
    (r"Slurm 22\.05|Ubuntu 24\.04|Grid Engine 8\.1\.9", "versions"),
]

FIGURE = re.compile(
    r"(?<![\w.])[+\-−±~]?\d(?:[\d,]*\d)?(?:\.\d+)?(?:\s?[–-]\s?\d(?:[\d,]*\d)?(?:\.\d+)?)?"
    r"(?:\s?(?:%|µs|μs|ms|s|KiB|MiB|GiB|KB|MB/s|MiB/s|×|x|points|minutes?|hours?)(?![\w]))?"
)
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
CITED = re.compile(r"\((?:\./)?((?:bench/results/[\w.-]+\.md)|docs/placement\.md)(?:#[^)]*)?\)")


def is_figure(tok: str) -> bool:
    """A number with a decimal point, a sign or a unit; not a bare count."""
    t = tok.strip()
    core = NUMBER.search(t).group(0)
    return "." in core or t != core


def numbers_of(path: Path) -> set:
    text = path.read_text(encoding="utf-8", errors="replace")
    return {n.replace(",", "") for n in NUMBER.findall(text)}


def paragraphs(text: str):
    """(first line number, text) of each prose paragraph outside code and generated blocks."""
    out, cur, start = [], [], 0
    code = gen = False
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            code = not code
            continue
        if re.match(r"<!-- bench-readme( demo)?: begin", line):
            gen = True
        if re.match(r"<!-- bench-readme( demo)?: end", line):
            gen = False
            continue
        if code or gen:
            continue
        if not line.strip() or line.startswith("#") or line.startswith("|"):
            if cur:
                out.append((start, " ".join(cur)))
                cur = []
            if line.startswith("|"):
                out.append((i, line))
            continue
        if not cur:
            start = i
        cur.append(line)
    if cur:
        out.append((start, " ".join(cur)))
    return out


def prose(par: str) -> str:
    """The paragraph without inline code, link targets, HTML comments and file names."""
    p = re.sub(r"<!--.*?-->", " ", par)
    p = re.sub(r"`[^`]*`", " ", p)
    p = re.sub(r"\]\([^)]*\)", "]", p)
    p = re.sub(r"\S*\d{4}-\d{2}-\d{2}T\d{6}Z\S*", " ", p)
    p = re.sub(r"\b\d{4}-\d{2}-\d{2}\b", " ", p)
    return p


def main() -> int:
    readme = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    failures, checked = [], 0
    for line, par in paragraphs(text):
        cited = [ROOT / m for m in CITED.findall(par)]
        missing = [c for c in cited if not c.is_file()]
        for c in missing:
            failures.append(f"README.md:{line}: cites {c.relative_to(ROOT)}, which does not exist")
        body = prose(par)
        figures = [m for m in FIGURE.finditer(body) if is_figure(m.group(0))]
        if not figures:
            continue
        spans = [s.span() for pat, _ in SPECS for s in re.finditer(pat, body)]
        spec = lambda m: any(x <= m.start() and m.end() <= y for x, y in spans)
        if cited and not missing:
            known = set().union(*(numbers_of(c) for c in cited))
            for m in figures:
                checked += 1
                if spec(m):
                    continue
                for n in NUMBER.findall(m.group(0)):
                    if n.replace(",", "") not in known:
                        names = ", ".join(str(c.relative_to(ROOT)) for c in cited)
                        failures.append(
                            f"README.md:{line}: {m.group(0).strip()!r} is in none of the results files it cites ({names})"
                        )
                        break
            continue
        for m in figures:
            checked += 1
            if not spec(m):
                failures.append(
                    f"README.md:{line}: {m.group(0).strip()!r} is typed by hand: cite the results file it comes from, generate it, or list it in SPECS if it is no measurement"
                )
    for f in failures:
        print(f)
    print(f"readme figures: {checked} checked, {len(failures)} not from a results file")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
