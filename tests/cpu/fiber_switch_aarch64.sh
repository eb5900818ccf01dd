#!/usr/bin/env bash
# Builds fiber_switch_check.c with the CPU backend's fiber code for aarch64
# and runs it under qemu-user. Exit 77 (ctest: skipped) when the cross
# compiler or qemu is missing: apt-get install gcc-aarch64-linux-gnu qemu-user
set -u
root="${1:?usage: fiber_switch_aarch64.sh SOURCE_DIR [BUILD_DIR [GENERATED_INCLUDE_DIR]]}"
out="${2:-${TMPDIR:-/tmp}}"
# The build's generated headers (cube/version.h).
generated="${3:-$out/../include}"
cc=aarch64-linux-gnu-gcc
if ! command -v "$cc" >/dev/null 2>&1 || ! command -v qemu-aarch64 >/dev/null 2>&1; then
  echo "SKIP: needs $cc and qemu-aarch64 (apt-get install gcc-aarch64-linux-gnu qemu-user)"
  exit 77
fi
bin="$out/fiber_switch_check.aarch64"
"$cc" -std=gnu11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -static \
  -I"$root/src" -I"$root/include" -I"$generated" -o "$bin" \
  "$root/tests/cpu/fiber_switch_check.c" "$root/src/backends/cpu/cpu_fiber.c" \
  "$root/src/backends/cpu/cpu_fiber_switch.S" "$root/src/base/status.c" "$root/src/base/util.c" \
  -lpthread || exit 1
qemu-aarch64 "$bin"
