#!/usr/bin/env bash
# Runs TokenVault's benchmarks on this machine and prints the figures that
# docs/performance.md keeps, each beside its reference measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
swift build -c release --product tokenvaultd
swift build -c release --product vaultctl
swift build -c release --product tokenvault-bench
bin=$(swift build -c release --show-bin-path)
items=${BENCH_ITEMS:-10000}

work=$(mktemp -d /tmp/tvb.XXXXXX)
daemon_pid=""
echo_pid=""
oauth_pid=""
cleanup() {
  [[ -n "$daemon_pid" ]] && kill "$daemon_pid" 2>/dev/null || true
  [[ -n "$echo_pid" ]] && kill "$echo_pid" 2>/dev/null || true
  [[ -n "$oauth_pid" ]] && kill "$oauth_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Starts tokenvaultd in the background on its own socket and data folder
# (extra environment first, as NAME=VALUE words) and waits until it answers.
start_daemon() {
  local sock=$1 data=$2 config=$3; shift 3
  mkdir -p "$data"
  env "$@" "$bin/tokenvaultd" --socket "$sock" --data-dir "$data" --config "$config" --log-level warning 2>>"$work/daemon.log" &
  daemon_pid=$!
  for _ in $(seq 400); do [[ -S "$sock" ]] && "$bin/vaultctl" --socket "$sock" status >/dev/null 2>&1 && return; sleep 0.05; done
  echo "tokenvaultd did not start:"; cat "$work/daemon.log"; exit 1
}

stop_daemon() { kill "$daemon_pid"; wait "$daemon_pid" || true; daemon_pid=""; }

# The refresh engine (docs/performance.md "Refresh engine"), against the
# test OAuth server of Tests/OAuthServer on loopback.
bench_refresh() {
  local py base config
  # Private folders for the daemons (audit log, runtime), never the user's own.
  export XDG_RUNTIME_DIR="$work/r-run" XDG_DATA_HOME="$work/r-data" XDG_CONFIG_HOME="$work/r-cfg" XDG_STATE_HOME="$work/r-state"
  mkdir -p -m 700 "$XDG_RUNTIME_DIR"
  # 1,000 connections at once need more descriptors than the usual soft limit of 1024.
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  py="$(bash scripts/oauth-server-venv.sh | tail -n1)"
  "$py" Tests/OAuthServer/server.py --port 0 --quiet --watch-parent >"$work/oauth.out" 2>"$work/oauth.log" &
  oauth_pid=$!
  for _ in $(seq 400); do grep -q '^READY ' "$work/oauth.out" 2>/dev/null && break; sleep 0.05; done
  base=$(awk '/^READY /{print $2}' "$work/oauth.out")
  [[ -n "$base" ]] || { echo "the OAuth server did not start"; cat "$work/oauth.log"; exit 1; }
  config="$work/refresh-config.json"
  printf '{"providers": {"bench": {"token_endpoint": "%s/token", "client_id": "public-cli"}}}\n' "$base" >"$config"

  echo "== refresh engine: idle with $items scheduled items (lifetimes spread over 1-2 h), ${BENCH_IDLE_SECONDS:-60} s"
  "$bin/tokenvault-bench" populate-staggered "$work/idle" "$items" bench 3600 7200
  start_daemon "$work/idle.sock" "$work/idle" "$config"
  sleep 2   # let start-up settle; the measurement is of the idle daemon
  "$bin/tokenvault-bench" idle "$daemon_pid" "${BENCH_IDLE_SECONDS:-60}"
  echo "next refresh: $("$bin/vaultctl" --socket "$work/idle.sock" list --json | python3 -c 'import json,sys; print(min(i["next_refresh"] for i in json.load(sys.stdin)))')"
  stop_daemon
  echo "-- reference: the same vault with the provider not in the config (nothing scheduled), 10 s"
  echo '{}' >"$work/empty-config.json"
  start_daemon "$work/idle.sock" "$work/idle" "$work/empty-config.json"
  sleep 2
  "$bin/tokenvault-bench" idle "$daemon_pid" 10
  stop_daemon

  echo "== refresh engine: refreshes due at once, and single flight"
  echo 0 >"$work/clock"
  start_daemon "$work/rf.sock" "$work/rf" "$config" TOKENVAULT_TEST_CLOCK_FILE="$work/clock" TOKENVAULT_MAX_CONNECTIONS=1100
  "$bin/tokenvault-bench" refresh-rate "$work/rf.sock" "$base" "${BENCH_REFRESH_ITEMS:-200}" "$daemon_pid" "$work/clock"
  "$bin/tokenvault-bench" single-flight "$work/rf.sock" "$base" 1000 0
  "$bin/tokenvault-bench" single-flight "$work/rf.sock" "$base" 1000 1
  stop_daemon
  kill "$oauth_pid"; wait "$oauth_pid" || true; oauth_pid=""
}

echo "== machine"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; memory: $(free -g | awk '/Mem:/{print $2}') GiB"
echo "kernel: $(uname -r); $(swift --version 2>/dev/null | head -1)"

# BENCH_ONLY=refresh runs only the refresh-engine section.
if [[ "${BENCH_ONLY:-}" == refresh ]]; then
  bench_refresh
  exit 0
fi

echo "== store ($items items, SQLite WAL synchronous=FULL, on $(df -T "$work" | awk 'NR==2{print $2}'))"
mkdir -p "$work/store"
"$bin/tokenvault-bench" store "$work/store" "$items"

echo "== serving (release build, one daemon, kept connections)"
export XDG_RUNTIME_DIR="$work/run" XDG_DATA_HOME="$work/data" XDG_CONFIG_HOME="$work/cfg" XDG_STATE_HOME="$work/state"
mkdir -m 700 "$XDG_RUNTIME_DIR"
sock="$XDG_RUNTIME_DIR/tokenvault/socket"
"$bin/tokenvaultd" --store sqlite --log-level warning 2>"$work/daemon.log" &
daemon_pid=$!
for _ in $(seq 100); do [[ -S "$sock" ]] && break; sleep 0.05; done
printf '{"access_token":"gho_%s","token_type":"bearer","expires_in":28800}' "$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
  | "$bin/vaultctl" add bench >/dev/null
read -r req_size resp_size < <("$bin/tokenvault-bench" wire-sizes "$sock")
echo "wire sizes: request $req_size bytes, response $resp_size bytes (payloads)"
"$bin/tokenvault-bench" echo-server "$work/echo.sock" "$resp_size" > "$work/echo.out" &
echo_pid=$!
for _ in $(seq 100); do [[ -S "$work/echo.sock" ]] && break; sleep 0.05; done
# The machine's speed drifts (a shared VM): bearer and echo alternate, three rounds each.
for round in 1 2 3; do
  echo "round $round"
  "$bin/tokenvault-bench" latency "$sock" 20000
  "$bin/tokenvault-bench" echo-latency "$work/echo.sock" "$req_size" 20000
done
for round in 1 2 3 4; do
  echo "round $round"
  "$bin/tokenvault-bench" throughput "$sock" 16 5
  "$bin/tokenvault-bench" raw-throughput "$sock" 16 5
  "$bin/tokenvault-bench" echo-throughput "$work/echo.sock" "$req_size" 16 5
done
kill "$echo_pid"; echo_pid=""

echo "== vaultctl header as a whole process, beside secret-tool lookup"
if command -v hyperfine >/dev/null && command -v dbus-run-session >/dev/null && command -v secret-tool >/dev/null; then
  export TVB_BIN="$bin" TVB_WORK="$work"
  # A private Secret Service (gnome-keyring) so secret-tool has something to look up.
  env -u DISPLAY -u WAYLAND_DISPLAY HOME="$work/kr-home" XDG_DATA_HOME="$work/kr-data" \
    dbus-run-session -- bash -c '
      set -e
      mkdir -p "$HOME"
      echo -n benchpass | gnome-keyring-daemon --daemonize --unlock --components=secrets >/dev/null
      gdbus wait --session --timeout 5 org.freedesktop.secrets
      printf "%s" "gho_benchsecret0123456789" | secret-tool store --label=bench service tvbench account bench
      hyperfine -N --warmup 20 --runs 300 --export-json "$TVB_WORK/hf.json" \
        "$TVB_BIN/vaultctl header bench" "secret-tool lookup service tvbench account bench" >/dev/null
      python3 -c "
import json
for r in json.load(open(\"$TVB_WORK/hf.json\"))[\"results\"]:
    print(\"%s: mean %.2f ms, median %.2f ms\" % (r[\"command\"].split(\"/\")[-1], r[\"mean\"]*1000, r[\"median\"]*1000))
"
    '
else
  echo "skipped: hyperfine, dbus-run-session or secret-tool missing"
fi

kill "$daemon_pid"; wait "$daemon_pid" || true; daemon_pid=""

# secret-service branch: the Secret Service store's figures (docs/performance.md, "Secret Service store").
echo "== Secret Service store (private gnome-keyring on its own session bus)"
if command -v dbus-run-session >/dev/null && command -v gnome-keyring-daemon >/dev/null; then
  mkdir -p "$work/ss" "$work/ss-home" && mkdir -m 700 -p "$work/ss-run"
  env -u DISPLAY -u WAYLAND_DISPLAY HOME="$work/ss-home" XDG_DATA_HOME="$work/ss-data" XDG_RUNTIME_DIR="$work/ss-run" \
    TVB_BIN="$bin" TVB_WORK="$work" SS_ITEMS="${BENCH_SS_ITEMS:-1000}" \
    dbus-run-session -- bash -c '
      set -e
      mkdir -p "$HOME"; mkdir -m 700 -p "$XDG_RUNTIME_DIR"
      echo -n benchpass | gnome-keyring-daemon --daemonize --unlock --components=secrets >/dev/null
      gdbus wait --session --timeout 5 org.freedesktop.secrets
      "$TVB_BIN/tokenvault-bench" secret-service "$TVB_WORK/ss" "$SS_ITEMS"
      # Bearer requests served by a daemon whose store is the Secret Service.
      export TOKENVAULT_SOCKET="$TVB_WORK/ss.sock" TOKENVAULT_DATA_DIR="$TVB_WORK/ss-daemon" TOKENVAULT_CONFIG="$TVB_WORK/none.json" \
             TOKENVAULT_AUDIT_LOG="$TVB_WORK/ss-audit.log" DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent
      "$TVB_BIN/tokenvaultd" --log-level warning 2>"$TVB_WORK/ss-daemon.log" & pid=$!
      for _ in $(seq 100); do [[ -S "$TOKENVAULT_SOCKET" ]] && break; sleep 0.05; done
      "$TVB_BIN/vaultctl" status | grep "^backend:"
      printf "{\"access_token\":\"gho_bench\",\"token_type\":\"bearer\",\"expires_in\":28800}" | "$TVB_BIN/vaultctl" add bench >/dev/null
      "$TVB_BIN/tokenvault-bench" latency "$TOKENVAULT_SOCKET" 20000 | sed "s/^/secret_service_/"
      kill $pid; wait $pid || true
    '
else
  echo "skipped: dbus-run-session or gnome-keyring-daemon missing"
fi

echo "== daemon with $items items: start to READY=1, RSS"
mkdir -p "$work/big"
"$bin/tokenvault-bench" populate "$work/big" "$items"
"$bin/tokenvault-bench" ready "$bin/tokenvaultd" "$work/big.sock" --socket "$work/big.sock" --data-dir "$work/big" --log-level warning

bench_refresh
