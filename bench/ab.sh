#!/usr/bin/env bash
# A/B of the broker against an older commit, side by side in one run: builds the release broker
# of COMMIT (in a scratch worktree under target/) and of the working tree (or of NEW, in a second
# worktree, so edits during the run cannot change what is measured), starts both on fresh
# data directories, and runs raw_load against the two targets for acks=1 and acks=all, each
# round twice with the order swapped (the first target of a round meets a cold page cache).
# Figures are printed, never asserted. Loopback only; everything started here is stopped here.
#
#   bench/ab.sh COMMIT [--new NEW] [--seconds 5] [--data-dir DIR]
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: $0 COMMIT [--new NEW] [--seconds N] [--data-dir DIR]"
[[ $# -ge 1 ]] || { echo "$usage" >&2; exit 2; }
commit=$1; shift
seconds=5 data_root=./target/ab-data new_commit=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --new) new_commit=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --data-dir) data_root=$2; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done

# Builds the release broker of $2 in the worktree $1.
build_at() {
  if [[ ! -d $1 ]]; then
    git worktree add --detach -q "$1" "$2"
  else
    git -C "$1" checkout -q --detach "$2"
  fi
  (cd "$1" && cargo build --release -q -p skiff --bin skiff)
}

old_tree=./target/ab-old
rev=$(git rev-parse --short "$commit")
if [[ -n $new_commit ]]; then
  new_tree=./target/ab-new new_rev=$(git rev-parse --short "$new_commit")
else
  new_tree=. new_rev="the working tree"
fi
echo "== building the release broker of $rev and of $new_rev"
build_at "$old_tree" "$commit"
if [[ -n $new_commit ]]; then
  build_at "$new_tree" "$new_commit"
else
  cargo build --release -q -p skiff --bin skiff
fi
cargo build --release -q -p skiff-interop --example raw_load

# shellcheck source=bench/lib.sh
source bench/lib.sh

start() { # name binary: starts a broker in the parent shell (its PID is tracked), sets $port
  port=$(free_port)
  rm -rf "${data_root:?}/$1"
  mkdir -p "$data_root"
  "$2" broker --listen "127.0.0.1:$port" --data-dir "$data_root/$1" \
    --set admin.listen=127.0.0.1:0 >"$data_root/$1.log" 2>&1 &
  pids+=($!)
  wait_port "$port"
}

for acks in 1 -1; do
  for order in "old new" "new old"; do
    start old "$old_tree/target/release/skiff"; old_port=$port
    start new "$new_tree/target/release/skiff"; new_port=$port
    targets=()
    for who in $order; do
      if [[ $who == old ]]; then targets+=(--target "old=127.0.0.1:$old_port")
      else targets+=(--target "new=127.0.0.1:$new_port"); fi
    done
    echo "== acks=$acks, order: $order ($rev vs $new_rev)"
    target/release/examples/raw_load --acks "$acks" --seconds "$seconds" "${targets[@]}" || true
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    pids=()
    rm -rf "${data_root:?}/old" "${data_root:?}/new"
  done
done
