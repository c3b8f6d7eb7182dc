#!/usr/bin/env bash
# The test command's phases, each timed, with a table of the times at the end (also when a
# phase fails: every phase runs, the exit code is the first failure's).
#   tests/phases.sh core   - ./dev.sh test: what CI runs (README, "The tests")
#   tests/phases.sh all    - ./dev.sh test-all: the same and the long live sequences
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
VENV=${VENV:-.venv}
scope=${1:-core}
# The live phase's budget: a cluster that stopped answering half-way makes every later test
# wait out its own timeout, and CI's hard limit would then kill the command before it printed
# anything; at its budget pytest is interrupted (SIGINT: it prints its summary), the phase
# fails with 124 and the table below is printed. `core` takes ~27 min (README, "The tests").
case "$scope" in
  core) live='integration and not long'; rehearsal='rehearsal and not long'; budget=${SLURMFORGE_LIVE_BUDGET:-2700} ;;
  all) live='integration'; rehearsal='rehearsal'; budget=${SLURMFORGE_LIVE_BUDGET:-0} ;;
  *) echo "usage: $0 core|all" >&2; exit 2 ;;
esac
names=() times=() codes=()
status=0
started=$(date +%s)
record() {  # record NAME SECONDS EXIT
  names+=("$1") times+=("$2") codes+=("$3")
  echo "=== phase: $1: $2 s, exit $3"
  if [ "$3" -ne 0 ] && [ "$status" -eq 0 ]; then status=$3; fi
}
phase() {  # phase NAME COMMAND...
  local name=$1 start rc; shift
  echo "=== phase: $name"
  start=$(date +%s)
  "$@"; rc=$?
  record "$name" $(( $(date +%s) - start )) "$rc"
}
# shellcheck disable=SC2317  # called by the EXIT trap
summary() {
  local total i
  echo
  echo "phase                             seconds  exit"
  for i in "${!names[@]}"; do
    printf '%-32s %8d  %4d\n' "${names[$i]}" "${times[$i]}" "${codes[$i]}"
  done
  total=$(( $(date +%s) - started ))
  printf '%-32s %8d  (%d min %d s)\n' "wall ($scope)" "$total" $(( total / 60 )) $(( total % 60 ))
}
trap summary EXIT
# The AWS rehearsal needs neither the live cluster nor the other phases (its own containers and
# networks; an image build waits for another's: image_cache.ensure_images) and mostly waits on
# the machines it boots, so it starts first and runs in the background while lint, the fast
# tests and the live cluster's bring-up run; its output is printed once it is done. The fast
# tests run 3 at a time, a module's tests in one worker (its fixtures made once). The live
# cluster is brought up (from a cold start: its machines started again) in the rehearsal's
# shadow, the same `slurmforge up --local` a user runs; its tests run alone: they time Slurm.
rehearsal_log=$(mktemp)
rehearsal_start=$(date +%s)
echo "=== phase: AWS rehearsal (side by side with the next three phases; its output once it ends)"
"$VENV/bin/pytest" -q -p no:cacheprovider -m "$rehearsal" --durations=10 tests/rehearsal > "$rehearsal_log" 2>&1 &
rehearsal_pid=$!
phase "lint, types" make -s lint typecheck VENV="$VENV"
phase "unit, pulumi, slurm, package" "$VENV/bin/pytest" -q -n 3 --dist loadscope \
  -m "not integration and not rehearsal" --durations=10
if [ "$(id -u)" -eq 0 ] && command -v podman >/dev/null; then  # else the live tests skip themselves
  phase "live cluster up (side by side)" "$VENV/bin/slurmforge" up --local --no-job --no-validate --yes \
    "${SLURMFORGE_TEST_SPEC:-examples/local.yaml}"
fi
rc=0
wait "$rehearsal_pid" || rc=$?
cat "$rehearsal_log"
rm -f "$rehearsal_log"
record "AWS rehearsal (side by side)" $(( $(date +%s) - rehearsal_start )) "$rc"
bounded=()
[ "$budget" -le 0 ] || bounded=(timeout -s INT -k 120 "$budget")
phase "live cluster" "${bounded[@]}" "$VENV/bin/pytest" -q -m "$live" --durations=25 tests/integration
[ "${codes[-1]}" -ne 124 ] || echo "=== the live phase reached its budget of $budget s and was stopped"
exit "$status"
