//! Project automation.
//!
//! `cargo xtask codegen [--schemas DIR] [--check]` reads Kafka's JSON message schemas (by default
//! `../shared/kafka-message-schemas` beside the workspace) and writes the Rust message codecs into
//! `crates/skiff-protocol/src/generated/`. With `--check` it writes nothing and fails when the
//! committed files differ from what the schemas produce.
//!
//! Only names, types and versions are taken from the schemas; their prose stays there.

mod codegen;
mod schema;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(command) = args.next() else {
        bail!("usage: cargo xtask codegen [--schemas DIR] [--check]");
    };
    match command.as_str() {
        "codegen" => {
            let mut schemas: Option<PathBuf> = None;
            let mut check = false;
            while let Some(arg) = args.next() {
                match arg.as_str() {
                    "--check" => check = true,
                    "--schemas" => {
                        schemas = Some(args.next().context("--schemas needs a directory")?.into())
                    }
                    "--help" | "-h" => {
                        println!("usage: cargo xtask codegen [--schemas DIR] [--check]");
                        return Ok(());
                    }
                    other => bail!("unknown argument {other:?}"),
                }
            }
            let root = workspace_root();
            let schemas = schemas.unwrap_or_else(|| root.join("../shared/kafka-message-schemas"));
            let out = root.join("crates/skiff-protocol/src/generated");
            codegen::run(&schemas, &out, check)
        }
        other => bail!("unknown command {other:?}; known: codegen"),
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}
