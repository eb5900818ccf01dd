# The two set-up commands of the README:
#   make demo   installs what is missing, builds, runs `cubec demo`
#   make test   the same, plus cmocka, then the whole test suite (ctest)
# Everything else is a plain CMake project: cmake -S . -B build && ...
BUILD_DIR ?= build
ASAN_DIR ?= build-asan
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE ?= cmake
CTEST ?= ctest
CC ?= cc

.PHONY: all build-all configure demo test bench info asan deps deps-test deps-bench clean help

all: build-all

help:
	@echo "make demo      build and run the showcase (cubec demo)"
	@echo "make test      build and run the test suite (installs libcmocka-dev if missing)"
	@echo "make bench     build and run the CPU benchmark (installs PoCL and libclang if missing)"
	@echo "make info      list backends and devices"
	@echo "make asan      the test suite under ASan + UBSan ($(ASAN_DIR))"
	@echo "make clean     remove $(BUILD_DIR) and $(ASAN_DIR)"

# Installs missing Debian packages when we may (root, or password-less
# sudo); otherwise says exactly what to install. $(1): packages.
define apt_install
	@missing="$(1)"; \
	if [ "$$(id -u)" = 0 ]; then sudo=""; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo"; \
	else sudo="none"; fi; \
	if [ "$$sudo" = none ] || ! command -v apt-get >/dev/null 2>&1; then \
	  echo "error: missing build dependencies: $$missing" >&2; \
	  echo "       install them (Debian/Ubuntu: sudo apt-get install -y $$missing) and re-run." >&2; \
	  exit 1; \
	fi; \
	echo "installing missing build dependencies: $$missing"; \
	export DEBIAN_FRONTEND=noninteractive; \
	$$sudo apt-get update -qq && $$sudo apt-get install -y -qq --no-install-recommends $$missing
endef

# A literal '#': written `\#` outside a function it means the same to every
# GNU make (inside $(shell ...) make 4.3 keeps the backslash, and the
# preprocessor then reads `\#include`, which it accepts and ignores).
HASH := \#
HAVE_CMAKE = $(shell command -v $(CMAKE) >/dev/null 2>&1 && echo yes)
HAVE_CC = $(shell command -v $(CC) >/dev/null 2>&1 && echo yes)
# cmocka is there when a program including its header links against it (the
# header alone, or the run-time library alone, is not enough to build tests).
CMOCKA_PROBE = printf '$(HASH)include <stdarg.h>\n$(HASH)include <stddef.h>\n$(HASH)include <stdint.h>\n$(HASH)include <setjmp.h>\n$(HASH)include <cmocka.h>\nint main(void) { return cmocka_run_group_tests(NULL, NULL, NULL) == 0 ? 0 : 0; }\n' | \
  $(CC) -x c - -o /dev/null -lcmocka >/dev/null 2>&1
HAVE_CMOCKA = $(shell $(CMOCKA_PROBE) && echo yes)
# xxhash.h: the kernel cache's hash, used header-only (Debian's libxxhash-dev).
HAVE_XXHASH = $(shell test -f /usr/include/xxhash.h && echo yes)
MISSING_BUILD = $(if $(HAVE_CMAKE),,cmake) $(if $(HAVE_CC),,gcc) $(if $(shell command -v make),,make) \
                $(if $(HAVE_XXHASH),,libxxhash-dev)

deps:
ifneq ($(strip $(MISSING_BUILD)),)
	$(call apt_install,$(strip $(MISSING_BUILD)))
endif

# After installing, the probe runs again: a package that installed but does
# not build a cmocka program is an error here, not a suite without tests.
deps-test: deps
ifneq ($(HAVE_CMOCKA),yes)
	$(call apt_install,libcmocka-dev)
	@$(CMOCKA_PROBE) || { echo "error: libcmocka-dev is installed but a cmocka program does not build with $(CC)" >&2; exit 1; }
endif

