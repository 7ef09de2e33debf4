//! Append throughput of 16 x 1 KiB-record batches: no flush vs group-committed fdatasync.
//! Figures are printed by criterion (and the sync ratio by this file); nothing is asserted.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use skiff_log::{FlushPolicy, GroupCommitter, LogConfig, PartitionLog};
use skiff_records::RecordBatchBuilder;

const RECORDS_PER_BATCH: usize = 16;
const RECORD_BYTES: usize = 1024;
/// Keeps the benchmark's disk use bounded.
const MAX_LOG_BYTES: u64 = 512 * 1024 * 1024;

fn batch() -> Bytes {
    let value = vec![0x42; RECORD_BYTES];
    let mut builder = RecordBatchBuilder::new();
    for i in 0..RECORDS_PER_BATCH {
        builder
            .append(1_700_000_000_000 + i as i64, None, Some(&value), &[])
            .unwrap_or_else(|err| panic!("bench batch: {err}"));
    }
    builder
        .build()
        .unwrap_or_else(|err| panic!("bench batch: {err}"))
        .into_bytes()
}

fn config(flush: FlushPolicy) -> LogConfig {
    LogConfig {
        flush,
        segment_bytes: 64 * 1024 * 1024,
        retention_ms: None,
        segment_ms: None,
        ..LogConfig::default()
    }
}

fn keep_small(log: &mut PartitionLog) {
    if log.size_in_bytes() > MAX_LOG_BYTES {
        let end = log.log_end_offset();
        log.reset_to(end)
            .unwrap_or_else(|err| panic!("bench reset: {err}"));
    }
}

fn bench_append(c: &mut Criterion) {
    let batch = batch();
    let mut group = c.benchmark_group("append");
    group.throughput(Throughput::Bytes(batch.len() as u64));
    group.measurement_time(Duration::from_secs(3));
    group.sample_size(20);

    let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("tempdir: {err}"));
    let mut log = PartitionLog::open(dir.path().join("none"), config(FlushPolicy::Never))
        .unwrap_or_else(|err| panic!("open: {err}"));
    group.bench_function("flush_none", |b| {
        b.iter(|| {
            keep_small(&mut log);
            log.append(batch.clone(), 0)
                .unwrap_or_else(|err| panic!("append: {err}"))
        })
    });

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap_or_else(|err| panic!("runtime: {err}"));
    for tasks in [1usize, 16, 64] {
        let log = Arc::new(Mutex::new(
            PartitionLog::open(
                dir.path().join(format!("gc{tasks}")),
                config(FlushPolicy::Always),
            )
            .unwrap_or_else(|err| panic!("open: {err}")),
        ));
        let committer =
            runtime.block_on(async { Arc::new(GroupCommitter::spawn(Arc::clone(&log))) });
        let mut appends = 0u64;
        group.bench_function(format!("group_commit_{tasks}_producers"), |b| {
            b.iter_custom(|iters| {
                appends += iters;
                let start = Instant::now();
                runtime.block_on(async {
                    let per_task = iters.div_ceil(tasks as u64);
                    let mut handles = Vec::new();
                    for _ in 0..tasks {
                        let (log, committer, batch) =
                            (Arc::clone(&log), Arc::clone(&committer), batch.clone());
                        handles.push(tokio::spawn(async move {
                            for _ in 0..per_task {
                                let info = {
                                    let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
                                    keep_small(&mut log);
                                    log.append(batch.clone(), 0)
                                        .unwrap_or_else(|err| panic!("append: {err}"))
                                };
                                committer
                                    .wait_durable(info.last_offset + 1)
                                    .await
                                    .unwrap_or_else(|err| panic!("sync: {err}"));
                            }
                        }));
                    }
                    for handle in handles {
                        handle.await.unwrap_or_else(|err| panic!("task: {err}"));
                    }
                });
                start.elapsed()
            })
        });
        println!(
            "group_commit_{tasks}_producers: ~{appends} appends, {} fdatasyncs",
            committer.sync_count()
        );
    }
    group.finish();
}

criterion_group!(benches, bench_append);
criterion_main!(benches);
