#!/usr/bin/env bash
# A/B of the broker against an older commit, side by side in one run: builds the release broker
# of COMMIT (in a scratch worktree under target/) and of the working tree, starts both on fresh
# data directories, and runs raw_load against the two targets for acks=1 and acks=all, each
# round twice with the order swapped (the first target of a round meets a cold page cache).
# Figures are printed, never asserted. Loopback only; everything started here is stopped here.
#
#   bench/ab.sh COMMIT [--seconds 5] [--data-dir DIR]
set -euo pipefail
cd "$(dirname "$0")/.."

[[ $# -ge 1 ]] || { echo "usage: $0 COMMIT [--seconds N] [--data-dir DIR]" >&2; exit 2; }
commit=$1; shift
seconds=5 data_root=./target/ab-data
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --data-dir) data_root=$2; shift 2 ;;
    *) echo "usage: $0 COMMIT [--seconds N] [--data-dir DIR]" >&2; exit 2 ;;
  esac
done

old_tree=./target/ab-old
rev=$(git rev-parse --short "$commit")
if [[ ! -d $old_tree ]]; then
  git worktree add --detach -q "$old_tree" "$commit"
else
  git -C "$old_tree" checkout -q --detach "$commit"
fi
echo "== building the release broker of $rev and of the working tree"
(cd "$old_tree" && cargo build --release -q -p skiff --bin skiff)
cargo build --release -q -p skiff --bin skiff
cargo build --release -q -p skiff-interop --example raw_load

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$data_root"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listening on $1" >&2; return 1
}

start() { # name binary -> prints the port
  local port
  port=$(free_port)
  rm -rf "${data_root:?}/$1"
  mkdir -p "$data_root"
  "$2" broker --listen "127.0.0.1:$port" --data-dir "$data_root/$1" \
    --set admin.listen=127.0.0.1:0 >"$data_root/$1.log" 2>&1 &
  pids+=($!)
  wait_port "$port"
  echo "$port"
}

for acks in 1 -1; do
  for order in "old new" "new old"; do
    old_port=$(start old "$old_tree/target/release/skiff")
    new_port=$(start new target/release/skiff)
    targets=()
    for who in $order; do
      if [[ $who == old ]]; then targets+=(--target "old=127.0.0.1:$old_port")
      else targets+=(--target "new=127.0.0.1:$new_port"); fi
    done
    echo "== acks=$acks, order: $order ($rev vs working tree)"
    target/release/examples/raw_load --acks "$acks" --seconds "$seconds" "${targets[@]}" || true
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    pids=()
  done
done