# `make demo` works without cmocka (the suite is left out, and it says so);
# `make test` configures with the suite always (TESTS=ON), so CMake stops
# with an error naming cmocka if it is still missing.
TESTS ?= auto
configure: deps
	@tests="$(TESTS)"; \
	if [ "$$tests" = auto ]; then \
	  if [ "$(HAVE_CMOCKA)" = yes ]; then tests=ON; else tests=OFF; \
	    echo "note: cmocka not found, configuring without the test suite (make test installs it)"; fi; \
	fi; \
	$(CMAKE) -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCUBE_BUILD_TESTS=$$tests >/dev/null

build-all: configure
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS)

demo: configure
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS) --target cubec_cli
	./$(BUILD_DIR)/cubec demo

info: configure
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS) --target cubec_cli
	./$(BUILD_DIR)/cubec info

# --no-tests=error: a build that somehow has no tests fails instead of
# printing "No tests were found!!!" and exiting 0. Afterwards
# tests/skipped.sh names the tests that skipped (no GPU, no Open MPI, ...),
# why, and the one command that enables each group.
test: deps-test
	$(MAKE) --no-print-directory build-all TESTS=ON
	@{ $(CTEST) --test-dir $(BUILD_DIR) --output-on-failure --no-tests=error -j $(JOBS); \
	  echo $$? >$(BUILD_DIR)/ctest-status; } | tee $(BUILD_DIR)/ctest-output.txt; \
	tests/skipped.sh $(BUILD_DIR) $(BUILD_DIR)/ctest-output.txt; \
	exit "$$(cat $(BUILD_DIR)/ctest-status)"

# The bench's own set-up: PoCL (pocl-opencl-icd, ocl-icd-opencl-dev,
# opencl-headers) runs the same barrier kernels written in OpenCL C beside
# cubec, and libclang1 lets barrier kernels take the split path. Neither is a
# dependency of the library: without them bench_cpu says what it leaves out.
HAVE_OPENCL = $(shell printf '\#include <CL/cl.h>\n' | $(CC) -E -x c - >/dev/null 2>&1 && \
                test -e /etc/OpenCL/vendors/pocl.icd && echo yes)
HAVE_LIBCLANG = $(shell ldconfig -p 2>/dev/null | grep -qE 'libclang(-[0-9]+)?\.so' && echo yes)
MISSING_BENCH = $(if $(HAVE_OPENCL),,pocl-opencl-icd ocl-icd-opencl-dev opencl-headers) \
                $(if $(HAVE_LIBCLANG),,libclang1)

deps-bench: deps
ifneq ($(strip $(MISSING_BENCH)),)
	$(call apt_install,$(strip $(MISSING_BENCH)))
endif

# bench_cpu's sections (d)-(g) are the CPU backend's targets (barrier kernels
# against PoCL and plain loops, copies against memcpy); BENCH_ARGS passes
# options (e.g. BENCH_ARGS="--reps 7").
bench: deps-bench configure
	$(CMAKE) --build $(BUILD_DIR) -j $(JOBS) --target bench_cpu
	./$(BUILD_DIR)/bench/bench_cpu $(BENCH_ARGS)

asan: deps-test
	$(CMAKE) -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=Debug -DCUBE_ENABLE_ASAN=ON -DCUBE_BUILD_BENCH=OFF -DCUBE_BUILD_TESTS=ON >/dev/null
	$(CMAKE) --build $(ASAN_DIR) -j $(JOBS)
	@{ $(CTEST) --test-dir $(ASAN_DIR) --output-on-failure --no-tests=error -j $(JOBS); \
	  echo $$? >$(ASAN_DIR)/ctest-status; } | tee $(ASAN_DIR)/ctest-output.txt; \
	tests/skipped.sh $(ASAN_DIR) $(ASAN_DIR)/ctest-output.txt; \
	exit "$$(cat $(ASAN_DIR)/ctest-status)"

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR)
