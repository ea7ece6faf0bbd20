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

.PHONY: all build deps deps-python configure run test test-c test-python test-sanitize install fuzz fuzz-smoke clean help

all: build

help:
	@echo "make            build build/libtensorops.{a,so} and build/tensorops"
	@echo "make run        build (release), then tensorops info on built-in defaults"
	@echo "make test       every test: C unit, CLI, install/example and Python oracle tests"
	@echo "make test-sanitize   the C and CLI tests under ASan + UBSan"
	@echo "make install PREFIX=DIR"
	@echo "make fuzz       build the libFuzzer targets with clang into $(FUZZ_BUILD)/"
	@echo "make fuzz-smoke run each fuzz target for FUZZ_SECONDS (20) seconds"

deps:
	@scripts/deps.sh build

deps-python:
	@scripts/deps.sh python

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTOPS_WERROR=ON $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/tensorops info

test: deps-python build
	@cmake -S . -B $(BUILD) >/dev/null   # picks up the venv for the Python tests
	@cmake --build $(BUILD) -j $(JOBS)
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-c: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L "unit|cli"

test-sanitize: deps
	@cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DTOPS_SANITIZE=ON -DTOPS_WERROR=ON $(CMAKE_ARGS) >/dev/null
	@cmake --build $(SAN_BUILD) -j $(JOBS)
	cd $(SAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j $(JOBS) -L "unit|cli"

# The readers' libFuzzer targets: every library source instrumented for
# coverage, ASan and UBSan; TOPS_ASSERT stays on (no NDEBUG).
fuzz: deps
	@cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=$(FUZZ_CC) -DCMAKE_BUILD_TYPE=Debug \
	  -DCMAKE_C_FLAGS="-O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
	  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
	  -DTOPS_FUZZ=ON -DTOPS_BUILD_TESTS=OFF -DTOPS_OPENMP=OFF -DTOPS_WERROR=OFF $(CMAKE_ARGS) >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_npy fuzz_safetensors fuzz_make_seeds

fuzz-smoke: fuzz
	tests/fuzz/smoke.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(SAN_BUILD) build-fuzz
