#!/usr/bin/env bash
# Builds and runs the consumer projects, each linked shared and static:
#   tests/consumer/run.sh PREFIX WORKDIR [SOURCE]
# PREFIX is what `cmake --install build --prefix PREFIX` installed into:
# two projects build against it (find_package(cubec) and pkg-config).
# SOURCE (cubec's source tree) adds two that build cubec as a sub-project
# (add_subdirectory, FetchContent from a local path); there cubec must
# configure none of its tests, benchmarks or examples, no -Werror and no
# cmocka.
# Checks that each program runs, that the shared builds load the libcubec.so
# they were built with and the static ones load no libcubec at all.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
prefix="$(cd "$1" && pwd)"
work="$2"
source="${3:-}"
mkdir -p "$work"
libdir="$(dirname "$(find "$prefix" -name 'cubec.pc' -path '*/pkgconfig/*' | head -n1)")"
[ -n "$libdir" ] || { echo "consumer: no cubec.pc under $prefix" >&2; exit 1; }
export PKG_CONFIG_PATH="$libdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export CUBE_CACHE_DIR="${CUBE_CACHE_DIR:-$work/kernel-cache}"
# The pkg-config file must name the prefix it was installed to.
pc_prefix="$(pkg-config --variable=prefix cubec)"
[ "$pc_prefix" = "$prefix" ] || { echo "consumer: cubec.pc says prefix=$pc_prefix, installed to $prefix" >&2; exit 1; }

# The install carries the license, xxHash's notice, the docs and the man page.
for file in share/doc/cubec/LICENSE share/doc/cubec/NOTICE share/doc/cubec/CHANGELOG.md \
  share/doc/cubec/docs/getting-started.md share/man/man1/cubec.1; do
  [ -s "$prefix/$file" ] || { echo "consumer: the install has no $file" >&2; exit 1; }
done
grep -q 'Yann Collet' "$prefix/share/doc/cubec/NOTICE" ||
  { echo "consumer: NOTICE lacks xxHash's copyright notice" >&2; exit 1; }

check_links() {  # binary, shared|static[, the directory its libcubec.so must come from]
  local needed from="${3:-$prefix}"
  needed="$(readelf -d "$1")"
  needed="$(grep -c 'NEEDED.*libcubec' <<<"$needed" || true)"
  if [ "$2" = shared ]; then
    [ "$needed" = 1 ] || { echo "consumer: $1 does not need libcubec.so" >&2; return 1; }
    # Captured first: `ldd | grep -q` under pipefail fails when grep quits
    # early and ldd gets SIGPIPE.
    local loaded
    loaded="$(ldd "$1")"
    grep -q "$from/.*libcubec.so" <<<"$loaded" ||
      { echo "consumer: $1 does not load $from's libcubec.so:" >&2; echo "$loaded" >&2; return 1; }
  else
    [ "$needed" = 0 ] || { echo "consumer: static $1 needs a libcubec.so" >&2; return 1; }
  fi
}

for kind in shared static; do
  static=OFF; [ "$kind" = static ] && static=ON
  echo "--- find_package(cubec), $kind"
  cmake -S "$here/cmake" -B "$work/cmake-$kind" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCUBEC_STATIC="$static" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$work/cmake-$kind" >/dev/null
  check_links "$work/cmake-$kind/consumer" "$kind"
  "$work/cmake-$kind/consumer"

  echo "--- pkg-config, $kind"
  flag=0; [ "$kind" = static ] && flag=1
  make -s -C "$here/pkgconfig" STATIC="$flag" OUT="$work/pkgconfig-$kind"
  check_links "$work/pkgconfig-$kind" "$kind"
  "$work/pkgconfig-$kind"
done
# The kernels linked in: record what the consumer builds, write it as C
# source with the installed CLI, build the consumer with it (static), and
# run it with a C compiler that always fails, an empty PATH, a fresh kernel
# cache and no bundle file: every kernel must come from the array.
echo "--- embedded bundle (C array), static"
rm -f "$work/consumer.manifest"
CUBE_BUNDLE_RECORD="$work/consumer.manifest" "$work/cmake-static/consumer" >/dev/null
"$prefix/bin/cubec" bundle build "$work/consumer.manifest" --c-source "$work/consumer_kernels.c" \
  --symbol consumer_kernels
