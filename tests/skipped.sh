#!/usr/bin/env bash
# After a ctest run in BUILD_DIR: which tests it skipped, why (each test's
# own last "skip" line), and the one command that enables each group.
#   tests/skipped.sh BUILD_DIR CTEST_OUTPUT_FILE
# Prints nothing when nothing was skipped. `make test` runs it.
set -uo pipefail
build="$1"
output="$2"
log="$build/Testing/Temporary/LastTest.log"
mapfile -t skipped < <(awk '/^The following tests did not run:/ {on=1; next}
  on && /\(Skipped\)/ {print $3; next} on && !/^[[:space:]]/ {on=0}' "$output")
[ "${#skipped[@]}" -gt 0 ] || exit 0

# The reason a test printed, from ctest's own log.
reason() {
  [ -r "$log" ] || return 0
  awk -v t="$1" '$0 ~ "^[0-9]+/[0-9]+ Test: " t "$" {on=1; next}
    on && /^<end of output>/ {exit} on {print}' "$log" |
    grep -iE 'skip|unavailable|not installed|no mpirun|need' | tail -n 1 | cut -c1-160
}

# The group of a test and the command that enables it.
enable() {
  case "$1" in
    cuda.* | *cuda*) echo "an NVIDIA GPU and its driver: run the suite on a GPU machine (tools/device/gpu_run.sh)" ;;
    world.mpi_netns_hosts) echo "root and iproute2: sudo apt-get install -y iproute2, then run ctest as root" ;;
    world.* | examples.allreduce_mpi) echo "Open MPI: sudo apt-get install -y openmpi-bin libopenmpi-dev" ;;
    cpu.fiber_switch_aarch64) echo "the aarch64 cross tools: sudo apt-get install -y gcc-aarch64-linux-gnu qemu-user" ;;
    cpu.valgrind_barrier) echo "valgrind, outside sanitizer builds: sudo apt-get install -y valgrind" ;;
    cpu.differential_*) echo "libclang: sudo apt-get install -y libclang1" ;;
    tune.*) echo "SQLite: sudo apt-get install -y libsqlite3-0" ;;
    *) echo "see the test's reason above" ;;
  esac
}

echo
echo "skipped: ${#skipped[@]} test(s); what each needs:"
declare -A groups=()
for name in "${skipped[@]}"; do
  why="$(reason "$name")"
  echo "  $name${why:+: $why}"
  groups["$(enable "$name")"]+=" $name"
done
echo "to run them:"
for command in "${!groups[@]}"; do
  echo "  $command"
done
