#!/usr/bin/env bash
# The graphed PPO update and the mapped worker blocks on the H200 (one device call):
#   bash tools/h200_update_graphs.sh [--quick]  # gpu tests (--quick: not the regressions),
#                                             # then each test's mutation must fail
# Needs .whl/ installed into /tmp/site (GPU.md) and PYTHONPATH=/tmp/site:$PWD. Writes logs to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
pytest() { python3 -m pytest -q -p no:cacheprovider -m gpu "$@"; }
NEW="tests/runners/test_graphed_update.py tests/buffers/test_shared.py"

echo "== gpu tests of the graphed update and the mapped blocks"
pytest $NEW --durations=8 2>&1 | tee "$OUT/gpu_tests_update_graphs.log" | tail -20

[ "${1:-}" = "--quick" ] && QUICK=1 || QUICK=0
if [ $QUICK = 0 ]; then
echo "== regressions: the CUDA learner's other paths"
pytest tests/runners/test_gpu_backend_training.py tests/runners/test_fused_training.py \
    tests/runners/test_obs_into_buffer.py tests/runners/test_train_e2e.py \
    tests/buffers/test_rollout.py --durations=5 2>&1 | tee "$OUT/gpu_tests_regressions.log" | tail -12
fi

# Each mutation breaks what one test guards: the test must fail (then the file is restored).
mutate() {  # file, sed expression, test selection
    cp "$1" /tmp/mutation.bak
    sed -i "$2" "$1"
    if cmp -s "$1" /tmp/mutation.bak; then echo "MUTATION NOT APPLIED: $2"; return; fi
    pytest "$3" -x > /tmp/mutation.log 2>&1
    tail -3 /tmp/mutation.log | tee -a "$OUT/mutations.log"
    if grep -q " failed" /tmp/mutation.log; then
        echo "mutation caught: $2"
    else
        echo "MUTATION SURVIVED: $2"
    fi
    cp /tmp/mutation.bak "$1"
}
echo "== mutations"
mutate orin_rl/runners/graphs.py 's/return (id(buffer), buffer.obs.data_ptr())/return (0, 0)/' \
    "tests/runners/test_graphed_update.py::test_replays_are_the_eager_update_on_each_of_two_buffers"
mutate orin_rl/algorithms/ppo.py 's/if self.graphed_update is not None:  # its graphs/if False:  #/' \
    "tests/runners/test_graphed_update.py::test_replays_are_the_eager_update_on_each_of_two_buffers"
mutate orin_rl/runners/overlap.py 's/self.learner.graphed_update.prepare()/pass/' \
    "tests/runners/test_graphed_update.py::test_a_run_trains_as_the_op_by_op_update_does"
mutate orin_rl/buffers/shared.py 's/return torch.as_tensor(view, device=self._registered)/return torch.as_tensor(array, device=self._registered)/' \
    tests/buffers/test_shared.py
