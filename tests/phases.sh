#!/usr/bin/env bash
# The test command's phases, each timed, with a table of the times at the end (also when a
# phase fails: every phase runs, the exit code is the first failure's).
#   tests/phases.sh core   - ./dev.sh test: what CI runs (README, "The tests")
#   tests/phases.sh all    - ./dev.sh test-all: the same and the long live sequences
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
VENV=${VENV:-.venv}
scope=${1:-core}
case "$scope" in
  core) live='integration and not long'; rehearsal='rehearsal and not long' ;;
  all) live='integration'; rehearsal='rehearsal' ;;
  *) echo "usage: $0 core|all" >&2; exit 2 ;;
esac
names=() times=() codes=()
status=0
phase() {  # phase NAME COMMAND...
  local name=$1 start rc seconds; shift
  echo "=== phase: $name"
  start=$(date +%s)
  "$@"; rc=$?
  seconds=$(( $(date +%s) - start ))
  names+=("$name") times+=("$seconds") codes+=("$rc")
  echo "=== phase: $name: $seconds s, exit $rc"
  if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then status=$rc; fi
}
# shellcheck disable=SC2317  # called by the EXIT trap
summary() {
  local total=0 i
  echo
  echo "phase                           seconds  exit"
  for i in "${!names[@]}"; do
    printf '%-30s %8d  %4d\n' "${names[$i]}" "${times[$i]}" "${codes[$i]}"
    total=$(( total + times[i] ))
  done
  printf '%-30s %8d  (%d min %d s)\n' "total ($scope)" "$total" $(( total / 60 )) $(( total % 60 ))
}
trap summary EXIT
phase "lint, types" make -s lint typecheck VENV="$VENV"
phase "unit, pulumi, slurm, package" "$VENV/bin/pytest" -q -m "not integration and not rehearsal" --durations=10
phase "live cluster" "$VENV/bin/pytest" -q -m "$live" --durations=25 tests/integration
phase "AWS rehearsal" "$VENV/bin/pytest" -q -m "$rehearsal" --durations=10 tests/rehearsal
exit "$status"
