#!/usr/bin/env bash
# Checks of rayfield's GPU paths on a machine with one or more CUDA GPUs, in one run:
# core (num_gpus tasks and actors, whole and fractional, get_gpu_ids, CUDA_VISIBLE_DEVICES,
# GPU detection), nccl groups, rayfield-sgd (PyTorchTrainer use_gpu, DistributedSGD gpu),
# rayfield-rllib (PPO with num_gpus=1) and the resnet example (actors of half a GPU).
#
#   bash tools/gpu_check.sh [CHECK...]     # CHECK: env core nccl sgd dsgd rllib resnet
#
# It runs from a tree holding packages/ and tools/ (a checkout, or a copy of one); Python
# needs torch with CUDA, grpcio, cloudpickle, psutil, numpy, scikit-learn. Optional, beside
# tools/: whl/*.whl (missing packages, e.g. gymnasium and flatbuffers, installed into
# /tmp/site) and shim/flatc/include (flatbuffers headers, to build the store when
# rayfield.store._native does not import); tools/gpu_check_stage.sh prepares such a copy.
# Writes gpu_check.log, summary.txt, store_build.log and the worker logs found under
# /tmp/rayfield-* (rayfield_logs.tar.gz) to $OUT (default /tmp/gpu_check_out); prints one
# "RESULT name PASS|FAIL|INFO seconds detail" line per check and the summary (the same lines,
# cut at 400 characters) last.
# Exits 1 when a check failed.
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/gpu_check_out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
T0=$(date +%s)
step() { echo "== $* (t=$(( $(date +%s) - T0 ))s)"; }

step "setup in $HERE"
if compgen -G "$HERE/whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$HERE"/whl/*.whl || exit 1
fi
P=$HERE/packages
export PYTHONPATH=/tmp/site:$P/store/src:$P/core/src:$P/sgd/src:$P/rllib/src:$P/sgd/examples
export PYTHONUNBUFFERED=1 GPU_CHECK_SUMMARY=$OUT/summary.txt
: >"$GPU_CHECK_SUMMARY"
python3 --version; nproc; df -h /dev/shm /tmp | tail -2
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv || true
if ! python3 -c "import rayfield.store._native" 2>/dev/null; then
  step "building rayfield.store._native for $(python3 --version)"
  PYTHONPATH=$HERE/shim:$PYTHONPATH python3 "$P/store/build.py" >"$OUT/store_build.log" 2>&1 \
    || { tail -40 "$OUT/store_build.log"; exit 1; }
fi
python3 -c "import rayfield, rayfield.store._native as n; print('rayfield from', rayfield.__file__)" \
  || exit 1

CHECKS=("$@")
[ ${#CHECKS[@]} -eq 0 ] && CHECKS=(env core nccl sgd dsgd rllib resnet)
rc_all=0
for check in "${CHECKS[@]}"; do
  step "check $check"
  if [ "$check" = resnet ]; then
    for mode in gpu cpu; do
      t=$(date +%s)
      if [ $mode = gpu ]; then
        args=(--gpus-per-actor 0.5 --num-cpus 4)
        cvd=${CUDA_VISIBLE_DEVICES-unset}
      else
        args=(--num-workers 2 --num-cpus 4)
        cvd=""
      fi
      log=/tmp/resnet_$mode.log
      if [ "$cvd" = unset ]; then
        (cd "$P/core/examples" && timeout 240 python3 resnet.py "${args[@]}") >"$log" 2>&1
      else
        (cd "$P/core/examples" && CUDA_VISIBLE_DEVICES=$cvd timeout 240 python3 resnet.py \
          "${args[@]}") >"$log" 2>&1
      fi
      rc=$?
      grep -E "^actor |^round |^final" "$log"
      accuracy=$(sed -n 's/^final test accuracy \([0-9.]*\).*/\1/p' "$log")
      actors=$(grep -c "^actor " "$log")
      if [ $mode = gpu ]; then
        on_gpu=$(grep -c "^actor .*: GPUs \[0\], training on cuda:0" "$log")
        ok=$([ $rc -eq 0 ] && [ "$actors" -ge 2 ] && [ "$on_gpu" -eq "$actors" ] && echo PASS || echo FAIL)
        detail="$actors actors, $on_gpu on cuda:0 with GPUs [0]"
      else
        ok=$([ $rc -eq 0 ] && echo PASS || echo FAIL)
        detail="$actors CPU actors"
      fi
      [ $ok = FAIL ] && { rc_all=1; tail -30 "$log"; }
      echo "resnet.$mode $ok $(( $(date +%s) - t )).0s exit=$rc, $detail, final test" \
        "accuracy ${accuracy:-none}" | tee -a "$GPU_CHECK_SUMMARY"
    done
  else
    timeout 300 python3 "$HERE/tools/gpu_check.py" "$check"
    rc=$?
    [ $rc -ne 0 ] && rc_all=1
    [ $rc -eq 124 ] && echo "$check FAIL 300.0s timed out" | tee -a "$GPU_CHECK_SUMMARY"
  fi
done

step "done"
nvidia-smi --query-gpu=memory.used --format=csv || true
(cd / && find tmp/rayfield-* -type f -size -4M \( -name "*.out" -o -name "*.err" -o -name "*.log" \) \
  -print0 2>/dev/null | tar czf "$OUT/rayfield_logs.tar.gz" --null -T -) || true
echo "== summary (t=$(( $(date +%s) - T0 ))s)"
cut -c1-400 "$GPU_CHECK_SUMMARY"
exit $rc_all
