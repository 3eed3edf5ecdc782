# ml8s — every entry point a developer or CI needs. `make run` and `make test` work from a fresh clone.
SHELL := /bin/bash
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned here, in the install step: 2.13.0 from PyTorch's CPU index (PyPI's `torch` is the CUDA build).
# Offline, a folder holding that CPU wheel (TORCH_WHEELS) stands in for the index.
TORCH := torch==2.13.0
TORCH_INDEX := https://download.pytorch.org/whl/cpu
TORCH_WHEELS ?= /opt/wheels
TORCH_FROM := $(if $(wildcard $(TORCH_WHEELS)/torch-2.13.0+cpu-*.whl),--find-links $(TORCH_WHEELS) $(TORCH)+cpu,\
	--index-url $(TORCH_INDEX) --extra-index-url https://pypi.org/simple $(TORCH))
FIND_LINKS := $(if $(wildcard $(TORCH_WHEELS)),--find-links $(TORCH_WHEELS),)
DEMO_DATA := demo_data/churn
PIPELINE_ROOT ?= $(CURDIR)/pipeline_root
# Cluster images (the Flyte sandbox's registry is localhost:30000); IMAGE_VERSION is also the cache version.
IMAGE_VERSION ?= dev
FE_IMAGE ?= localhost:30000/ml8s-fe:$(IMAGE_VERSION)
TRAIN_IMAGE ?= localhost:30000/ml8s-train:$(IMAGE_VERSION)
PACKAGE := dist/ml8s-flyte-package.tgz

CONTINUOUS_DATA := demo_data/continuous
GENERATIONS ?= 4

.PHONY: setup run run-continuous test lint typecheck bench faults clean demo-data proto package images images-base \
	images-podman-conf images-index-env images-fe images-train images-train-cuda images-push images-smoke \
	sandbox-register sandbox-run lock

# pip first, at its pinned version: Python 3.11's own (23.2) took 134 s to resolve and install this set, pip
# 26 takes 57 s (most of it is parsing every release the index lists, which later pips do much faster).
# --no-compile, then compileall on every core: pip compiles each wheel's modules on one core (about 70 CPU s for
# this set), and the bytecode must be there, since where PYTHONDONTWRITEBYTECODE is set no process writes it.
# Like pip, a module that does not compile (a template, test data) is left as it is. -qq: errors only (pip 26 also
# prints the build backend's notes on the editable install, and a line per index location this machine lacks).
PIP_INSTALL := $(BIN)/pip install -qq --no-compile --disable-pip-version-check
$(BIN)/.installed: pyproject.toml requirements/constraints.txt
	command -v $(PY) >/dev/null || { echo "Python 3.11 is required ($(PY) not found)"; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(PIP_INSTALL) -c requirements/constraints.txt pip
	$(PIP_INSTALL) $(TORCH_FROM)
	$(PIP_INSTALL) $(FIND_LINKS) -c requirements/constraints.txt -e '.[train,flyte,dev]'
	$(BIN)/python -c 'import compileall, site; [compileall.compile_dir(d, quiet=2, workers=0) for d in site.getsitepackages()]'
	touch $@

# Rewrite requirements/constraints.txt from the venv (pip freeze), keeping its comment header: every installed
# distribution but the editable ml8s, pip itself (which freeze leaves out), and torch as $(TORCH) (the venv holds
# the CPU build, 2.13.0+cpu, a version no index but PyTorch's CPU one has), sorted by name.
lock: $(BIN)/.installed
	{ grep '^#' requirements/constraints.txt; \
	  { $(BIN)/pip freeze --exclude-editable | grep -v -e '^torch==' -e '^ml8s=='; \
	    $(BIN)/pip freeze --all | grep '^pip=='; echo '$(TORCH)'; } \
	  | $(BIN)/python -c 'import sys; sys.stdout.writelines(sorted(sys.stdin, key=str.lower))'; \
	} > requirements/constraints.txt.tmp
	mv requirements/constraints.txt.tmp requirements/constraints.txt

# Generated protobuf code (ml8s/proto_gen/, git-ignored) is built from proto/, never edited.
setup: $(BIN)/.installed proto

proto: $(BIN)/.installed
	$(BIN)/python proto/build.py

demo-data: setup
	$(BIN)/python -m ml8s.data.demo --out $(DEMO_DATA)

run: demo-data
	DATA_ROOT=$${DATA_ROOT:-$(DEMO_DATA)} TARGET_COLUMN=$${TARGET_COLUMN:-churned} \
	PIPELINE_ROOT_URI=$${PIPELINE_ROOT_URI:-$(PIPELINE_ROOT)} \
	$(BIN)/pyflyte run workflows/training.py training_pipeline

# Continuous training (docs/continuous.md): v1 trained cold on generation 0 of a drifting stream, then each
# next version warm-started from the one before on one more generation; then the lineage is re-trained from
# v1 and compared byte for byte. Idempotent: a second `make run-continuous` finds every version in the chain.
run-continuous: setup
	@set -eo pipefail; for k in $$(seq 0 $(GENERATIONS)); do \
	  $(BIN)/python -m ml8s.data.demo --out $(CONTINUOUS_DATA)/step-$$k --generations $$k --rows 4000; \
	  warm=$$([ $$k -eq 0 ] || echo $$k); \
	  echo "== version $$((k + 1)): generations 0..$$k, WARM_START=$${warm:-(cold start)}"; \
	  DATA_ROOT=$(CONTINUOUS_DATA)/step-$$k TARGET_COLUMN=churned WARM_START=$$warm CHAIN_NAME=ml8s-continuous \
	  MLFLOW_MODEL_NAME=ml8s-continuous PIPELINE_ROOT_URI=$${PIPELINE_ROOT_URI:-$(PIPELINE_ROOT)} ML8S_LOG_LEVEL=WARNING \
	  $(BIN)/ml8s run | $(BIN)/python -c 'import json,sys; m=json.load(sys.stdin); print("   run", m["run_id"])'; \
	done
	$(BIN)/ml8s chain log --root $${PIPELINE_ROOT_URI:-$(PIPELINE_ROOT)} --chain ml8s-continuous
	$(BIN)/ml8s chain reproduce --root $${PIPELINE_ROOT_URI:-$(PIPELINE_ROOT)} --chain ml8s-continuous --from 1

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/hadolint images/Dockerfile.fe images/Dockerfile.train
	$(BIN)/python proto/build.py --check
	$(BIN)/lint-imports

typecheck: setup
	$(BIN)/mypy ml8s

# -n auto: one worker more than the cores (tests/conftest.py). --dist loadgroup: the tests that share a module's run
# go to one worker, so it is made once (tests/conftest.py).
# compileall first: the suite starts hundreds of Python processes that import this repository's modules, and
# where PYTHONDONTWRITEBYTECODE is set (CI images often set it) each would compile them again (~0.3 CPU s).
test: setup lint typecheck
	$(BIN)/python -m compileall -q ml8s tasks workflows tests bench
	$(BIN)/python -m pytest -q -n auto --dist loadgroup

bench: setup
	$(BIN)/python bench/run_all.py

# Not a test: kill -9 at random points and inside writes, racing runs, forced re-runs killed midway, a full
# disk (tmpfs, needs root), then ranks and parents killed, SIGTERM/SIGINT, warm starts and warm races, kills
# during GC and payload commits, a broken MLflow database, clock skew (faketime), read-only roots
# (bench/faults_scenarios.py). Prints trials / landed / recovered / lost / duplicates / wedged / tracebacks /
# stray temp files per scenario; exit 1 when any of the last five is not 0.
TRIALS ?= 50
faults: setup
	$(BIN)/python bench/faults.py --trials $(TRIALS)

# Serialize the workflows for a cluster, offline (no Flyte backend needed). The unnamed --image is the
# default image, of every task that names none (bootstrap, gate, snapshot, publishing, finalization):
# the training image, as in deploy/common.sh (without it they would get flytekit's image, without ml8s).
package: setup
	mkdir -p dist
	IMAGE_VERSION=$(IMAGE_VERSION) $(BIN)/pyflyte --pkgs workflows package --image $(TRAIN_IMAGE) \
		--image fe=$(FE_IMAGE) --image train=$(TRAIN_IMAGE) --output $(PACKAGE) --force

# Container images (docs/sandbox.md). CONTAINER: docker, or podman as a drop-in (then with the private
# settings of images/base-images.sh in CONTAINERS_CONF). IMAGES_BASE=local: no registry needed: the bases come
# from images/base-images.sh (debootstrap, uv's PyPI wheel) and the train image is CPU-only; otherwise the
# Dockerfiles' defaults (the cluster images). Build-time settings go in as secrets, never into a layer: the CA
# bundle (CA_BUNDLE) and the index settings of this machine (images/index_env.py).
CONTAINER ?= docker
IMAGES_BASE ?= registry
IMAGES_TMP := $(CURDIR)/build/images
PODMAN_CONF_DIR ?= $(CURDIR)/.podman
CA_BUNDLE ?= $(firstword $(wildcard $(SSL_CERT_FILE) /etc/ssl/certs/ca-certificates.crt))
LOCAL_PYTHON_IMAGE ?= localhost/ml8s-base/python:3.11-bookworm
LOCAL_UV_IMAGE ?= localhost/ml8s-base/uv:$(shell sed -n 's|^ARG UV_IMAGE=.*uv:\([0-9.]*\)$$|\1|p' images/Dockerfile.train)
comma := ,
IS_PODMAN := $(filter podman,$(notdir $(CONTAINER)))
CONTAINER_ENV := $(if $(IS_PODMAN),CONTAINERS_CONF=$(PODMAN_CONF_DIR)/containers.conf)
CONTAINER_CMD := $(strip $(CONTAINER_ENV) $(CONTAINER))
# podman 4.3 (buildah 1.28) does not mount a cached stage for RUN --mount=from=<stage> (podman#16281), and can
# reuse such a RUN after the stage changed (buildah#4522): the train image, which mounts its torch-requirement
# stage, is built without the layer cache there.
TRAIN_NO_CACHE := $(if $(IS_PODMAN),--layers=false)
IMAGE_SECRETS = --secret id=index-env,src=$(IMAGES_TMP)/index-env $(if $(CA_BUNDLE),--secret id=ca-bundle$(comma)src=$(CA_BUNDLE))
FE_BUILD_ARGS :=
TRAIN_BUILD_ARGS :=
ifeq ($(IMAGES_BASE),local)
FE_BUILD_ARGS += --build-arg PYTHON_IMAGE=$(LOCAL_PYTHON_IMAGE) --build-arg UV_IMAGE=$(LOCAL_UV_IMAGE)
# CPU torch: the local wheel (TORCH_WHEELS) as a build context when there is one, else PyTorch's CPU index.
TRAIN_BUILD_ARGS += --build-arg CUDA_IMAGE=$(LOCAL_PYTHON_IMAGE) --build-arg UV_IMAGE=$(LOCAL_UV_IMAGE) \
	--build-arg PYTHON=/usr/bin/python3.11 --build-arg TORCH_CUDA= \
	$(if $(wildcard $(TORCH_WHEELS)/torch-2.13.0+cpu-*.whl),--build-arg TORCH_SPEC=$(TORCH)+cpu --build-arg TORCH_INDEX= \
	--build-context wheels=$(TORCH_WHEELS),--build-arg TORCH_INDEX=$(TORCH_INDEX))
endif

images-base:
	$(if $(IS_PODMAN),,@echo "images-base needs CONTAINER=podman"; exit 1)
	PODMAN_CONF_DIR=$(PODMAN_CONF_DIR) PYTHON_BASE=$(LOCAL_PYTHON_IMAGE) UV_BASE=$(LOCAL_UV_IMAGE) images/base-images.sh

# Rewritten before every build (owner-only: index URLs may carry tokens); never in the build context.
images-index-env:
	mkdir -p $(IMAGES_TMP)
	umask 077; python3 images/index_env.py >$(IMAGES_TMP)/index-env

# A rebuild moves the tag: the image it replaces stays behind untagged (2.3 GB for train), and repeated
# builds on one host fill its disk. Removed before and after each build: only untagged images with our title.
images-prune = $(CONTAINER_CMD) image prune -f --filter label=org.opencontainers.image.title=$(1) >/dev/null

# Two targets, so that `make -j2 images` builds both at once (.ci/run does). On 2 cores, from a cold layer
# cache: fe 44 s and train 107 s one after the other, 118 s at once (the train build mostly writes its layer).
IMAGES_BEFORE := proto images-index-env $(if $(filter local,$(IMAGES_BASE)),images-base,$(if $(IS_PODMAN),images-podman-conf))
images: images-fe images-train

images-fe: $(IMAGES_BEFORE)
	$(call images-prune,ml8s-fe)
	$(CONTAINER_CMD) build -f images/Dockerfile.fe --build-arg IMAGE_VERSION=$(IMAGE_VERSION) $(FE_BUILD_ARGS) \
		$(IMAGE_SECRETS) -t $(FE_IMAGE) .
	$(call images-prune,ml8s-fe)

images-train: $(IMAGES_BEFORE)
	$(call images-prune,ml8s-train)
	$(CONTAINER_CMD) build -f images/Dockerfile.train $(TRAIN_NO_CACHE) --build-arg IMAGE_VERSION=$(IMAGE_VERSION) $(TRAIN_BUILD_ARGS) \
		$(IMAGE_SECRETS) -t $(TRAIN_IMAGE) .
	$(call images-prune,ml8s-train)

images-podman-conf:
	PODMAN_CONF_DIR=$(PODMAN_CONF_DIR) images/base-images.sh --conf-only

# The CUDA train image, the Dockerfile's defaults (needs nvidia/cuda and ghcr.io/astral-sh/uv from their registries).
TRAIN_CUDA_IMAGE ?= $(TRAIN_IMAGE)
images-train-cuda: proto images-index-env $(if $(IS_PODMAN),images-podman-conf)
	$(call images-prune,ml8s-train)
	$(CONTAINER_CMD) build -f images/Dockerfile.train $(TRAIN_NO_CACHE) --build-arg IMAGE_VERSION=$(IMAGE_VERSION) $(IMAGE_SECRETS) \
		-t $(TRAIN_CUDA_IMAGE) .
	$(call images-prune,ml8s-train)

# To the sandbox registry (or wherever FE_IMAGE / TRAIN_IMAGE point).
images-push:
	$(CONTAINER_CMD) push $(FE_IMAGE)
	$(CONTAINER_CMD) push $(TRAIN_IMAGE)

# Not part of `make test` (it needs the images): `make run` outside, the train image's run and the fe image's
# feature task inside (--network none), sha256 compared; pinned versions and the no-secrets-in-layers scan.
images-smoke: demo-data
	rm -rf $(IMAGES_TMP)/smoke
	$(MAKE) --no-print-directory run PIPELINE_ROOT=$(IMAGES_TMP)/smoke/outside
	$(CONTAINER_ENV) CONTAINER=$(CONTAINER) FE_IMAGE=$(FE_IMAGE) TRAIN_IMAGE=$(TRAIN_IMAGE) SMOKE_DIR=$(IMAGES_TMP)/smoke \
		DEMO_DATA=$(CURDIR)/$(DEMO_DATA) CA_BUNDLE=$(CA_BUNDLE) INDEX_ENV=$(IMAGES_TMP)/index-env images/smoke.sh

sandbox-register: setup
	FE_IMAGE=$(FE_IMAGE) TRAIN_IMAGE=$(TRAIN_IMAGE) IMAGE_VERSION=$(IMAGE_VERSION) bash deploy/register.sh

sandbox-run: setup
	FE_IMAGE=$(FE_IMAGE) TRAIN_IMAGE=$(TRAIN_IMAGE) IMAGE_VERSION=$(IMAGE_VERSION) bash deploy/run.sh $(ARGS)

clean:
	rm -rf $(VENV) pipeline_root demo_data dist .pytest_cache .mypy_cache .ruff_cache build *.egg-info
