//! The subset of Kafka's message-schema format that the generator reads.

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

/// An inclusive version range; `lo > hi` is the empty range ("none").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versions {
    pub lo: i16,
    pub hi: i16,
}

impl Versions {
    pub const NONE: Versions = Versions { lo: 1, hi: 0 };

    pub fn parse(text: &str) -> Result<Versions> {
        let text = text.trim();
        if text == "none" {
            return Ok(Versions::NONE);
        }
        if let Some(lo) = text.strip_suffix('+') {
            return Ok(Versions {
                lo: lo.parse()?,
                hi: i16::MAX,
            });
        }
        if let Some((lo, hi)) = text.split_once('-') {
            return Ok(Versions {
                lo: lo.parse()?,
                hi: hi.parse()?,
            });
        }
        let v: i16 = text.parse().with_context(|| format!("version {text:?}"))?;
        Ok(Versions { lo: v, hi: v })
    }

    pub fn is_empty(self) -> bool {
        self.lo > self.hi
    }

    pub fn intersect(self, other: Versions) -> Versions {
        Versions {
            lo: self.lo.max(other.lo),
            hi: self.hi.min(other.hi),
        }
    }

    pub fn contains_all(self, other: Versions) -> bool {
        other.is_empty() || (self.lo <= other.lo && self.hi >= other.hi)
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawSchema {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub api_key: Option<i16>,
    pub valid_versions: String,
    pub flexible_versions: Option<String>,
    #[serde(default)]
    pub latest_version_unstable: bool,
    #[serde(default)]
    pub fields: Vec<RawField>,
    #[serde(default)]
    pub common_structs: Vec<RawStruct>,
}

#[derive(Debug, Deserialize)]
pub struct RawStruct {
    pub name: String,
    #[serde(default)]
    pub fields: Vec<RawField>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawField {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
    pub versions: Option<String>,
    pub nullable_versions: Option<String>,
    pub tagged_versions: Option<String>,
    pub tag: Option<u32>,
    pub default: Option<serde_json::Value>,
    pub flexible_versions: Option<String>,
    pub fields: Option<Vec<RawField>>,
}

/// Strips `//` line comments (outside strings) so the files parse as JSON.
pub fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_string = false;
        let mut escaped = false;
        let mut cut = line.len();
        let bytes = line.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            if in_string {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_string = false;
                }
            } else if b == b'"' {
                in_string = true;
            } else if b == b'/' && bytes.get(i + 1) == Some(&b'/') {
                cut = i;
                break;
            }
        }
        out.push_str(&line[..cut]);
        out.push('\n');
    }
    out
}

pub fn load(path: &Path) -> Result<RawSchema> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path:?}"))?;
    let schema: RawSchema = serde_json::from_str(&strip_comments(&text))
        .with_context(|| format!("parsing {path:?}"))?;
    if !matches!(
        schema.kind.as_str(),
        "request" | "response" | "header" | "data"
    ) {
        bail!("{path:?}: unknown message type {:?}", schema.kind);
    }
    Ok(schema)
}
