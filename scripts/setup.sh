#!/usr/bin/env bash
# Installs the Debian packages TokenVault needs to build, run and test.
# Usage: scripts/setup.sh            (build + run: libraries only)
#        scripts/setup.sh --test     (also what the test suite needs)
set -euo pipefail

packages=(pkg-config libsqlite3-dev libsodium-dev libsecret-1-dev libglib2.0-dev)
if [[ "${1:-}" == "--test" ]]; then
  packages+=(sqlite3 util-linux dbus dbus-bin gnome-keyring libsecret-tools
             python3-dbusmock python3-dbus python3-gi python3-venv libglib2.0-bin systemd procps hyperfine)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
