#!/usr/bin/env bash
# Sets up a fresh Debian machine and runs the whole TokenVault test suite:
# unit tests, store tests on real SQLite files, and end-to-end tests that
# start tokenvaultd and vaultctl as processes on private XDG folders.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test

# The end-to-end tests run a client as another user to check SO_PEERCRED.
if [[ $(id -u) -eq 0 ]] && ! id tokenvault-test >/dev/null 2>&1; then
  useradd --system --no-create-home --shell /usr/sbin/nologin tokenvault-test
fi

# The test OAuth 2.0 server (Authlib, from PyPI) lives in its own virtualenv.
bash scripts/oauth-server-venv.sh >/dev/null
.venv-oauth/bin/python Tests/OAuthServer/test_server.py

# The Secret Service and session-lock tests start their own private services
# (gnome-keyring-daemon in a dbus-run-session, a dbus-daemon with
# python3-dbusmock's logind): nothing here touches the user's buses, and
# they skip with a message when those programs are missing.

# Build everything once; the tests use the binaries in .build/debug.
swift build --build-tests
# Tests in parallel would compete for 2 cores and the same temp space.
swift test --skip-build --no-parallel "$@"
