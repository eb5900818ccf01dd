#!/usr/bin/env bash
# tools/doc_programs.py: the README's and docs/' programs build and run, and
# the checker itself fails on a program that does not build, one that fails
# when run, and a ```c block without a mark.
#   tests/tools/doc_programs_check.sh BUILD_DIR WORKDIR
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tool="$here/../../tools/doc_programs.py"
build="$1" work="$2"
mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
python3 "$tool" "$build" || fail "the documentation's programs"
bad() {  # file-name body: the checker must refuse it
  printf '%s\n' "$2" >"$work/$1.md"
  python3 "$tool" "$build" "$work/$1.md" >"$work/$1.out" 2>&1 &&
    fail "doc_programs.py accepted $1: $(cat "$work/$1.out")"
}
bad unbuildable $'<!-- docs: program -->\n```c\nint main(void) { return undeclared; }\n```'
bad failing $'<!-- docs: program run -->\n```c\nint main(void) { return 3; }\n```'
bad unmarked $'```c\nint main(void) { return 0; }\n```'
echo "$failures failure(s)"
[ "$failures" = 0 ]
