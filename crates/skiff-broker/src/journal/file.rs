//! The journal's file in the data directory, `client-journal.log`: a header line naming the
//! format and its version, then one event per line, `CRC32C(json) as 8 hex digits`, a space,
//! the event as JSON with its instance. New events are appended; when the file holds twice
//! the journal's total bound it is rewritten from the journal (temporary file, fsync, rename).
//!
//! Reading never fails the broker: a file that is not a journal, a line that is torn (a crash
//! mid-append), corrupt (its CRC does not match) or unreadable is skipped and counted, and
//! the caller warns once. Decoding is pure ([`decode`]); the I/O is [`load`], [`append`] and
//! [`rewrite`].

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use skiff_protocol::Uuid;

use super::events::Event;

pub const FILE_NAME: &str = "client-journal.log";
const HEADER: &str = "skiff-client-journal 1";

/// One line's JSON: the event and whose it is.
#[derive(Serialize, Deserialize)]
struct Stored<'a> {
    instance: String,
    #[serde(flatten)]
    event: std::borrow::Cow<'a, Event>,
}

/// The header line that starts every journal file.
pub fn header() -> String {
    format!("{HEADER}\n")
}

/// `event` of `instance` as one line of the file (with its newline).
pub fn encode_line(instance: Uuid, event: &Event) -> Option<String> {
    let stored = Stored {
        instance: instance.to_string(),
        event: std::borrow::Cow::Borrowed(event),
    };
    let json = serde_json::to_string(&stored).ok()?;
    Some(format!("{:08x} {json}\n", crc32c::crc32c(json.as_bytes())))
}

/// What a file held.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    pub entries: Vec<(Uuid, Event)>,
    /// Lines that were torn, corrupt or unreadable (a file that is not a journal: all of it).
    pub skipped: usize,
    /// The file does not start with the journal's header.
    pub foreign: bool,
}

/// The events of a journal file's bytes, in file order; whatever is damaged is skipped.
pub fn decode(bytes: &[u8]) -> Decoded {
    let mut lines = bytes.split(|b| *b == b'\n');
    let mut decoded = Decoded::default();
    match lines.next() {
        None | Some(b"") if bytes.is_empty() => return decoded,
        Some(first) if first == HEADER.as_bytes() => {}
        _ => {
            decoded.foreign = true;
            decoded.skipped = bytes
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .count();
            return decoded;
        }
    }
    let last = bytes.last().copied();
    let mut lines = lines.peekable();
    while let Some(line) = lines.next() {
        if line.is_empty() {
            continue;
        }
        // The last line without its newline was torn by a crash mid-append.
        let torn = lines.peek().is_none() && last != Some(b'\n');
        match (!torn).then(|| decode_line(line)).flatten() {
            Some(entry) => decoded.entries.push(entry),
            None => decoded.skipped += 1,
        }
    }
    decoded
}

fn decode_line(line: &[u8]) -> Option<(Uuid, Event)> {
    let crc = line.get(..8)?;
    if line.get(8) != Some(&b' ') {
        return None;
    }
    let json = line.get(9..)?;
    let crc = u32::from_str_radix(std::str::from_utf8(crc).ok()?, 16).ok()?;
    if crc != crc32c::crc32c(json) {
        return None;
    }
    let stored: Stored<'static> = serde_json::from_slice(json).ok()?;
    let instance = stored.instance.parse::<Uuid>().ok()?;
    Some((instance, stored.event.into_owned()))
}

/// Reads the journal file in `dir` (at most `limit` bytes of it); a missing file is an empty
/// journal, and one that cannot be read is skipped with a warning.
pub fn load(dir: &Path, limit: u64) -> Decoded {
    let path = dir.join(FILE_NAME);
    let mut bytes = Vec::new();
    let read = std::fs::File::open(&path).and_then(|f| f.take(limit).read_to_end(&mut bytes));
    match read {
        Ok(_) => decode(&bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Decoded::default(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "the client journal cannot be read; starting an empty one");
            Decoded {
                foreign: true,
                ..Decoded::default()
            }
        }
    }
}

/// Appends lines to the journal file in `dir`.
pub fn append(dir: &Path, lines: &[String]) -> std::io::Result<()> {
    let mut file = OpenOptions::new().append(true).open(dir.join(FILE_NAME))?;
    let mut buffer = Vec::with_capacity(lines.iter().map(String::len).sum());
    for line in lines {
        buffer.extend_from_slice(line.as_bytes());
    }
    file.write_all(&buffer)
}

