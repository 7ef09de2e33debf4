//! The disk's own write ceilings, measured the way a log writes:
//!
//! - **batched fdatasync**: chunks appended to a file, `fdatasync` after every `k` chunks, for
//!   several `k` (MB/s and syncs/s each). The best of these is the ceiling for `acks=all` under
//!   `flush = always`: a group-committing log cannot beat it, and should come close to it.
//! - **direct sequential write**: aligned chunks appended to a new file with `O_DIRECT` (the
//!   device's DMA, no page cache, no sync). No log that keeps every byte on this disk sustains
//!   more than this, whatever the acks: it bounds `acks=1` too, beyond short bursts.
//! - **page-cache write**: buffered appends to a new file, never synced: what the kernel takes
//!   in when nothing waits for the disk, i.e. the intake of a log written through the page cache
//!   (on a VM whose free memory is handed back to the host, every new page costs a fault there).
//!
//! ```sh
//! cargo run --release -p skiff-log --example fdatasync_probe -- --dir ./skiff-data --seconds 3
//! ```
//!
//! Writes a scratch file (removed at the end) of at most `--seconds` worth of data per round.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
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

/// Block alignment for `O_DIRECT`: buffer address, file offset and length.
const DIRECT_ALIGN: usize = 4096;

/// Appends `chunk` to a new file at `path` for `budget`, opened with `extra_flags`; no sync.
/// Returns bytes written and the time taken; the file is removed.
fn stream_round(
    path: &Path,
    chunk: &[u8],
    extra_flags: rustix::fs::OFlags,
    budget: Duration,
) -> std::io::Result<(u64, Duration)> {
    let mut file = OpenOptions::new()
        .create_new(true)
        .write(true)
        .custom_flags(extra_flags.bits() as i32)
        .open(path)?;
    let mut bytes = 0u64;
    let start = Instant::now();
    let written = loop {
        if start.elapsed() >= budget {
            break Ok(());
        }
        if let Err(err) = file.write_all(chunk) {
            break Err(err);
        }
        bytes += chunk.len() as u64;
    };
    let took = start.elapsed();
    drop(file);
    std::fs::remove_file(path)?;
    written.map(|()| (bytes, took))
}

/// A `len`-byte slice of `storage` whose address is `DIRECT_ALIGN`-aligned (`O_DIRECT` needs it).
fn aligned(storage: &mut Vec<u8>, len: usize) -> &[u8] {
    storage.clear();
    storage.resize(len + DIRECT_ALIGN, 0x5a);
    let start = storage.as_ptr().align_offset(DIRECT_ALIGN);
    storage.get(start..start + len).unwrap_or_default()
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

    let budget = Duration::from_secs_f64(args.seconds);
    let direct_chunk = args.chunk.div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
    let mut storage = Vec::new();
    match stream_round(
        &path,
        aligned(&mut storage, direct_chunk),
        rustix::fs::OFlags::DIRECT,
        budget,
    ) {
        Ok((bytes, took)) => println!(
            "direct sequential write (O_DIRECT, no sync): {:.1} MB/s",
            bytes as f64 / took.as_secs_f64() / 1e6
        ),
        // tmpfs and some other file systems refuse O_DIRECT: there is no device to measure.
        Err(err) => println!("direct sequential write: not measured ({err})"),
    }
    let (bytes, took) = stream_round(&path, &chunk, rustix::fs::OFlags::empty(), budget)?;
    println!(
        "page-cache write (buffered, never synced): {:.1} MB/s",
        bytes as f64 / took.as_secs_f64() / 1e6
    );
    Ok(())
}
