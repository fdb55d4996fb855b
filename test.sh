#!/usr/bin/env bash
# The whole test suite: installs the pinned real ACP agents the interop tests
# drive (skip with RESIDENTD_SKIP_REAL_AGENTS=1), runs every test with the
# race detector, then bounded fuzz runs of the request decoder and render.
set -euo pipefail
cd "$(dirname "$0")"
if [ "${RESIDENTD_SKIP_REAL_AGENTS:-}" != 1 ] && [ -x .ci/real-agents ]; then
  .ci/real-agents
fi
go test -race -count=1 -timeout 30m ./...
# Bounded fuzzing: the API's request decoder and the channel-context render.
go test -run='^$' -fuzz=FuzzDecodeTurn -fuzztime=15s ./internal/api/
go test -run='^$' -fuzz=FuzzRender -fuzztime=15s ./internal/delivery/
