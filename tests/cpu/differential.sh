#!/usr/bin/env bash
# Runs a program with every CPU launch on its own path and again on fibers
# from the same bytes (CUBE_CPU_DIFFERENTIAL=1): a difference in what the two
# leave traps the launch, and the program fails. Barrier kernels are held to
# the split path (CUBE_CPU_BARRIERS=split refuses one it cannot split), so
# what is compared is split against fibers, and plain against fibers for
# kernels without barriers. Exit 77 (ctest: skipped) without libclang.
set -u
if [ -z "${CUBE_LIBCLANG:-}" ] && ! ldconfig -p 2>/dev/null | grep -qE 'libclang(-[0-9]+)?\.so'; then
  echo "SKIPPED: the split path needs libclang (Debian: libclang1-14)"
  exit 77
fi
export CUBE_CPU_DIFFERENTIAL=1 CUBE_CPU_BARRIERS=split
exec "$@"
