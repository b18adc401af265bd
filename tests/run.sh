#!/usr/bin/env bash
# The test command: formatting, lints, then every test of the workspace in release mode
# (the memory and end-to-end tests run real-sized partitions).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

echo "== cargo test"
cargo test --release --workspace
