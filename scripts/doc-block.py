#!/usr/bin/env python3
"""Writes a measuring script's tables into docs/benchmarks.md as a block of its own.

    doc-block.py KEY HEADER < TABLES

The block sits between `<!-- KEY -->` and `<!-- end KEY -->`: HEADER (date, machine, commit,
command) and the tables read from stdin. A block already there under KEY is replaced; a new
one goes at the end of the file under a `## KEY` heading. The docs' tables are the scripts'
output, regenerated, never pasted (docs/decisions.md, "Measuring").
"""
import re
import sys
from pathlib import Path

key, header = sys.argv[1:3]
path = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
begin, end = f"<!-- {key} -->", f"<!-- end {key} -->"
body = sys.stdin.read().strip()
# A table follows its header line directly (a Markdown table may end a paragraph).
block = f"{begin}\n{header}\n{body}\n{end}" if body.startswith("|") else f"{begin}\n{header}\n\n{body}\n{end}"
text = path.read_text()
pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
if pattern.search(text):
    text = pattern.sub(lambda _: block, text)
else:
    text = text.rstrip("\n") + f"\n\n## {key}\n\n{block}\n"
path.write_text(text)
print(f"docs: {path} <- {key}", file=sys.stderr)
