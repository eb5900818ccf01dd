#!/bin/sh
# What a CPU kernel's first compile costs, step by step (issue 31): the
# steps cpu_kernel.c runs for bench_bundle's saxpy, each repeated and its
# median printed in ms. Run from the repository root after a build:
#   sh docs/measurements/2026-12-03/cpu-compile-steps.sh [build] [runs]
set -eu
BUILD=${1:-build}
RUNS=${2:-9}
CC=${CUBE_CC:-cc}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
# kernel.c as the backend writes it: the dialect, the source, the note, the
# stack table's placeholder. (Revised for cpu-compile-stop3.md: each step
# before and after; the first version is in git history.)
{
  printf '#line 1 "cube/dialect.h"\n'
  cat include/cube/dialect.h
  printf '\n#line 1 "bb_saxpy.cube"\n'
  printf 'CUBE_KERNEL(bb_saxpy, IN(float, x), INOUT(float, y)) {\n  float a = SCALAR(f32, 0);\n'
  printf '  uint64_t i = ABSOLUTE_POS;\n  if (i < LEN(y)) y[i] += a * x[i];\n}\n'
  printf '\nCUBE__EXPORT const char bb_saxpy__cube_split_note[] = "not split";\n'
  printf 'CUBE__EXPORT const unsigned long long bb_saxpy__cube_stack[3] = {1ull, 2ull, 3ull};\n'
} >"$W/kernel.c"
printf 'const unsigned long long t__cube_stack[3] = {1ull, 2ull, 3ull};\n' >"$W/stack.c"
printf 'int x;\n' >"$W/empty.c"
# The dlopen probe: loads and closes a copy of the object (a new name each
# time, so the loader never answers from a handle it holds).
cat >"$W/load.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) {
    void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    dlclose(h);
  }
  return 0;
}
C
$CC -O2 -o "$W/load" "$W/load.c" -ldl
# libclang's load alone (what a kernel with something to split pays first).
cat >"$W/clang.c" <<'C'
#include <dlfcn.h>
int main(void) { return dlopen("libclang-15.so.1", RTLD_NOW | RTLD_LOCAL) ? 0 : 1; }
C
$CC -O2 -o "$W/clang" "$W/clang.c" -ldl
# FB: the flags before cpu-compile-stop3.md (the system headers, the whole
# dialect); F: the backend's flags now (the dialect's own libc names, the
# sections saxpy does not name left out).
FB="-std=gnu11 -O3 -fPIC -shared -w -march=native -DCUBE__NO_BARRIER -DCUBE__DIM_X=256 -DCUBE__DIM_Y=1 -DCUBE__DIM_Z=1"
F="-std=gnu11 -O3 -fPIC -shared -w -march=native -DCUBE__OWN_LIBC -DCUBE__OMIT_LINES -DCUBE__OMIT_FRAGMENTS -DCUBE__OMIT_ASYNC_COPIES -DCUBE__OMIT_TMA -DCUBE__OMIT_WGMMA -DCUBE__NO_BARRIER -DCUBE__DIM_X=256 -DCUBE__DIM_Y=1 -DCUBE__DIM_Z=1"
ms() { # median wall ms of RUNS runs of "$@" (in $W), then its CPU ms (perf's
  # task-clock, children included: steadier than the wall time on a busy VM)
  i=0
  wall=$(while [ $i -lt "$RUNS" ]; do
    s=$(date +%s%N)
    (cd "$W" && "$@" >/dev/null 2>&1)
    echo $(( ($(date +%s%N) - s) / 1000 ))
    i=$((i + 1))
  done | sort -n | awk '{a[NR]=$1} END {printf "%8.1f", a[int((NR+1)/2)]/1000}')
  cpu=$(cd "$W" && perf stat -r "$RUNS" -x, -e task-clock "$@" 2>&1 >/dev/null | tail -1 |
    awk -F, '$1 ~ /^[0-9.]+$/ {printf "%8.1f", $1; ok=1} END {if (!ok) printf "       -"}')
  printf '%s %s' "$wall" "$cpu"
}
echo "load: $(cut -d' ' -f1-3 /proc/loadavg); $RUNS runs each: median wall ms, mean CPU ms (perf)"
printf '%s  cc --version (fork/exec of the driver; once per process)\n' "$(ms $CC --version)"
printf '%s  cc -c of an empty file at -O3 (driver + cc1 + as start-up)\n' "$(ms $CC $F -c -o e.o empty.c)"
printf '%s  before: preprocess kernel.c (-E: the dialect and the system headers)\n' "$(ms $CC $FB -E -o kernel.i kernel.c)"
printf '%s  now: preprocess kernel.c (-E: the dialect alone, 5 sections left out)\n' "$(ms $CC $F -E -o kernel.i kernel.c)"
printf '%s  before: parse only (-fsyntax-only)\n' "$(ms $CC $FB -fsyntax-only kernel.c)"
printf '%s  now: parse only (-fsyntax-only)\n' "$(ms $CC $F -fsyntax-only kernel.c)"
printf '%s  before: compile to an object at -O3\n' "$(ms $CC $FB -c -o k.o kernel.c)"
for O in -O0 -O1 -O2 -O3; do
  printf '%s  now: compile to an object at %s\n' "$(ms $CC $(echo "$F" | sed "s/-O3/$O/") -c -o k.o kernel.c)" "$O"
done
printf '%s  now: compile the preprocessed kernel.i at -O3\n' "$(ms $CC $F -c -o k.o -x cpp-output kernel.i)"
(cd "$W" && $CC $F -c -o k.o kernel.c)
printf '%s  before: link the object into a .so (cc -shared)\n' "$(ms $CC $F -o k.so k.o -lm)"
printf '%s  now: link the object into a .so (cc -shared -nolibc)\n' "$(ms $CC $F -nolibc -o k.so k.o -lm)"
printf '%s  link with ld alone (ld -shared, no libraries)\n' "$(ms ld -shared -o k.so k.o)"
printf '%s  before: cc -pipe -fstack-usage -o kernel.so kernel.c -lm (one run)\n' \
  "$(ms $CC $FB -pipe -fstack-usage -o kernel.so kernel.c -lm)"
printf '%s  now: cc -pipe -fstack-usage -nolibc -o kernel.so kernel.c -lm (one run)\n' \
  "$(ms $CC $F -pipe -fstack-usage -nolibc -o kernel.so kernel.c -lm)"
i=0; set --
while [ $i -lt 20 ]; do cp "$W/kernel.so" "$W/copy$i.so"; set -- "$@" "$W/copy$i.so"; i=$((i + 1)); done
printf '%s  dlopen + dlclose of the object, 20 copies (process start included)\n' "$(ms ./load "$@")"
printf '%s  process start alone (the same probe, nothing loaded)\n' "$(ms ./load)"
printf '%s  dlopen of libclang (skipped now for kernels with nothing to split)\n' "$(ms ./clang)"
