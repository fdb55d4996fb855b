#!/usr/bin/env bash
# The whole test suite: installs the pinned real ACP agents the interop tests
# drive, runs every test with the race detector, then bounded fuzz runs of
# the request decoder and render. Every response the suite's daemons write is
# checked against the API's OpenAPI description.
#
# Real agents need node and npm, and so does the TypeScript check of the
# published API document. Without them (a machine with only Go) both are
# skipped with a notice; in CI (CI=true) they are required.
# RESIDENTD_SKIP_REAL_AGENTS=1 skips them on purpose.
set -euo pipefail
cd "$(dirname "$0")"
if [ "${RESIDENTD_SKIP_REAL_AGENTS:-}" != 1 ]; then
  if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    .ci/real-agents
  elif [ "${CI:-}" = true ]; then
    echo "test.sh: node and npm are required in CI for the real-agent interop tests" >&2
    exit 1
  else
    echo "test.sh: node/npm not found: skipping the real-agent interop tests (install Node 20 to run them)" >&2
    export RESIDENTD_SKIP_REAL_AGENTS=1
  fi
fi
# The published API document must stay usable for clients that generate
# their types from it (openapi-typescript, tsc): needs node and npm as well.
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  .ci/schema-types/check
elif [ "${CI:-}" = true ]; then
  echo "test.sh: node and npm are required in CI for the TypeScript check of docs/openapi.json" >&2
  exit 1
else
  echo "test.sh: node/npm not found: skipping the TypeScript check of docs/openapi.json (.ci/schema-types/check)" >&2
fi
# Every response any test's daemon writes is recorded, then checked against
# docs/openapi.json (RESIDENTD_API_TRACE; see internal/api/trace.go).
trace=$(mktemp -d)
trap 'rm -rf "$trace"' EXIT
RESIDENTD_API_TRACE="$trace" go test -race -count=1 -timeout 30m ./...
RESIDENTD_API_TRACE_CHECK="$trace" go test -count=1 -run '^TestSuiteTraffic$' -v ./internal/api/
# Bounded fuzzing: the API's request decoder and the channel-context render.
go test -run='^$' -fuzz=FuzzDecodeTurn -fuzztime=15s ./internal/api/
go test -run='^$' -fuzz=FuzzRender -fuzztime=15s ./internal/delivery/
go test -run='^$' -fuzz=FuzzScanDamaged -fuzztime=15s ./internal/store/
