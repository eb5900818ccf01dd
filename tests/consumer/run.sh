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
echo "consumer: 4 builds (CMake and pkg-config, shared and static) ran"
