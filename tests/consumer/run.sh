#!/usr/bin/env bash
# Builds and runs the two consumer projects against an installed cubec, each
# linked shared and static:
#   tests/consumer/run.sh PREFIX WORKDIR
# PREFIX is what `cmake --install build --prefix PREFIX` installed into.
# Checks that each program runs, that the shared builds load PREFIX's
# libcubec.so and the static ones load no libcubec at all.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
prefix="$(cd "$1" && pwd)"
work="$2"
mkdir -p "$work"
libdir="$(dirname "$(find "$prefix" -name 'cubec.pc' -path '*/pkgconfig/*' | head -n1)")"
[ -n "$libdir" ] || { echo "consumer: no cubec.pc under $prefix" >&2; exit 1; }
export PKG_CONFIG_PATH="$libdir${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export CUBE_CACHE_DIR="${CUBE_CACHE_DIR:-$work/kernel-cache}"
# The pkg-config file must name the prefix it was installed to.
pc_prefix="$(pkg-config --variable=prefix cubec)"
[ "$pc_prefix" = "$prefix" ] || { echo "consumer: cubec.pc says prefix=$pc_prefix, installed to $prefix" >&2; exit 1; }

check_links() {  # binary, shared|static
  local needed
  needed="$(readelf -d "$1")"
  needed="$(grep -c 'NEEDED.*libcubec' <<<"$needed" || true)"
  if [ "$2" = shared ]; then
    [ "$needed" = 1 ] || { echo "consumer: $1 does not need libcubec.so" >&2; return 1; }
    # Captured first: `ldd | grep -q` under pipefail fails when grep quits
    # early and ldd gets SIGPIPE.
    local loaded
    loaded="$(ldd "$1")"
    grep -q "$prefix/.*libcubec.so" <<<"$loaded" ||
      { echo "consumer: $1 does not load $prefix's libcubec.so:" >&2; echo "$loaded" >&2; return 1; }
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
echo "consumer: 5 builds (CMake and pkg-config, shared and static; an embedded bundle) ran"
