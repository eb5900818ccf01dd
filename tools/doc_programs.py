#!/usr/bin/env python3
"""Compiles (and runs) the C programs of the documentation, so that no
README or docs/ snippet rots:

    tools/doc_programs.py BUILD_DIR [FILE.md ...]   (default: README.md docs/*.md)

Every ```c block must say what it is, on the line before its fence:
  <!-- docs: program -->       a complete program: compiled with -Wall
                               -Wextra -Werror against the build's headers
                               and linked with its static library;
  <!-- docs: program run -->   the same, then run with CUBE_BACKEND=cpu (or
                               $CUBE_DOC_BACKEND); exit 0 or 77 ("cannot run
                               here") required;
  <!-- docs: fragment -->      a piece of a program, shown for reading only.
A ```c block without a mark fails the check, so a new snippet is either
compiled or knowingly left out. Exit 0 when every program builds (and runs),
1 naming the file, line and compiler or program output otherwise."""
import os
import pathlib
import re
import subprocess
import sys
import tempfile

MARK = re.compile(r"^<!--\s*docs:\s*(program run|program|fragment)\s*-->\s*$")


def blocks(path):
    """Yields (line, mark, code) for every ```c block of |path|."""
    lines = path.read_text().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```c":
            start = i + 1
            j = start
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            k = i - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            m = MARK.match(lines[k].strip()) if k >= 0 else None
            yield start, (m.group(1) if m else None), "\n".join(lines[start:j]) + "\n"
            i = j
        i += 1


def main():
    build = pathlib.Path(sys.argv[1]).resolve()
    root = pathlib.Path(__file__).resolve().parent.parent
    files = [pathlib.Path(f) for f in sys.argv[2:]] or \
        [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    library = build / "libcubec.a"
    if not library.exists():
        sys.exit(f"doc_programs.py: {library} is missing: build cubec first")
    cc = os.environ.get("CC", "cc")
    # A sanitizer build's library needs the same flags in the program.
    extra = os.environ.get("CUBE_DOC_CFLAGS", "").split()
    failures, programs, ran, fragments = [], 0, 0, 0
    env = dict(os.environ, CUBE_BACKEND=os.environ.get("CUBE_DOC_BACKEND", "cpu"),
               CUBE_TUNE=os.environ.get("CUBE_TUNE", "test"))
    with tempfile.TemporaryDirectory() as scratch:
        for path in files:
            for line, mark, code in blocks(path):
                where = f"{path.relative_to(root) if path.is_absolute() else path}:{line}"
                if mark is None:
                    failures.append(f"{where}: a ```c block without <!-- docs: program -->, "
                                    "<!-- docs: program run --> or <!-- docs: fragment -->")
                    continue
                if mark == "fragment":
                    fragments += 1
                    continue
                programs += 1
                source = pathlib.Path(scratch) / f"doc{programs}.c"
                binary = pathlib.Path(scratch) / f"doc{programs}"
                source.write_text(f'#line 1 "{where}"\n' + code)
                command = [cc, "-std=gnu11", "-Wall", "-Wextra", "-Werror",
                           f"-I{root / 'include'}", f"-I{build / 'include'}", str(source),
                           "-o", str(binary), str(library), "-lpthread", "-ldl", "-lm"] + extra
                built = subprocess.run(command, capture_output=True, text=True)
                if built.returncode != 0:
                    failures.append(f"{where}: does not build:\n{built.stderr.strip()}")
                    continue
                if mark == "program run":
                    run = subprocess.run([str(binary)], capture_output=True, text=True,
                                         env=env, cwd=scratch, timeout=600)
                    if run.returncode not in (0, 77):
                        failures.append(f"{where}: exit status {run.returncode}:\n"
                                        f"{(run.stdout + run.stderr).strip()[-2000:]}")
                        continue
                    ran += 1
    for failure in failures:
        print(f"doc_programs.py: {failure}")
    print(f"doc_programs.py: {programs} programs built, {ran} run, {fragments} fragments "
          f"left out: {'ok' if not failures else f'{len(failures)} FAILED'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
