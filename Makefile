# Two entry points (README): `make demo` runs the main job, `make test` runs lint + tests.
# Each installs the project into a local virtual environment (.venv) first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# Extra pip arguments, e.g. PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
# for a CPU-only torch on a machine without an NVIDIA GPU.
PIP_ARGS ?=
DEMO_DIR ?= runs/demo-cartpole
ROS2_TEST_PACKAGES := 'ros-rclpy==9.1.2' 'ros-rmw-fastrtps-cpp==9.3.3' 'ros-geometry-msgs==5.5.1' \
	'ros-sensor-msgs==5.5.1' 'ros-nav-msgs==5.5.1' 'ros-diagnostic-msgs==5.5.1'

.PHONY: demo test lint format clean install lock audit

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check $(PIP_ARGS) -e '.[export,dev,sim,mjlab,robot,pixels]'
	# The video extra on its own (eval --video's tests): resolved together with mjlab's fabric,
	# pip backtracks to moviepy 1.0 (decorator<5 against fabric's >=5) and gives up; on its own
	# it takes moviepy 2 and pillow below 12 over what is installed.
	$(PY) -m pip install --quiet --disable-pip-version-check $(PIP_ARGS) 'moviepy>=2' 'gymnasium[classic-control]>=1.1'
	# Stable-Baselines3, the reference of the SB3-compatibility tests (predict's signature,
	# evaluate_policy on a VecEnv); its needs are already installed. ~1 s, 2 MB installed.
	$(PY) -m pip install --quiet --disable-pip-version-check $(PIP_ARGS) 'stable-baselines3==2.9.2'
	# Unitree's own IDL types and CRC, the wire tests' reference (its opencv dependency unused)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps 'unitree-sdk2py-dimos==1.0.3'
	# Real ROS 2 (Kilted: rclpy on Fast DDS and the message packages the bridge speaks), the ROS 2
	# tests' peer (tests/robot/test_ros2.py); test-only: wheels for x86-64 only, never in the deploy
	# image (the bridge needs CycloneDDS alone). ~24 s, 46 MB downloaded, 56 MB installed.
	if [ "$$(uname -m)" = x86_64 ]; then \
	  $(PY) -m pip install --quiet --disable-pip-version-check $(ROS2_TEST_PACKAGES); \
	else echo "no ROS 2 wheels for $$(uname -m): tests/robot/test_ros2.py will skip"; fi
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/orin-rl demo --device cpu --out $(DEMO_DIR) --overwrite

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# Three workers (pytest-xdist) on the 2-core CI box: many tests wait (subprocesses starting,
# DDS and UDP on loopback, real-time loops), and a third worker fills a core the waiting one
# leaves idle; tests that talk over the network use their own ports and DDS domains.
# worksteal: an idle worker takes queued tests from a busy one (the long subprocess tests
# otherwise leave a core idle at the end).
test: lint
	$(PY) -m pytest -q -n 3 --dist worksteal

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# requirements-lock.txt: the exact versions the test environment resolved (CI's CPU torch).
lock: $(STAMP)
	$(PY) -m pip freeze --exclude-editable | grep -v '^orin-rl' > requirements-lock.txt

# Known vulnerabilities in the locked dependencies (needs the PyPI/OSV advisory service online).
audit: $(STAMP)
	$(VENV)/bin/pip-audit --strict --no-deps --disable-pip -r requirements-lock.txt

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
