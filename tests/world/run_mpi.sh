#!/usr/bin/env bash
# The multi-process MPI suite (tests/world/mpi_ranks.c) under Open MPI's
# mpirun. Usage: run_mpi.sh MODE NP RANKS_BINARY WORLD_BINARY [CANCEL_SHIM]
#   local     NP ranks on this host: every operation and element type against
#             the oracle, the status exchange, a stale part
#   failures  a rank killed with SIGKILL mid-loop, a rank that comes past the
#             deadline (the others fail within it), a launcher mismatch
#   netns     NP ranks on two test hosts: network namespaces made here
#             (ip netns, a veth pair on 10.213.77.0/24 inside them only),
#             MPI over TCP between them; removed on exit
#   cancel-race  NP ranks whose MPI (CANCEL_SHIM over libmpi) cancels late:
#             the carried cases, a cancelled receive never taking a message
#             of the next exchange
# Exit 77 (skipped) without mpirun or libmpi; every run bounded by timeout.
set -uo pipefail
mode="$1" np="$2" bin="$3" world="$4"
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: no mpirun (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
out="$("$bin" probe 2>&1)"
if [ $? -eq 77 ]; then echo "$out"; exit 77; fi
mpirun --version 2>/dev/null | grep -q "Open MPI" || { echo "SKIP: this suite drives Open MPI's mpirun"; exit 77; }
# In a sanitizer build: MPI's plugins are unloaded at exit with what they
# allocated still reachable only from them, which LeakSanitizer reports as
# leaks of an unknown module; cubec's own leaks are checked by the
# single-process suites. Everything else ASan and UBSan find still fails.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
# ThreadSanitizer stops inside Open MPI's own libraries (libevent's
# recursive mutexes, its BTLs' lock order) before cubec's code runs: the MPI
# rank programs are skipped in a TSan build, and covered there by ASan +
# UBSan and by the in-process collectives under TSan.
if [ "${CUBE_TSAN_BUILD:-0}" = 1 ]; then
  echo "SKIP: Open MPI's own libraries are not ThreadSanitizer-clean (libevent, BTL locks)"
  exit 77
fi
# Root is allowed and ranks may outnumber cores (CI: 2 cores).
launch=(mpirun --allow-run-as-root --oversubscribe --mca btl self,vader,tcp)
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

expect() {  # expect PATTERN COUNT WHAT
  local got
  got="$(grep -c "$1" "$log" || true)"
  if [ "$got" != "$2" ]; then
    echo "FAIL: $3: $got of $2 lines '$1'"
    cat "$log"
    exit 1
  fi
  echo "ok: $3 ($got lines '$1')"
}

case "$mode" in
local)
  CUBE_COLLECTIVE_TIMEOUT_S=60 timeout 240 "${launch[@]}" -np "$np" "$bin" conformance >"$log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { cat "$log"; echo "FAIL: mpirun exited $rc"; exit 1; }
  grep "^PASS conformance" "$log"
  expect "^PASS conformance" "$np" "every operation and element type, $np ranks"
  expect "^PASS provider" "$np" "the MPI provider carries rank 0's id"
  expect "^PASS ring" "$np" "send/recv around a ring"
  expect "^PASS exchange" "$np" "status exchange"
  expect "^PASS carry" "$np" "carried sources, whole or reduced on the way"
  expect "^PASS stale" "$np" "a stale part seen by every rank"
  ! grep -q "^FAIL" "$log" || { cat "$log"; exit 1; }
  if [ "$np" != 3 ] && [ -z "${OMPI_MCA_coll_libnbc_iallreduce_algorithm+x}" ]; then
    # cubec asks libnbc for its ring MPI_Iallreduce on 2 ranks and for
    # Rabenseifner's from 4 (src/world/mpi.c, through MPI_T).
    if [ "$np" = 2 ]; then
      expect "^INFO iallreduce-algorithm .*: 1$" "$np" "2 ranks: libnbc's ring all_reduce chosen"
    else
      expect "^INFO iallreduce-algorithm .*: 3$" "$np" "$np ranks: libnbc's Rabenseifner all_reduce chosen"
    fi
  fi
  if [ "$np" = 2 ] && [ -z "${OMPI_MCA_coll_libnbc_iallreduce_algorithm+x}" ]; then
    # A user's choice stands: the suite again with libnbc's own (0).
    OMPI_MCA_coll_libnbc_iallreduce_algorithm=0 CUBE_COLLECTIVE_TIMEOUT_S=60 timeout 240 \
      "${launch[@]}" -x OMPI_MCA_coll_libnbc_iallreduce_algorithm -np "$np" "$bin" conformance >"$log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || { cat "$log"; echo "FAIL: mpirun (libnbc's own all_reduce) exited $rc"; exit 1; }
    expect "^INFO iallreduce-algorithm .*: 0$" "$np" "2 ranks: the user's choice of algorithm stands"
    expect "^PASS conformance" "$np" "every operation and element type, libnbc's own all_reduce"
    ! grep -q "^FAIL" "$log" || { cat "$log"; exit 1; }
  fi
  CUBE_COLLECTIVE_TIMEOUT_S=60 timeout 240 "${launch[@]}" -np "$np" "$world" conformance >"$log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { cat "$log"; echo "FAIL: mpirun (world_ranks) exited $rc"; exit 1; }
  grep "^PASS" "$log"
  expect "^PASS world-conformance" "$np" "cube_comm_*: every collective and element type, $np ranks"
  expect "^PASS world-stale" "$np" "cube_comm_*: a stale source on rank 1 claims every destination"
  ;;
failures)
  # A killed rank: the survivors fail within the deadline (3 s). Open MPI's
  # mpirun would kill the survivors with it; --enable-recovery lets them go
  # on, as a job whose launcher keeps survivors would.
  start=$SECONDS
  CUBE_COLLECTIVE_TIMEOUT_S=3 timeout 60 "${launch[@]}" --enable-recovery -np "$np" "$bin" killed >"$log" 2>&1
  grep "^PASS\|^FAIL" "$log"
  expect "^PASS killed" "$((np - 1))" "survivors of a SIGKILLed rank fail within the deadline"
  ! grep -q "^FAIL" "$log" || { cat "$log"; exit 1; }
  echo "killed-rank run took $((SECONDS - start)) s"
  # A rank that comes late (sleeps past the deadline): the others fail
  # within it, and so does the late one when it comes.
  start=$SECONDS
  CUBE_COLLECTIVE_TIMEOUT_S=2 timeout 60 "${launch[@]}" --enable-recovery -np "$np" "$bin" timeout >"$log" 2>&1
  grep "^PASS\|^FAIL" "$log"
  expect "^PASS timeout" "$np" "a timed-out all_reduce fails on every rank, bounded"
  ! grep -q "^FAIL" "$log" || { cat "$log"; exit 1; }
  echo "timeout run took $((SECONDS - start)) s"
  # The same through the public API: killed before a collective, killed
  # while the payload moves, late.
  for m in killed killed-mid timeout; do
    start=$SECONDS
    CUBE_COLLECTIVE_TIMEOUT_S=3 timeout 60 "${launch[@]}" --enable-recovery -np "$np" "$world" "$m" >"$log" 2>&1
    grep "^PASS\|^FAIL" "$log"
    case $m in
    killed) expect "^PASS world-killed rank .*destination claimed" "$((np - 1))" "cube_comm_*: survivors of a SIGKILLed rank" ;;
    killed-mid) expect "^PASS world-killed-mid" "$((np - 1))" "cube_comm_*: a rank killed mid-payload" ;;
    timeout) expect "^PASS world-timeout rank .*destination claimed" "$np" "cube_comm_*: a late rank" ;;
    esac
    ! grep -q "^FAIL" "$log" || { cat "$log"; exit 1; }
    echo "$m run took $((SECONDS - start)) s"
  done
  # The launcher says 2 ranks, MPI's world (no mpirun) says 1: refused.
  CUBE_RANK=1 CUBE_WORLD_SIZE=2 timeout 60 "$bin" mismatch >"$log" 2>&1
  cat "$log"
  expect "^PASS mismatch" 1 "a launcher/MPI world-size mismatch is a clear error"
  ;;
