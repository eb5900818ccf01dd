#!/usr/bin/env bash
# Runs a barrier kernel (fibers) under valgrind memcheck: no error, no
# definite leak. Kernels are built for plain x86-64 (CUBE_CPU_MARCH), which
# valgrind decodes; -march=native may emit instructions it cannot (AVX-512).
# Exit 77 (ctest: skipped) without valgrind or in a sanitizer build.
set -u
binary="$1"
command -v valgrind >/dev/null 2>&1 || { echo "SKIPPED: valgrind is not installed"; exit 77; }
case "${CUBE_SANITIZED:-}" in 1) echo "SKIPPED: sanitizer build"; exit 77 ;; esac
export CUBE_CPU_MARCH="${CUBE_CPU_MARCH:-x86-64}"
export CUBE_CPU_WORKERS=1
# The fiber path is what this checks; without libclang nothing loads it (its
# dlopen trips a known glibc/valgrind false positive in strncmp).
export CUBE_CPU_BARRIERS=fibers CUBE_LIBCLANG=none
log="$(mktemp)"
valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
  --track-origins=yes "$binary" >"$log" 2>&1
rc=$?
cat "$log"
if grep -q "client switching stacks" "$log"; then
  echo "FAILED: valgrind did not know a fiber stack"
  rc=1
fi
rm -f "$log"
exit $rc
