#!/bin/bash
# The GPU benchmark as one prepared command for a lent CUDA machine whose image already
# has JAX with CUDA (and possibly its own diffrax/equinox), with nothing to download:
#
#   bash benchmarks/gpu_device.sh [extra benchmarks.gpu options]
#
# Build the wheels here first (they travel in the ignored folder .whl/):
#   pip wheel --no-deps . -w .whl
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_17_x86_64 -d .whl/fb diffrax==0.7.2 equinox==0.13.8 \
#       lineax==0.1.1 optimistix==0.1.0 jaxtyping==0.3.11 wadler-lindig==0.1.8
# gflow is installed from .whl (so that its version is recorded); if the image's
# diffrax/equinox fail the smoke test, the pinned ones from .whl/fb are used instead.
# Log and JSON go to $OUT (default benchmarks/results); the JSON is rewritten after each
# batch size, so a run cut short keeps what it finished.
set -o pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-benchmarks/results}
LOG=$OUT/gpu.log
SITE=$(mktemp -d)
if ls .whl/gflow-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .whl/gflow-*.whl >>"$LOG" 2>&1
fi
export PYTHONPATH=$SITE:$PWD
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee -a "$LOG"
SMOKE='import jax, diffrax, equinox, numpy as np, gflow
from gflow import theory
print("versions: jax", jax.__version__, "diffrax", diffrax.__version__, "equinox", equinox.__version__,
      "gflow", gflow.__version__, jax.devices())
X, Y = theory.authors_data()
p = [np.asarray(W) for W in gflow.init_params(jax.random.PRNGKey(0), (2, 2, 2), batch=4)]
print("smoke:", gflow.simulate_batch(p, X, Y, loss="square", t1=150.0).status)'
if ! timeout 300 python3 -c "$SMOKE" 2>&1 | tee -a "$LOG"; then
  echo "the image's diffrax/equinox failed; using the pinned wheels in .whl/fb" | tee -a "$LOG"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .whl/fb/*.whl >>"$LOG" 2>&1
  timeout 300 python3 -c "$SMOKE" 2>&1 | tee -a "$LOG" || exit 3
fi
timeout "${BENCH_TIMEOUT:-480}" python3 -m benchmarks.gpu --reference benchmarks/results/gpu_cpu_reference.npz \
  --out "$OUT/gpu.json" "$@" 2>&1 | tee -a "$LOG"