/// Replaces the journal file in `dir` with the header and `lines`, crash-safely.
pub fn rewrite(dir: &Path, lines: &[String]) -> anyhow::Result<()> {
    let mut contents = header().into_bytes();
    for line in lines {
        contents.extend_from_slice(line.as_bytes());
    }
    crate::node_file::write_atomically(&dir.join(FILE_NAME), &contents)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::events::{DisconnectReason, EventKind};

    fn event(seq: u64) -> Event {
        Event {
            seq,
            at_ms: 1000 + seq as i64,
            kind: EventKind::Disconnected {
                connection: seq,
                reason: DisconnectReason::Error,
                detail: "read error".into(),
            },
        }
    }

    fn file_of(events: &[(Uuid, Event)]) -> Vec<u8> {
        let mut bytes = header().into_bytes();
        for (id, e) in events {
            bytes.extend_from_slice(encode_line(*id, e).expect("encodes").as_bytes());
        }
        bytes
    }

    #[test]
    fn lines_round_trip() {
        let a = Uuid::from_u128(5);
        let events = vec![(a, event(1)), (Uuid::from_u128(6), event(2)), (a, event(3))];
        let decoded = decode(&file_of(&events));
        assert_eq!(decoded.entries, events);
        assert_eq!((decoded.skipped, decoded.foreign), (0, false));
        assert_eq!(decode(b""), Decoded::default());
        assert_eq!(decode(header().as_bytes()), Decoded::default());
    }

    #[test]
    fn a_torn_tail_is_skipped() {
        let a = Uuid::from_u128(5);
        let bytes = file_of(&[(a, event(1)), (a, event(2))]);
        // Every cut inside the last line loses that line alone, never panics.
        let second = bytes.len() - encode_line(a, &event(2)).expect("line").len();
        for cut in second + 1..bytes.len() {
            let decoded = decode(bytes.get(..cut).expect("cut"));
            assert_eq!(decoded.entries, vec![(a, event(1))], "cut at {cut}");
            assert_eq!(decoded.skipped, 1);
        }
        // Any cut at all, anywhere: no panic, never more than was written.
        for cut in 0..bytes.len() {
            assert!(decode(bytes.get(..cut).expect("cut")).entries.len() <= 2);
        }
    }

    #[test]
    fn corrupt_lines_are_skipped_and_the_rest_kept() {
        let a = Uuid::from_u128(5);
        let bytes = file_of(&[(a, event(1)), (a, event(2)), (a, event(3))]);
        let first_line_end = header().len() + encode_line(a, &event(1)).expect("line").len();
        // Flip one bit inside the second line's JSON: its CRC no longer matches.
        let mut flipped = bytes.clone();
        if let Some(b) = flipped.get_mut(first_line_end + 20) {
            *b ^= 0x01;
        }
        let decoded = decode(&flipped);
        assert_eq!(decoded.entries, vec![(a, event(1)), (a, event(3))]);
        assert_eq!(decoded.skipped, 1);
        // Garbage lines, a line with a good CRC over bad JSON, an unknown event type.
        let bad_json = "{\"instance\": 1}";
        let unknown =
            "{\"instance\":\"AAAAAAAAAAAAAAAAAAAABQ\",\"seq\":9,\"at_ms\":1,\"type\":\"new_kind\"}";
        let mut text = String::from_utf8(bytes).expect("utf8");
        text.push_str("zzzz\n\n12345678 {}\n");
        text.push_str(&format!(
            "{:08x} {bad_json}\n",
            crc32c::crc32c(bad_json.as_bytes())
        ));
        text.push_str(&format!(
            "{:08x} {unknown}\n",
            crc32c::crc32c(unknown.as_bytes())
        ));
        text.push_str("\u{ff}\u{fe}\n");
        let decoded = decode(text.as_bytes());
        assert_eq!(decoded.entries.len(), 3);
        assert_eq!(decoded.skipped, 5);
    }

    #[test]
    fn a_foreign_file_is_skipped_whole() {
        let decoded = decode(b"not a journal\nline\n");
        assert!(decoded.foreign);
        assert!(decoded.entries.is_empty());
        assert_eq!(decoded.skipped, 2);
        assert!(decode(&[0xff, 0x00, 0x13]).foreign);
    }

    #[test]
    fn files_are_appended_rewritten_and_loaded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = Uuid::from_u128(5);
        assert_eq!(load(dir.path(), 1 << 20), Decoded::default());
        let lines: Vec<String> = (1..=3).filter_map(|s| encode_line(a, &event(s))).collect();
        rewrite(dir.path(), lines.get(..1).expect("one")).expect("rewrite");
        append(dir.path(), lines.get(1..).expect("rest")).expect("append");
        let decoded = load(dir.path(), 1 << 20);
        assert_eq!(decoded.entries.len(), 3);
        // A limit cuts the file: the cut line counts as torn.
        let decoded = load(dir.path(), 60);
        assert!(decoded.entries.len() < 3 && decoded.skipped <= 1);
    }
}
