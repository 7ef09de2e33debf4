//! The log-start-offset checkpoint: a tiny file replaced atomically.
//!
//! Layout: magic `SKLS`, format version (u16), log start offset (i64), CRC-32C of the preceding
//! bytes (u32), all big-endian. It is written to a temporary file, fsync'ed, renamed over the old
//! one, and the directory is fsync'ed so the rename itself survives a crash.

use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::path::Path;

use crate::error::{IoContext, LogError, Result};

pub(crate) const CHECKPOINT_FILE: &str = "log-start-offset.checkpoint";
const MAGIC: [u8; 4] = *b"SKLS";
const VERSION: u16 = 1;
const LEN: usize = 4 + 2 + 8 + 4;

fn encode(log_start_offset: i64) -> [u8; LEN] {
    let mut out = [0u8; LEN];
    let (head, crc) = out.split_at_mut(LEN - 4);
    let (magic, rest) = head.split_at_mut(4);
    let (version, offset) = rest.split_at_mut(2);
    magic.copy_from_slice(&MAGIC);
    version.copy_from_slice(&VERSION.to_be_bytes());
    offset.copy_from_slice(&log_start_offset.to_be_bytes());
    crc.copy_from_slice(&crc32c::crc32c(head).to_be_bytes());
    out
}

/// Reads the checkpoint in `dir`; `Ok(None)` if there is none yet.
pub(crate) fn read(dir: &Path) -> Result<Option<i64>> {
    let path = dir.join(CHECKPOINT_FILE);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err).io("read checkpoint", &path),
    };
    let corrupt = |reason| LogError::CorruptCheckpoint {
        path: path.clone(),
        reason,
    };
    let fields: &[u8; LEN] = bytes
        .as_slice()
        .try_into()
        .map_err(|_| corrupt("wrong length"))?;
    let (head, crc) = fields.split_at(LEN - 4);
    let (magic, rest) = head.split_at(4);
    let (version, offset) = rest.split_at(2);
    if magic != MAGIC {
        return Err(corrupt("bad magic"));
    }
    let stored_crc = u32::from_be_bytes(crc.try_into().map_err(|_| corrupt("short crc"))?);
    if stored_crc != crc32c::crc32c(head) {
        return Err(corrupt("CRC mismatch"));
    }
    if u16::from_be_bytes(version.try_into().map_err(|_| corrupt("short version"))?) != VERSION {
        return Err(corrupt("unknown version"));
    }
    let offset = i64::from_be_bytes(offset.try_into().map_err(|_| corrupt("short offset"))?);
    if offset < 0 {
        return Err(corrupt("negative offset"));
    }
    Ok(Some(offset))
}

/// Replaces the checkpoint in `dir` crash-safely.
pub(crate) fn write(dir: &Path, log_start_offset: i64) -> Result<()> {
    let path = dir.join(CHECKPOINT_FILE);
    let tmp = dir.join(format!("{CHECKPOINT_FILE}.tmp"));
    let mut file = File::create(&tmp).io("create checkpoint", &tmp)?;
    file.write_all(&encode(log_start_offset))
        .io("write checkpoint", &tmp)?;
    crate::faults::check(crate::faults::Fault::Sync, &tmp)
        .and_then(|()| file.sync_all())
        .io("fsync checkpoint", &tmp)?;
    drop(file);
    crate::faults::check(crate::faults::Fault::Rename, &path)
        .and_then(|()| fs::rename(&tmp, &path))
        .io("rename checkpoint", &path)?;
    sync_dir(dir)
}

/// Makes directory entries (created, renamed, removed files) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|handle| handle.sync_all())
        .io("fsync directory", dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        write(dir.path(), 1234).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(1234));
        write(dir.path(), 99_999).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(99_999));

        let path = dir.path().join(CHECKPOINT_FILE);
        let mut bytes = fs::read(&path).unwrap();
        bytes[8] ^= 0xff;
        fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            read(dir.path()),
            Err(LogError::CorruptCheckpoint { .. })
        ));
        fs::write(&path, b"short").unwrap();
        assert!(matches!(
            read(dir.path()),
            Err(LogError::CorruptCheckpoint { .. })
        ));
    }
}
