#!/bin/sh
# cpu-compile-stop3.md: the kernels the tests compile give the same objects
# with the backend's new flags (-DCUBE__OWN_LIBC, -DCUBE__OMIT_*) as with the
# whole dialect and the system headers. A CUBE_CC wrapper keeps each
# kernel.c and its arguments; each is then compiled both ways (-c) and the
# disassembly with relocations, .rodata and the symbol names compared.
# Run from the repository root after a build:
#   sh docs/measurements/2026-12-03/cpu-compile-stop3-same-objects.sh [gcc|clang]
set -eu
CC=${1:-gcc}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir "$W/cap"
cat >"$W/cc" <<WRAP
#!/bin/sh
if [ -f kernel.c ]; then
  d=\$(mktemp -d "$W/cap/k.XXXXXX"); cp kernel.c "\$d/"; printf '%s\n' "\$@" >"\$d/args"
fi
exec $CC "\$@"
WRAP
chmod +x "$W/cc"
CUBE_CC="$W/cc" CUBE_CACHE_DIR="$W/cache" ctest --test-dir build -j2 \
  -R "conformance|cpu\.|tools.tma|core.test_kernel|core.test_bundle" >"$W/ctest.log" 2>&1 ||
  { tail -20 "$W/ctest.log"; exit 1; }
CUBE_CC="$W/cc" CUBE_CACHE_DIR="$W/cache2" ./build/bench/bench_bundle --runs 1 >/dev/null 2>&1
same=0 differ=0 refused=0
for d in "$W"/cap/k.*; do
  a=$(grep -v -x -e -o -e kernel.so -e kernel.c -e -lm -e -nolibc -e -shared -e -pipe \
    -e -fstack-usage "$d/args" | tr '\n' ' ')
  b=$(echo "$a" | sed -E 's/-DCUBE__(OMIT_[A-Z_]+|OWN_LIBC) //g')
  ok_a=0 ok_b=0
  (cd "$d" && $CC $a -c -o new.o kernel.c 2>/dev/null) && ok_a=1
  (cd "$d" && $CC $b -c -o old.o kernel.c 2>/dev/null) && ok_b=1
  if [ $ok_a = 0 ] && [ $ok_b = 0 ]; then refused=$((refused + 1)); continue; fi
  [ $ok_a = 1 ] && [ $ok_b = 1 ] || { echo "only one builds: $d"; differ=$((differ + 1)); continue; }
  for o in new old; do
    { objdump -dr --no-show-raw-insn "$d/$o.o" | tail -n +4
      objdump -s -j .rodata "$d/$o.o" 2>/dev/null | tail -n +4
      objdump -t "$d/$o.o" | tail -n +5 | awk '{print $NF}' | sort; } >"$d/$o.txt"
  done
  if cmp -s "$d/new.txt" "$d/old.txt"; then same=$((same + 1)); else
    differ=$((differ + 1)); echo "differs: $(grep -m1 '^#line 1 ".*\.cube"' "$d/kernel.c")"; fi
done
n=$(ls "$W/cap" | wc -l)
distinct=$(md5sum "$W"/cap/k.*/kernel.c | awk '{print $1}' | sort -u | wc -l)
echo "$CC: $n compiles ($distinct distinct sources): identical $same, different $differ," \
  "refused both ways $refused (the tests' broken kernels)"
