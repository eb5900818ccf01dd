#!/usr/bin/env bash
# tests/skipped.sh (what `make test` prints after ctest): given a ctest run
# that skipped a CUDA test and the MPI suite, it names each with its reason
# and prints the one command that enables each group; given none, nothing.
#   tests/tools/skipped_check.sh WORKDIR
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="$1"
mkdir -p "$work/Testing/Temporary"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cat >"$work/Testing/Temporary/LastTest.log" <<'LOG'
1/3 Test: cuda.test_cuda_backend
Output:
----------------------------------------------------------
cuda backend unavailable: cannot load the CUDA driver (skipping)
<end of output>
2/3 Test: world.mpi_2_ranks
Output:
----------------------------------------------------------
SKIP: no mpirun (apt-get install openmpi-bin libopenmpi-dev)
<end of output>
LOG
cat >"$work/ctest.txt" <<'OUT'
100% tests passed, 0 tests failed out of 3

The following tests did not run:
	 68 - cuda.test_cuda_backend (Skipped)
	 75 - world.mpi_2_ranks (Skipped)
	 76 - world.mpi_4_ranks (Skipped)
OUT
out="$(bash "$here/../skipped.sh" "$work" "$work/ctest.txt")"
echo "$out"
grep -q "^skipped: 3 test(s)" <<<"$out" || fail "no count of the skipped tests"
grep -q "^  cuda.test_cuda_backend: cuda backend unavailable" <<<"$out" || fail "the CUDA test's reason is missing"
grep -q "^  world.mpi_2_ranks: SKIP: no mpirun" <<<"$out" || fail "the MPI test's reason is missing"
[ "$(grep -c 'apt-get install -y openmpi-bin libopenmpi-dev' <<<"$out")" = 1 ] ||
  fail "the MPI suite's command is not printed exactly once"
grep -q "GPU" <<<"$out" || fail "the CUDA tests' requirement is missing"
printf '100%% tests passed, 0 tests failed out of 3\n' >"$work/none.txt"
[ -z "$(bash "$here/../skipped.sh" "$work" "$work/none.txt")" ] || fail "output when nothing was skipped"
echo "$failures failure(s)"
[ "$failures" = 0 ]
