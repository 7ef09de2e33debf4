//! The disk's own batched-fdatasync rate: the ceiling for `acks=all` under `flush = always`.
//!
//! Appends chunks to a file in a directory on the disk under test and calls `fdatasync` after
//! every `k` chunks, for several `k`, printing MB/s and syncs/s for each. An `acks=all` produce
//! benchmark (e.g. `raw_load --acks -1`) is then compared with the best of these figures: a
//! group-committing log cannot beat the disk, and should come close to it.
//!
//! ```sh
//! cargo run --release -p skiff-log --example fdatasync_probe -- --dir ./skiff-data --seconds 3
//! ```
//!
//! Writes a scratch file (removed at the end) of at most `--seconds` worth of data per round.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

struct Args {
    dir: PathBuf,
    chunk: usize,
    seconds: f64,
    per_sync: Vec<usize>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        dir: PathBuf::from("."),
        chunk: 1 << 20,
        seconds: 3.0,
        per_sync: vec![1, 4, 8, 32],
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--dir" => args.dir = PathBuf::from(value()?),
            "--chunk-bytes" => args.chunk = value()?.parse().map_err(|e| format!("{e}"))?,
            "--seconds" => args.seconds = value()?.parse().map_err(|e| format!("{e}"))?,
            "--per-sync" => {
                args.per_sync = value()?
                    .split(',')
                    .map(|k| k.parse().map_err(|e| format!("{k}: {e}")))
                    .collect::<Result<_, _>>()?;
            }
            "--help" | "-h" => {
                return Err(
                    "fdatasync_probe [--dir DIR] [--chunk-bytes N] [--seconds S] \
                            [--per-sync 1,4,8,32]"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.chunk == 0 || args.per_sync.contains(&0) || args.seconds <= 0.0 {
        return Err("chunk size, seconds and per-sync counts must be positive".into());
    }
    Ok(args)
}

/// One round: chunks written back to back, `fdatasync` after every `per_sync` of them.
fn round(
    file: &mut File,
    chunk: &[u8],
    per_sync: usize,
    budget: Duration,
) -> std::io::Result<(u64, u64, Duration)> {
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    file.sync_all()?;
    let (mut bytes, mut syncs) = (0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < budget {
        for _ in 0..per_sync {
            file.write_all(chunk)?;
            bytes += chunk.len() as u64;
        }
        file.sync_data()?;
        syncs += 1;
    }
    Ok((bytes, syncs, start.elapsed()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    std::fs::create_dir_all(&args.dir)?;
    let path = args
        .dir
        .join(format!(".fdatasync-probe-{}", std::process::id()));
    let mut file = OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(&path)?;
    let chunk = vec![0x5au8; args.chunk];
    println!(
        "fdatasync probe in {} ({} KiB chunks, {:.1} s per round)",
        args.dir.display(),
        args.chunk / 1024,
        args.seconds
    );
    let mut best = 0.0f64;
    let mut result = Ok(());
    for &per_sync in &args.per_sync {
        match round(
            &mut file,
            &chunk,
            per_sync,
            Duration::from_secs_f64(args.seconds),
        ) {
            Ok((bytes, syncs, took)) => {
                let mb_per_s = bytes as f64 / took.as_secs_f64() / 1e6;
                best = best.max(mb_per_s);
                println!(
                    "  {per_sync:>3} chunk(s) per fdatasync: {mb_per_s:>8.1} MB/s, {:>7.1} syncs/s",
                    syncs as f64 / took.as_secs_f64()
                );
            }
            Err(err) => {
                result = Err(err);
                break;
            }
        }
    }
    drop(file);
    std::fs::remove_file(&path)?;
    result?;
    println!("best batched fdatasync rate: {best:.1} MB/s");
    Ok(())
}
