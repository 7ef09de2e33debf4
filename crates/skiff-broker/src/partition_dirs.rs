//! The partition directories of the data directory, and what Skiff may do with them.
//!
//! Every partition directory carries a marker, [`MARKER`]: the topic's name and ID and the
//! partition's index, written when the directory is created (or first opened by a version that
//! wrote none). Skiff deletes a directory only with proof that it created and deleted it: a
//! marker whose topic ID the metadata holds a tombstone for. Anything else found in the data
//! directory (an operator's backup, a partition of a topic the metadata does not know) is left
//! where it is, with a warning.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use skiff_protocol::Uuid;

/// The marker file in every partition directory.
pub const MARKER: &str = "skiff-partition.json";

/// What a partition directory's marker says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    pub topic: String,
    /// Kafka's 22-character text form.
    pub topic_id: String,
    pub partition: i32,
}

impl Marker {
    pub fn new(topic: &str, topic_id: Uuid, partition: i32) -> Marker {
        Marker {
            topic: topic.to_owned(),
            topic_id: topic_id.to_string(),
            partition,
        }
    }

    /// The topic ID, or an error naming the directory when the marker's is not one.
    pub fn id(&self, dir: &Path) -> Result<Uuid> {
        self.topic_id.parse().map_err(|e| {
            anyhow::anyhow!(
                "{}: bad topic ID {:?} in {MARKER}: {e}",
                dir.display(),
                self.topic_id
            )
        })
    }
}

