//! The metadata file: a checksummed envelope around a JSON snapshot, replaced atomically.
//!
//! Layout (integers little-endian):
//!
//! | bytes | field                                                   |
//! |-------|---------------------------------------------------------|
//! | 8     | magic `SKIFFMD\n`                                       |
//! | 4     | format version (1)                                      |
//! | 8     | payload length                                          |
//! | 4     | CRC-32C of the 20 bytes above followed by the payload   |
//! | n     | payload: the JSON snapshot                              |
//!
//! A write goes to `<file>.tmp`, is fsynced, renamed over the file, and the directory is fsynced,
//! so after a crash the file holds either the previous or the new snapshot, never a mix; a stale
//! temp file is ignored and removed on the next open.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{MetaError, Result};

pub(crate) const MAGIC: [u8; 8] = *b"SKIFFMD\n";
pub(crate) const FORMAT_VERSION: u32 = 1;
pub(crate) const HEADER_LEN: usize = 24;
/// A snapshot larger than this is refused rather than read into memory.
pub(crate) const MAX_PAYLOAD: u64 = 1 << 30;

/// Encodes a payload into the on-disk envelope.
pub(crate) fn encode(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&out), payload);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Checks an envelope and returns its payload.
pub(crate) fn decode<'a>(path: &Path, bytes: &'a [u8]) -> Result<&'a [u8]> {
    let corrupt = |reason: String| MetaError::Corrupt {
        path: path.to_owned(),
        reason,
    };
    let (header, payload) = bytes.split_at_checked(HEADER_LEN).ok_or_else(|| {
        corrupt(format!(
            "{} bytes is shorter than the {HEADER_LEN}-byte header",
            bytes.len()
        ))
    })?;
    let field = |range: std::ops::Range<usize>| header.get(range).unwrap_or_default();
    if field(0..8) != MAGIC {
        return Err(corrupt(
            "bad magic number (not a Skiff metadata file)".into(),
        ));
    }
    let version = u32::from_le_bytes(array(field(8..12)));
    if version != FORMAT_VERSION {
        return Err(MetaError::UnsupportedVersion {
            path: path.to_owned(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let length = u64::from_le_bytes(array(field(12..20)));
    if length != payload.len() as u64 {
        return Err(corrupt(format!(
            "header says {length} payload bytes, file holds {} (truncated or torn write)",
            payload.len()
        )));
    }
    let stored = u32::from_le_bytes(array(field(20..24)));
    let computed = crc32c::crc32c_append(crc32c::crc32c(field(0..20)), payload);
    if stored != computed {
        return Err(corrupt(format!(
            "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
        )));
    }
    Ok(payload)
}

fn array<const N: usize>(slice: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = slice.get(..N) {
        out.copy_from_slice(src);
    }
    out
}

pub(crate) fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Reads the file's payload; `None` if it does not exist (a fresh directory).
pub(crate) fn read(path: &Path) -> Result<Option<Vec<u8>>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(MetaError::io(format!("opening {}", path.display()), e)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_PAYLOAD + HEADER_LEN as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| MetaError::io(format!("reading {}", path.display()), e))?;
    if bytes.len() as u64 > MAX_PAYLOAD + HEADER_LEN as u64 {
        return Err(MetaError::Corrupt {
            path: path.to_owned(),
            reason: format!("larger than the {MAX_PAYLOAD}-byte limit"),
        });
    }
    decode(path, &bytes).map(|payload| Some(payload.to_vec()))
}

/// Removes a temp file a crash left behind (it never holds committed state).
pub(crate) fn remove_stale_temp(path: &Path) -> Result<()> {
    let temp = temp_path(path);
    match fs::remove_file(&temp) {
        Ok(()) => {
            tracing::warn!(path = %temp.display(), "removed an uncommitted metadata temp file");
            Ok(())
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(MetaError::io(format!("removing {}", temp.display()), e)),
    }
}

/// Replaces the file with a new payload crash-safely: temp file, fsync, rename, fsync directory.
pub(crate) fn write_atomically(path: &Path, payload: &[u8]) -> Result<()> {
    let temp = temp_path(path);
    let bytes = encode(payload);
    let ctx = |what: &str, p: &Path| format!("{what} {}", p.display());
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temp)
        .map_err(|e| MetaError::io(ctx("creating", &temp), e))?;
    file.write_all(&bytes)
        .map_err(|e| MetaError::io(ctx("writing", &temp), e))?;
    file.sync_all()
        .map_err(|e| MetaError::io(ctx("syncing", &temp), e))?;
    drop(file);
    fs::rename(&temp, path).map_err(|e| MetaError::io(ctx("renaming into", path), e))?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| MetaError::io(format!("syncing directory {}", dir.display()), e))
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> Result<()> {
    // Directories cannot be opened for syncing on this platform; the rename is still atomic.
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let bytes = encode(b"{\"a\":1}");
        assert_eq!(decode(Path::new("f"), &bytes).ok(), Some(&b"{\"a\":1}"[..]));
    }

    #[test]
    fn every_truncation_and_every_bit_flip_is_detected() {
        let bytes = encode(b"{\"topics\":[]}");
        for len in 0..bytes.len() {
            assert!(
                decode(Path::new("f"), &bytes[..len]).is_err(),
                "truncated to {len}"
            );
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut copy = bytes.clone();
                copy[i] ^= 1 << bit;
                assert!(decode(Path::new("f"), &copy).is_err(), "byte {i} bit {bit}");
            }
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(Path::new("f"), &longer).is_err());
    }

    #[test]
    fn version_is_reported() {
        let mut bytes = encode(b"{}");
        bytes[8] = 9;
        assert!(matches!(
            decode(Path::new("f"), &bytes),
            Err(MetaError::UnsupportedVersion { found: 9, .. })
        ));
    }
}
