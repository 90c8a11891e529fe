#!/usr/bin/env bash
# Sets up a fresh Debian machine, builds TokenVault and starts tokenvaultd in
# the foreground on its default store (SQLite at $XDG_DATA_HOME/tokenvault/vault.db).
# Extra arguments go to tokenvaultd (for example --log-level debug).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
swift build -c release --product tokenvaultd
swift build -c release --product vaultctl
if [[ -z "${XDG_RUNTIME_DIR:-}" ]]; then
  echo "note: XDG_RUNTIME_DIR is unset; the socket will be /tmp/tokenvault-$(id -u)/socket" >&2
fi
echo "tokenvaultd starting; in another terminal try: $(pwd)/.build/release/vaultctl status" >&2
# The quick start runs on the embedded SQLite store; TOKENVAULT_STORE=auto
# (or --store auto) lets the daemon pick the desktop's Secret Service instead.
export TOKENVAULT_STORE="${TOKENVAULT_STORE:-sqlite}"
exec .build/release/tokenvaultd "$@"
