#!/usr/bin/env bash
# Creates (or refreshes) the virtualenv of the test OAuth server
# (Tests/OAuthServer) at .venv-oauth in the repo root, and prints the path of
# its python on the last line of stdout:
#
#   py="$(scripts/oauth-server-venv.sh | tail -n1)"
#   "$py" Tests/OAuthServer/server.py --port 0
#
# Idempotent and quiet: the venv is rebuilt only when it is missing, broken,
# or Tests/OAuthServer/requirements.txt (or the base interpreter) changed.
# Concurrent runs are serialised with a lock on the requirements file.
# Needs PyPI (pip) the first time. Progress and errors go to stderr.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv-oauth"
req="$root/Tests/OAuthServer/requirements.txt"
stamp="$venv/.tokenvault-requirements"

say() { printf 'oauth-server-venv: %s\n' "$*" >&2; }

if [[ -x /usr/bin/python3 ]]; then
  base_python=/usr/bin/python3
else
  base_python="$(command -v python3 || true)"
  [[ -n "$base_python" ]] || { say "no python3 found"; exit 1; }
fi

# What the venv was built from: the requirements and the base interpreter.
want="$(
  {
    cat "$req"
    "$base_python" -c 'import sys; print(sys.executable, sys.version)'
  } | sha256sum | cut -d' ' -f1
)"

venv_ok() {
  [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] &&
    "$venv/bin/python" -c 'import authlib, flask' >/dev/null 2>&1
}

# Serialise concurrent runs (several test processes may start at once).
exec 9<"$req"
flock 9

if ! venv_ok; then
  say "creating $venv"
  rm -rf "$venv"
  if ! "$base_python" -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    # Debian ships venv/ensurepip separately.
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
      say "installing python3-venv"
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -qq python3-venv >/dev/null 2>&1 ||
        { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq python3-venv >/dev/null; }
      "$base_python" -m venv "$venv" >/dev/null
    else
      say "'$base_python -m venv' failed; install python3-venv (apt-get install python3-venv)"
      exit 1
    fi
  fi
  if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
      --no-input -r "$req" >&2; then
    say "pip install failed"
    rm -rf "$venv"
    exit 1
  fi
  # Keep the venv out of git without touching the repo's .gitignore.
  printf '*\n' >"$venv/.gitignore"
  printf '%s\n' "$want" >"$stamp"
fi

printf '%s\n' "$venv/bin/python"