cmake -S "$here/cmake" -B "$work/cmake-embedded" -DCMAKE_PREFIX_PATH="$prefix" -DCUBEC_STATIC=ON \
  -DCUBEC_EMBEDDED_SOURCE="$work/consumer_kernels.c" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/cmake-embedded" >/dev/null
check_links "$work/cmake-embedded/consumer" static
mkdir -p "$work/empty-path"
printf '#!/bin/sh\nexit 1\n' >"$work/failing-cc"
chmod +x "$work/failing-cc"
rm -rf "$work/embedded-cache"
log="$(env -u CUBE_BUNDLE PATH="$work/empty-path" CUBE_CC="$work/failing-cc" \
  CUBE_CACHE_DIR="$work/embedded-cache" CUBE_LOG=info "$work/cmake-embedded/consumer" 2>&1)" ||
  { echo "$log" >&2; echo "consumer: the embedded build failed without a compiler" >&2; exit 1; }
grep -q "taken from a bundle" <<<"$log" ||
  { echo "$log" >&2; echo "consumer: no kernel came from the embedded bundle" >&2; exit 1; }
if find "$work/embedded-cache" -name '*.ck' 2>/dev/null | grep -q .; then
  echo "consumer: the embedded build wrote kernel files" >&2
  exit 1
fi
builds=5
# cubec as a sub-project: configured without anything of its own beyond the
# library and the CLI.
check_subproject() {  # build dir
  local cache="$1/CMakeCache.txt" dir="$1/_deps/cubec-build"
  [ -d "$dir" ] || dir="$1/cubec"
  grep -q '^CUBE_BUILD_TESTS:BOOL=OFF' "$cache" && grep -q '^CUBE_BUILD_BENCH:BOOL=OFF' "$cache" &&
    grep -q '^CUBE_BUILD_EXAMPLES:BOOL=OFF' "$cache" && grep -q '^CUBE_WERROR:BOOL=OFF' "$cache" ||
    { echo "consumer: cubec as a sub-project kept its own tests/bench/examples/-Werror:" >&2
      grep '^CUBE_' "$cache" >&2; return 1; }
  ! grep -q CMOCKA "$cache" || { echo "consumer: cubec as a sub-project looked for cmocka" >&2; return 1; }
  [ ! -e "$dir/tests" ] && [ ! -e "$dir/bench" ] && [ ! -e "$dir/examples" ] ||
    { echo "consumer: cubec as a sub-project configured tests, bench or examples in $dir" >&2; return 1; }
  local flags="$dir/CMakeFiles/cubec_core.dir/flags.make"
  [ -s "$flags" ] && grep -q -- '-Wall' "$flags" && ! grep -q -- '-Werror' "$flags" ||
    { echo "consumer: cubec as a sub-project compiles with -Werror" >&2; return 1; }
}
if [ -n "$source" ]; then
  source="$(cd "$source" && pwd)"
  for how in subdir fetch; do
    echo "--- $how (cubec as a sub-project), shared and static"
    cmake -S "$here/$how" -B "$work/$how" -DCUBEC_SOURCE_DIR="$source" -DCMAKE_BUILD_TYPE=Release >/dev/null
    check_subproject "$work/$how"
    cmake --build "$work/$how" -j "$(nproc 2>/dev/null || echo 2)" --target consumer_shared consumer_static >/dev/null
    check_links "$work/$how/consumer_shared" shared "$work/$how"
    "$work/$how/consumer_shared"
    check_links "$work/$how/consumer_static" static
    "$work/$how/consumer_static"
  done
  builds=9
fi
echo "consumer: $builds builds (CMake and pkg-config${source:+, add_subdirectory and FetchContent}, shared and static; an embedded bundle) ran"