cancel-race)
  # A rank whose MPI_Cancel of a pre-posted receive comes late, after its
  # peers' next exchange reached it (MPI_SHIM_CANCEL_PAUSE_MS; the shim
  # drives progress before it cancels): every carried case still passes
  # (before the exchanges alternated their tags, the next exchange's slice
  # was taken by the cancelled receive and the rank waited to its deadline).
  shim="$5"
  CUBE_MPI_PATH="$shim" MPI_SHIM_CANCEL_PAUSE_MS=300 CUBE_COLLECTIVE_TIMEOUT_S=10 timeout 240 \
    "${launch[@]}" -x CUBE_MPI_PATH -x MPI_SHIM_CANCEL_PAUSE_MS -np "$np" "$bin" carry-loop 1 >"$log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { cat "$log"; echo "FAIL: mpirun (cancels paused) exited $rc"; exit 1; }
  expect "^INFO mpi: $shim" "$np" "the shim is the MPI every rank loaded"
  paused="$(grep -c "^INFO shim: MPI_Cancel paused" "$log" || true)"
  [ "$paused" -gt 0 ] || { cat "$log"; echo "FAIL: no receive was cancelled (the race was not run)"; exit 1; }
  echo "ok: $paused cancels paused"
  expect "^PASS carry" "$np" "carried sources with every cancel late"
  ! grep -q "^FAIL" "$log" || { cat "$log"; exit 1; }
  ;;
