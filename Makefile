# `make demo` and `make test` work on a fresh machine: they create .venv if it
# is missing and install the package with its test, fast (numba), formats (safetensors) and
# onnx (onnx, onnxruntime) extras, pinned by constraints.txt (the CPU build of torch on these
# machines), then compile the fused pass with numba (`ltvm compile`, about four minutes on 2
# cores): runs with the default evaluation use it only once it is compiled.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install demo test bench clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test,fast,formats,onnx]'
	$(BIN)/ltvm compile
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/ltvm demo

# The suite runs on up to 4 processes (pytest-xdist); tests/conftest.py compiles the fused
# kernels once before the workers start where `make install` has not (a cold numba cache
# cost each worker ~80 s of CPU).
test: $(STAMP)
	$(BIN)/python -m pytest --numprocesses=auto --maxprocesses=4

bench: $(STAMP)
	$(BIN)/ltvm bench

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