/// The marker of `dir`: `None` when it has none; an error when it cannot be read or parsed.
pub fn read_marker(dir: &Path) -> Result<Option<Marker>> {
    let path = dir.join(MARKER);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .with_context(|| format!("{} is damaged", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Writes `dir`'s marker (crash-safe replace).
pub fn write_marker(dir: &Path, marker: &Marker) -> Result<()> {
    let json = serde_json::to_vec_pretty(marker).context("encoding a partition marker")?;
    crate::node_file::write_atomically(&dir.join(MARKER), &json)
}

/// Whether [`create`] syncs what it writes, or leaves that to one [`sync_file_system`] after
/// many partitions were created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    Synced,
    Deferred,
}

/// Creates a partition directory with its marker; with [`Durability::Synced`] the marker and
/// the directory entry are synced, so the partition survives a crash with its name.
pub fn create(data_dir: &Path, dir: &Path, marker: &Marker, durability: Durability) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    if durability == Durability::Deferred {
        let json = serde_json::to_vec_pretty(marker).context("encoding a partition marker")?;
        let path = dir.join(MARKER);
        return std::fs::write(&path, json).with_context(|| format!("writing {}", path.display()));
    }
    write_marker(dir, marker)?;
    std::fs::File::open(data_dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing directory {}", data_dir.display()))
}

/// Makes everything written to the file system holding `dir` durable (`syncfs`): one call
/// after creating many partitions instead of several fsyncs for each.
pub fn sync_file_system(dir: &Path) -> Result<()> {
    let handle = std::fs::File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
    rustix::fs::syncfs(&handle).with_context(|| format!("syncfs of {}", dir.display()))
}

/// A directory of the data directory that holds, or looks like it holds, a partition.
#[derive(Debug)]
pub struct Found {
    pub dir: PathBuf,
    /// The directory's name.
    pub name: String,
    pub marker: Option<Marker>,
}

/// The directory name of partition `index` of `topic` (`<topic>-<index>`, Kafka's layout);
/// [`parse_name`] reads it back.
pub fn dir_name(topic: &str, index: i32) -> String {
    format!("{topic}-{index}")
}

/// `<topic>-<index>`: the name a partition directory has, as (topic, index).
pub fn parse_name(name: &str) -> Option<(&str, i32)> {
    let (topic, index) = name.rsplit_once('-')?;
    if topic.is_empty() || index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((topic, index.parse().ok()?))
}

/// Every directory of `data_dir` with a marker, or named like a partition and holding a log
/// segment (what a version without markers left).
pub fn scan(data_dir: &Path) -> Result<Vec<Found>> {
    let mut found = Vec::new();
    let entries =
        std::fs::read_dir(data_dir).with_context(|| format!("listing {}", data_dir.display()))?;
    for entry in entries.flatten() {
        let dir = entry.path();
        if !dir.is_dir() {
            continue;
        }
        let Some(name) = dir.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
            continue;
        };
        let marker = read_marker(&dir)?;
        if marker.is_some() || (parse_name(&name).is_some() && holds_a_segment(&dir)) {
            found.push(Found { dir, name, marker });
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

fn holds_a_segment(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.path().extension().is_some_and(|x| x == "log"))
    })
}

/// The topics a data directory's partition directories describe, as (name, ID, partitions):
/// what `--rebuild-metadata` registers when the metadata file is lost. Directories without a
/// marker get a fresh ID per topic name.
pub fn topics_on_disk(found: &[Found]) -> Result<Vec<(String, Uuid, i32)>> {
    let mut topics: BTreeMap<String, (Option<Uuid>, i32)> = BTreeMap::new();
    for f in found {
        let (topic, index, id) = match &f.marker {
            Some(m) => (m.topic.clone(), m.partition, Some(m.id(&f.dir)?)),
            None => match parse_name(&f.name) {
                Some((topic, index)) => (topic.to_owned(), index, None),
                None => continue,
            },
        };
        let entry = topics.entry(topic.clone()).or_insert((id, 0));
        if let (Some(a), Some(b)) = (entry.0, id)
            && a != b
        {
            bail!(
                "{} belongs to topic {topic} with ID {b}, another directory to {topic} with ID {a}: move one away",
                f.dir.display()
            );
        }
        entry.0 = entry.0.or(id);
        entry.1 = entry.1.max(index.saturating_add(1));
    }
    topics
        .into_iter()
        .map(|(name, (id, partitions))| {
            let id = match id {
                Some(id) => id,
                None => Uuid::random().map_err(|e| anyhow::anyhow!("random topic ID: {e}"))?,
            };
            Ok((name, id, partitions))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_partition_directories() {
        assert_eq!(parse_name("orders-0"), Some(("orders", 0)));
        assert_eq!(parse_name("a-b-12"), Some(("a-b", 12)));
        assert_eq!(parse_name("backup-2026"), Some(("backup", 2026)));
        for not in ["orders", "-1", "orders-", "orders-x", "__groups"] {
            assert_eq!(parse_name(not), None, "{not}");
        }
    }

    #[test]
    fn only_marked_or_segment_holding_directories_are_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path();
        let id = Uuid::random().expect("random");
        create(
            data,
            &data.join("t-0"),
            &Marker::new("t", id, 0),
            Durability::Synced,
        )
        .expect("create");
        // A version without markers left this one.
        std::fs::create_dir(data.join("t-1")).expect("mkdir");
        std::fs::write(data.join("t-1/00000000000000000000.log"), b"").expect("write");
        // An operator's backup: named like a partition, but no marker and no segment.
        std::fs::create_dir(data.join("backup-2026")).expect("mkdir");
        std::fs::write(data.join("backup-2026/notes.txt"), b"mine").expect("write");
        std::fs::create_dir(data.join("__groups")).expect("mkdir");
        let found = scan(data).expect("scan");
        let names: Vec<_> = found.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["t-0", "t-1"]);
        assert_eq!(found[0].marker, Some(Marker::new("t", id, 0)));
        assert_eq!(found[1].marker, None);
        assert_eq!(
            topics_on_disk(&found).expect("topics"),
            vec![("t".to_owned(), id, 2)]
        );
    }

    #[test]
    fn a_damaged_marker_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("t-0")).expect("mkdir");
        std::fs::write(dir.path().join("t-0").join(MARKER), b"{not json").expect("write");
        let error = format!("{:#}", scan(dir.path()).expect_err("damaged"));
        assert!(error.contains(MARKER), "{error}");
    }

    #[test]
    fn two_ids_for_one_topic_name_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path();
        for (i, id) in [Uuid::random(), Uuid::random()].into_iter().enumerate() {
            let id = id.expect("random");
            let marker = Marker::new("t", id, i as i32);
            create(
                data,
                &data.join(format!("t-{i}")),
                &marker,
                Durability::Deferred,
            )
            .expect("create");
        }
        assert!(topics_on_disk(&scan(data).expect("scan")).is_err());
    }
}