netns)
  [ "$(id -u)" = 0 ] && command -v ip >/dev/null 2>&1 || { echo "SKIP: network namespaces need root and iproute2"; exit 77; }
  h1=cubec-h1-$$ h2=cubec-h2-$$ agent="$(mktemp)"
  cleanup() { ip netns del "$h1" 2>/dev/null; ip netns del "$h2" 2>/dev/null; rm -f "$agent" "$log"; }
  trap cleanup EXIT
  ip netns add "$h1" && ip netns add "$h2" || { echo "SKIP: cannot make network namespaces here"; exit 77; }
  ip -n "$h1" link add veth-a type veth peer name veth-b netns "$h2" || { echo "FAIL: veth"; exit 1; }
  ip -n "$h1" addr add 10.213.77.1/24 dev veth-a
  ip -n "$h2" addr add 10.213.77.2/24 dev veth-b
  for h in "$h1" "$h2"; do ip -n "$h" link set lo up; done
  ip -n "$h1" link set veth-a up
  ip -n "$h2" link set veth-b up
  # mpirun starts its daemon on the other "host" through this agent (the
  # way it would use ssh): the command runs inside that host's namespace.
  cat >"$agent" <<AGENT
#!/usr/bin/env bash
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done  # ssh-style options
host="\$1"; shift
case "\$host" in 10.213.77.2) ns="$h2" name=cubec-h2 ;; *) ns="$h1" name=cubec-h1 ;; esac
# Its own host name too (a UTS namespace): Open MPI keys its session files
# and shared memory by host name, and two "hosts" must not share them.
exec ip netns exec "\$ns" unshare --uts /bin/sh -c "hostname \$name && \$*"
AGENT
  chmod 700 "$agent"
  ip -n "$h1" route get 10.213.77.2 >/dev/null || { echo "FAIL: the test hosts have no route to each other"; exit 1; }
  half=$((np / 2 > 0 ? np / 2 : 1))
  CUBE_COLLECTIVE_TIMEOUT_S=60 timeout 240 ip netns exec "$h1" unshare --uts \
    /bin/sh -c 'hostname cubec-h1 && exec "$@"' sh "${launch[@]}" -np "$((2 * half))" \
    --host "10.213.77.1:$half,10.213.77.2:$half" \
    --mca plm_rsh_agent "$agent" --mca btl_tcp_if_include 10.213.77.0/24 \
    --mca oob_tcp_if_include 10.213.77.0/24 -x CUBE_COLLECTIVE_TIMEOUT_S \
    "$bin" conformance >"$log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { cat "$log"; echo "FAIL: mpirun over two namespaced hosts exited $rc"; exit 1; }
  grep "^PASS conformance" "$log"
  expect "^PASS conformance" "$((2 * half))" "every operation and element type across two hosts"
  expect "^PASS stale" "$((2 * half))" "a stale part seen across hosts"
  hosts="$(grep "^PASS conformance" "$log" | sed 's/.*net:/net:/' | sort -u | wc -l)"
  [ "$hosts" = 2 ] || { echo "FAIL: the ranks ran in $hosts network namespaces, not 2"; exit 1; }
  CUBE_COLLECTIVE_TIMEOUT_S=60 timeout 240 ip netns exec "$h1" unshare --uts \
    /bin/sh -c 'hostname cubec-h1 && exec "$@"' sh "${launch[@]}" -np "$((2 * half))" \
    --host "10.213.77.1:$half,10.213.77.2:$half" \
    --mca plm_rsh_agent "$agent" --mca btl_tcp_if_include 10.213.77.0/24 \
    --mca oob_tcp_if_include 10.213.77.0/24 -x CUBE_COLLECTIVE_TIMEOUT_S -x CUBE_CACHE_DIR \
    "$world" conformance >"$log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { cat "$log"; echo "FAIL: mpirun (world_ranks) over two hosts exited $rc"; exit 1; }
  grep "^PASS" "$log"
  expect "^PASS world-conformance" "$((2 * half))" "cube_comm_*: every collective across two hosts"
  expect "^PASS world-stale" "$((2 * half))" "cube_comm_*: a stale source claims every destination across hosts"
  hosts="$(grep "^PASS world-conformance" "$log" | sed 's/.*net:/net:/' | sort -u | wc -l)"
  [ "$hosts" = 2 ] || { echo "FAIL: world_ranks ran in $hosts network namespaces, not 2"; exit 1; }
  echo "ok: ranks in 2 network namespaces (test hosts), talking over TCP"
  ;;
*) echo "usage: $0 local|failures|netns|cancel-race NP MPI_RANKS WORLD_RANKS [CANCEL_SHIM]"; exit 2 ;;
esac
echo "passed: $mode"
