#!/usr/bin/env bash
# Issue 33's checks on a GPU machine, after a build in build/ (for example
# by tools/device/gpu_run.sh tests): cubec info finds the driver, NVRTC and
# NCCL by path and says so in JSON; a CUDA program's CUBE_TRACE (real pid,
# memory counter) is valid; the documentation's programs run with
# CUBE_BACKEND=cuda (the README's saxpy and section 3 of getting-started
# use the GPU then).
#   bash tools/device/issue33_gpu.sh        (from the repository root)
set -uo pipefail
out="${OUT:-build-gpu/logs}"
mkdir -p "$out"
fail=0
build="${BUILD:-build}"
"$build/cubec" info --json >"$out/info.json" && python3 -m json.tool "$out/info.json" >/dev/null &&
  python3 - "$out/info.json" <<'PY' || fail=1
import json, sys
info = json.load(open(sys.argv[1]))
comps = {c["name"]: c for c in info["components"]}
for name in ("cuda", "nvrtc", "nccl"):
    assert comps[name]["available"] and comps[name]["path"], comps[name]
assert any(b["name"] == "cuda" and b["available"] for b in info["backends"]), info["backends"]
assert any(d["properties"]["backend"] == "cuda" for d in info["devices"]), "no CUDA device listed"
print("issue33: cubec info --json lists cuda, nvrtc and nccl with paths")
PY
rm -f "$out"/trace-cuda-*.json
CUBE_BACKEND=cuda CUBE_TRACE="$out/trace-cuda-%p.json" "$build/examples/saxpy" &&
  python3 tests/conformance/check_trace.py "$out"/trace-cuda-*.json --kernels 1 --writes 2 \
    --reads 1 --memory || fail=1
CUBE_DOC_BACKEND=cuda python3 tools/doc_programs.py "$build" || fail=1
echo "issue33_gpu.sh: $([ "$fail" = 0 ] && echo ok || echo FAILED)"
exit "$fail"
