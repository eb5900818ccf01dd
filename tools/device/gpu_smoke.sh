set -uo pipefail
out="$OUT"
for f in .deb/*.deb; do dpkg -x "$f" /; done; ldconfig
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
(cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCUBE_BUILD_FUZZ=OFF && cmake --build build-gpu -j16 -- -k) >"$out/build.log" 2>&1 || { grep -E 'error|Error' "$out/build.log" | head -40; }
export CUBE_CACHE_DIR="$PWD/build-gpu/kernel-cache"
timeout 280 ctest --test-dir build-gpu -j8 --output-on-failure --timeout 250 >"$out/ctest.log" 2>&1
grep -E "tests passed|\*\*\*|Failed|Skipped" "$out/ctest.log" | head -40
for t in test_cuda_backend test_cuda_client test_cuda_poison test_cuda_kernel_cache test_cuda_tma; do grep -E "^\[  (FAILED|ERROR)|LINE|OK \]" "$out/ctest.log" | head -0; done
grep -B2 -A12 -E "FAILED  \]|ERROR   \]" "$out/ctest.log" | head -120
timeout 100 ./build-gpu/bench/bench_cuda --quick > "$out/bench_cuda.log" 2>&1; echo "bench_cuda rc=$?"; tail -30 "$out/bench_cuda.log"
timeout 120 ./build-gpu/bench/bench_graph --quick > "$out/bench_graph.log" 2>&1; echo "bench_graph rc=$?"; tail -12 "$out/bench_graph.log"
