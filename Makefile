# tensorops: `make` builds, `make run` runs the main job, `make test` runs every test.
# CMake does the work underneath; this file is the entry point.

BUILD      ?= build
SAN_BUILD  ?= build-sanitize
FUZZ_BUILD ?= build-fuzz
FUZZ_CC    ?= clang
FUZZ_SECONDS ?= 20
PREFIX     ?= /usr/local
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=

MAKEFLAGS += --no-print-directory

.PHONY: all build deps deps-python python-package deps-onednn bump-test-deps configure run test test-c test-python test-sanitize install fuzz fuzz-smoke clean help

all: build

help:
	@echo "make            build build/libtensorops.{a,so} and build/tensorops"
	@echo "make run        build (release), then tensorops info, validate --quick and bench"
	@echo "                (the A/B table; bench/out/latest.json and latest.svg)"
	@echo "make test       every test: C unit, CLI, install/example and Python oracle tests"
	@echo "make python-package  pip-install the Python package (pyproject.toml) into .venv"
	@echo "make bump-test-deps  re-pin scripts/requirements-test.txt to the newest releases (review it)"
	@echo "make test-sanitize   the C and CLI tests under ASan + UBSan"
	@echo "make install PREFIX=DIR"
	@echo "make fuzz       build the libFuzzer targets with clang into $(FUZZ_BUILD)/"
	@echo "make fuzz-smoke run each fuzz target for FUZZ_SECONDS (20) seconds"

deps:
	@scripts/deps.sh build

deps-python:
	@scripts/deps.sh python

# The Python package (pyproject.toml) installed into .venv for its tests.
python-package: deps
	@scripts/deps.sh package $(BUILD)/python-package

bump-test-deps:
	@scripts/deps.sh bump

# oneDNN for the bench's baseline rows (x86-64, pinned PyPI wheels into
# .deps/onednn); without it the bench runs and says why the rows are absent.
deps-onednn:
	@scripts/deps.sh onednn || echo "deps: oneDNN not installed: the bench runs without its oneDNN rows" >&2

configure: deps deps-onednn
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTOPS_WERROR=ON $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The main job: the machine, the validation ladder, then the A/B table over
# the default suite (f32, f16, int8-g32, int4-g32, q4_0, mxfp4, nvfp4 at
# K=4096, N=12288, M=1,16,128, and fused attention at B=1 H=8 S=2048 D=128).  The bench runs even if a ladder row fails
# (its figures are still worth seeing); either failing fails the target.
run: build
	$(BUILD)/tensorops info
	@mkdir -p bench/out
	@status=0; \
	echo "$(BUILD)/tensorops validate --quick"; \
	$(BUILD)/tensorops validate --quick || status=1; \
	echo "$(BUILD)/tensorops bench --op matmul,attention --json bench/out/latest.json --plot bench/out/latest.svg"; \
	$(BUILD)/tensorops bench --op matmul,attention --json bench/out/latest.json --plot bench/out/latest.svg || status=1; \
	exit $$status

test: deps-python build python-package
	@cmake -S . -B $(BUILD) >/dev/null   # picks up the venv for the Python tests
	@cmake --build $(BUILD) -j $(JOBS)
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-c: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L "unit|cli"

test-sanitize: deps deps-onednn  # CUDA off: no GPU to run it under the sanitizers, and it halves the build
	@cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DTOPS_SANITIZE=ON -DTOPS_WERROR=ON -DTOPS_CUDA=OFF $(CMAKE_ARGS) >/dev/null
	@cmake --build $(SAN_BUILD) -j $(JOBS)
	cd $(SAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) -L "unit|cli"

# The readers' libFuzzer targets: every library source instrumented for
# coverage, ASan and UBSan; TOPS_ASSERT stays on (no NDEBUG).
fuzz: deps
	@scripts/deps.sh fuzz
	@command -v $(FUZZ_CC) >/dev/null || { echo "make fuzz: $(FUZZ_CC) is missing (Debian: apt-get install clang)" >&2; exit 1; }
	@cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=$(FUZZ_CC) -DCMAKE_BUILD_TYPE=Debug \
	  -DCMAKE_C_FLAGS="-O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
	  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
	  -DTOPS_FUZZ=ON -DTOPS_CUDA=OFF -DTOPS_BUILD_TESTS=OFF -DTOPS_OPENMP=OFF -DTOPS_WERROR=ON $(CMAKE_ARGS) >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_npy fuzz_safetensors fuzz_gguf fuzz_model_safetensors fuzz_make_seeds

fuzz-smoke: fuzz
	tests/fuzz/smoke.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(SAN_BUILD) build-fuzz
