#!/usr/bin/env python3
"""Every CUBE_* environment variable cubec reads is in the configuration
table (src/core/config.h) and documented as a row of docs/config.md, or,
for the launcher's variables the table leaves out on purpose (a rank's
place: CUBE_RANK, ...), named in docs/config.md's text; and every row of
docs/config.md is a variable of the table:

    config_vars.py SOURCE_DIR

"Read" means named in a string literal of src/ or tools/ (getenv's
argument, rank discovery's table, the config table itself); the dialect's
macro names (include/cube/dialect.h) are not variables. Exit 0 when it
holds, 1 naming what is missing."""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
literal = re.compile(r'"(CUBE_[A-Z0-9_]+)"')
read = {}
for path in list((root / "src").rglob("*.[ch]")) + list((root / "tools").rglob("*.[ch]")):
    for name in literal.findall(path.read_text(errors="replace")):
        read.setdefault(name, path.relative_to(root))
dialect = set(re.findall(r"#\s*define\s+(CUBE_[A-Z0-9_]+)",
                         (root / "include/cube/dialect.h").read_text()))
dialect |= {n for n in read if n.startswith("CUBE__")}
variables = {n: p for n, p in read.items() if n not in dialect}
table = set(re.findall(r'X\([A-Z0-9_]+,\s*"([A-Z_][A-Z0-9_]*)"',
                       (root / "src/core/config.h").read_text()))
docs_text = (root / "docs/config.md").read_text()
rows = set(re.findall(r"^\| `([A-Z_][A-Z0-9_]*)`", docs_text, re.M))
named = set(re.findall(r"`(CUBE_[A-Z0-9_]+)`", docs_text))
problems = []
for name, path in sorted(variables.items()):
    if name in table:
        if name not in rows:
            problems.append(f"{name} (read in {path}) has no row in docs/config.md")
    elif name not in named:
        problems.append(f"{name} (read in {path}) is neither in the configuration table nor "
                        "named in docs/config.md")
for name in sorted(rows - table):
    problems.append(f"docs/config.md has a row for {name}, which is not in the table")
for name in sorted(n for n in table if n.startswith("CUBE_") and n not in rows):
    problems.append(f"the table's {name} has no row in docs/config.md")
for p in problems:
    print(f"config_vars.py: {p}")
print(f"config_vars.py: {len(variables)} variables read, {len(table)} in the table, "
      f"{len(rows)} documented: {'ok' if not problems else 'FAILED'}")
sys.exit(1 if problems else 0)
