//! Turns Kafka message schemas into Rust structs with bounded, zero-copy `decode` and `encode`.
//!
//! Semantics follow Kafka's own generator (`MessageDataGenerator`): a field is read and written
//! only in its versions; nullable only in its nullable versions; tagged fields go in the tagged
//! section of flexible versions and are written only when they differ from their default; unknown
//! tagged fields are kept and written back. One difference: writing a message whose field is set
//! for a version that lacks it silently leaves that field out (Kafka throws for non-ignorable ones).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::schema::{self, RawField, RawSchema, Versions};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prim {
    I8,
    I16,
    U16,
    I32,
    U32,
    I64,
    F64,
    Bool,
    Uuid,
    String,
    Bytes,
    Records,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Ty {
    Prim(Prim),
    Struct(String),
    Array(Box<Ty>),
}

fn parse_ty(text: &str) -> Result<Ty> {
    if let Some(inner) = text.strip_prefix("[]") {
        let inner = parse_ty(inner)?;
        if matches!(inner, Ty::Array(_)) {
            bail!("arrays of arrays are not part of the Kafka protocol: {text}");
        }
        return Ok(Ty::Array(Box::new(inner)));
    }
    Ok(match text {
        "int8" => Ty::Prim(Prim::I8),
        "int16" => Ty::Prim(Prim::I16),
        "uint16" => Ty::Prim(Prim::U16),
        "int32" => Ty::Prim(Prim::I32),
        "uint32" => Ty::Prim(Prim::U32),
        "int64" => Ty::Prim(Prim::I64),
        "float64" => Ty::Prim(Prim::F64),
        "bool" => Ty::Prim(Prim::Bool),
        "uuid" => Ty::Prim(Prim::Uuid),
        "string" => Ty::Prim(Prim::String),
        "bytes" => Ty::Prim(Prim::Bytes),
        "records" => Ty::Prim(Prim::Records),
        other if other.chars().next().is_some_and(char::is_uppercase) => {
            Ty::Struct(other.to_string())
        }
        other => bail!("unknown field type {other:?}"),
    })
}

struct Field {
    schema_name: String,
    rust_name: String,
    ty: Ty,
    /// The versions the field is present in, within the message's valid versions.
    present: Versions,
    /// The versions the field may be null in, within `present`.
    nullable: Versions,
    tag: Option<u32>,
    default: Option<String>,
    /// Strings of this field never use the compact encoding (RequestHeader's ClientId).
    never_compact: bool,
}

struct StructDef {
    name: String,
    fields: Vec<Field>,
}

struct Msg {
    file_stem: String,
    module: String,
    raw_name: String,
    kind: String,
    api_key: Option<i16>,
    valid: Versions,
    flexible: Versions,
    latest_unstable: bool,
    structs: Vec<StructDef>,
}

pub fn run(schemas: &Path, out: &Path, check: bool) -> Result<()> {
    let mut paths: Vec<_> = std::fs::read_dir(schemas)
        .with_context(|| format!("reading schema directory {schemas:?}"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    if paths.is_empty() {
        bail!("no schemas in {schemas:?}");
    }

    let mut messages = Vec::new();
    for path in &paths {
        let raw = schema::load(path)?;
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .context("schema file name")?
            .to_string();
        messages.push(build_msg(&stem, raw).with_context(|| format!("in {path:?}"))?);
    }

    let mut files: BTreeMap<String, String> = BTreeMap::new();
    for msg in &messages {
        files.insert(format!("{}.rs", msg.module), emit_message(msg)?);
    }
    files.insert("api.rs".into(), emit_api(&messages)?);
    files.insert("mod.rs".into(), emit_mod(&messages));

    let staging = out.with_file_name("generated.staging");
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging)?;
    for (name, text) in &files {
        std::fs::write(staging.join(name), text)?;
    }
    rustfmt(&staging, files.keys())?;

    if check {
        let mut differs = Vec::new();
        for name in files.keys() {
            let fresh = std::fs::read(staging.join(name))?;
            let committed = std::fs::read(out.join(name)).unwrap_or_default();
            if fresh != committed {
                differs.push(name.clone());
            }
        }
        if let Ok(entries) = std::fs::read_dir(out) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().to_string();
                if !files.contains_key(&name) {
                    differs.push(format!("{name} (stale)"));
                }
            }
        }
        std::fs::remove_dir_all(&staging)?;
        if !differs.is_empty() {
            bail!(
                "generated code is out of date; run `cargo xtask codegen`: {}",
                differs.join(", ")
            );
        }
        println!("generated code is up to date ({} files)", files.len());
        return Ok(());
    }

    let _ = std::fs::remove_dir_all(out);
    std::fs::rename(&staging, out)?;
    println!("wrote {} files to {}", files.len(), out.display());
    Ok(())
}

fn rustfmt<'a>(dir: &Path, names: impl Iterator<Item = &'a String>) -> Result<()> {
    let status = Command::new("rustfmt")
        .arg("--edition")
        .arg("2024")
        .args(names.map(|n| dir.join(n)))
        .status()
        .context("running rustfmt")?;
    if !status.success() {
        bail!("rustfmt failed on the generated code");
    }
    Ok(())
}

// ----------------------------------------------------------------------------------------------
// Model

fn build_msg(stem: &str, raw: RawSchema) -> Result<Msg> {
    let valid = Versions::parse(&raw.valid_versions)?;
    let flexible = match &raw.flexible_versions {
        Some(f) => Versions::parse(f)?,
        None => Versions::NONE,
    };
    let mut structs = Vec::new();
    let top_fields = build_fields(&raw.fields, valid, &mut structs)?;
    structs.insert(
        0,
        StructDef {
            name: raw.name.clone(),
            fields: top_fields,
        },
    );
    for common in &raw.common_structs {
        let fields = build_fields(&common.fields, valid, &mut structs)?;
        structs.push(StructDef {
            name: common.name.clone(),
            fields,
        });
    }
    let mut seen = std::collections::HashSet::new();
    for s in &structs {
        if !seen.insert(s.name.clone()) {
            bail!("struct {} defined twice", s.name);
        }
    }
    Ok(Msg {
        file_stem: stem.to_string(),
        module: snake_case(&raw.name),
        raw_name: raw.name,
        kind: raw.kind,
        api_key: raw.api_key,
        valid,
        flexible,
        latest_unstable: raw.latest_version_unstable,
        structs,
    })
}

fn build_fields(
    raw: &[RawField],
    valid: Versions,
    structs: &mut Vec<StructDef>,
) -> Result<Vec<Field>> {
    let mut fields = Vec::new();
    for f in raw {
        let ty = parse_ty(&f.ty).with_context(|| format!("field {}", f.name))?;
        let versions = Versions::parse(f.versions.as_deref().unwrap_or("0+"))?;
        let present = versions.intersect(valid);
        let nullable = match &f.nullable_versions {
            Some(n) => Versions::parse(n)?.intersect(present),
            None => Versions::NONE,
        };
        if let Some(tagged) = &f.tagged_versions
            && Versions::parse(tagged)? != versions
        {
            bail!("field {}: tagged in only some of its versions", f.name);
        }
        let default = match &f.default {
            None => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(other) => Some(other.to_string()),
        };
        let never_compact = match &f.flexible_versions {
            Some(v) => Versions::parse(v)?.is_empty(),
            None => false,
        };
        if let Some(inner) = &f.fields {
            let struct_name = match &ty {
                Ty::Struct(n) => n.clone(),
                Ty::Array(inner_ty) => match inner_ty.as_ref() {
                    Ty::Struct(n) => n.clone(),
                    _ => bail!("field {} has sub-fields but is not a struct", f.name),
                },
                Ty::Prim(_) => bail!("field {} has sub-fields but is not a struct", f.name),
            };
            let inner_fields = build_fields(inner, valid, structs)?;
            structs.push(StructDef {
                name: struct_name,
                fields: inner_fields,
            });
        }
        fields.push(Field {
            schema_name: f.name.clone(),
            rust_name: field_ident(&f.name),
            ty,
            present,
            nullable,
            tag: f.tag,
            default,
            never_compact,
        });
    }
    Ok(fields)
}

pub fn snake_case(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() {
            let prev = if i > 0 { chars.get(i - 1) } else { None };
            let next = chars.get(i + 1);
            let boundary = match prev {
                None => false,
                Some(p) if p.is_lowercase() || p.is_ascii_digit() => true,
                Some(p) if p.is_uppercase() => next.is_some_and(|n| n.is_lowercase()),
                _ => false,
            };
            if boundary {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

fn field_ident(name: &str) -> String {
    let snake = snake_case(name);
    const KEYWORDS: &[&str] = &[
        "as", "break", "const", "continue", "crate", "else", "enum", "extern", "false", "fn",
        "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref",
        "return", "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where",
        "while", "async", "await", "dyn", "abstract", "become", "box", "do", "final", "macro",
        "override", "priv", "typeof", "unsized", "virtual", "yield", "try", "gen",
    ];
    if KEYWORDS.contains(&snake.as_str()) {
        format!("r#{snake}")
    } else {
        snake
    }
}

// ----------------------------------------------------------------------------------------------
// Emission helpers

/// A version condition relative to the range the code runs in.
enum Cond {
    Always,
    Never,
    Expr(String),
}

fn cond(range: Versions, within: Versions) -> Cond {
    let r = range.intersect(within);
    if r.is_empty() {
        Cond::Never
    } else if r.contains_all(within) {
        Cond::Always
    } else if r.hi >= within.hi {
        Cond::Expr(format!("version >= {}", r.lo))
    } else if r.lo <= within.lo {
        Cond::Expr(format!("version <= {}", r.hi))
    } else {
        Cond::Expr(format!("({}..={}).contains(&version)", r.lo, r.hi))
    }
}

fn guard(c: &Cond, body: &str) -> String {
    match c {
        Cond::Always => format!("{body}\n"),
        Cond::Never => String::new(),
        Cond::Expr(e) => format!("if {e} {{ {body} }}\n"),
    }
}

impl Field {
    /// The local variable holding this field while its structure is decoded (prefixed, so no
    /// field can shadow `buf`, `version` or `flexible`).
    fn local(&self) -> String {
        format!("f_{}", self.rust_name.trim_start_matches("r#"))
    }

    fn nullable_any(&self) -> bool {
        !self.nullable.is_empty()
    }

    fn compact(&self) -> &'static str {
        if self.never_compact {
            "false"
        } else {
            "flexible"
        }
    }

    fn rust_type(&self) -> Result<String> {
        let base = base_type(&self.ty)?;
        Ok(
            if self.nullable_any() || self.ty == Ty::Prim(Prim::Records) {
                format!("Option<{base}>")
            } else {
                base
            },
        )
    }

    fn is_option(&self) -> bool {
        self.nullable_any() || self.ty == Ty::Prim(Prim::Records)
    }

    fn default_expr(&self) -> Result<String> {
        let d = self.default.as_deref();
        let is_null = d == Some("null");
        Ok(match &self.ty {
            Ty::Prim(p) => match p {
                Prim::I8 | Prim::I16 | Prim::U16 | Prim::I32 | Prim::U32 | Prim::I64 => {
                    int_literal(d.unwrap_or("0"))?
                }
                Prim::F64 => {
                    let v: f64 = d.unwrap_or("0").parse().context("float default")?;
                    format!("{v:?}")
                }
                Prim::Bool => match d.map(str::to_ascii_lowercase).as_deref() {
                    None | Some("false") => "false".into(),
                    Some("true") => "true".into(),
                    Some(other) => bail!("bool default {other:?}"),
                },
                Prim::Uuid => "Uuid::ZERO".into(),
                Prim::String => {
                    if self.is_option() && is_null {
                        "None".into()
                    } else {
                        let s = format!("ByteString::from_static({:?})", d.unwrap_or(""));
                        if self.is_option() {
                            format!("Some({s})")
                        } else {
                            s
                        }
                    }
                }
                Prim::Bytes => {
                    if self.is_option() && is_null {
                        "None".into()
                    } else if self.is_option() {
                        "Some(Bytes::new())".into()
                    } else {
                        "Bytes::new()".into()
                    }
                }
                Prim::Records => "None".into(),
            },
            Ty::Array(_) => {
                if self.is_option() && is_null {
                    "None".into()
                } else if self.is_option() {
                    "Some(Vec::new())".into()
                } else {
                    "Vec::new()".into()
                }
            }
            Ty::Struct(name) => {
                if self.is_option() && is_null {
                    "None".into()
                } else if self.is_option() {
                    format!("Some({name}::default())")
                } else {
                    format!("{name}::default()")
                }
            }
        })
    }

    /// An expression (using `?`) reading this field at `version`.
    fn read_expr(&self) -> Result<String> {
        let c = self.compact();
        let nullable = cond(self.nullable, self.present);
        let pick = |nullable_read: String, strict_read: String| -> String {
            match &nullable {
                Cond::Always => nullable_read,
                Cond::Never => {
                    if self.is_option() {
                        format!("Some({strict_read})")
                    } else {
                        strict_read
                    }
                }
                Cond::Expr(e) => {
                    format!("if {e} {{ {nullable_read} }} else {{ Some({strict_read}) }}")
                }
            }
        };
        Ok(match &self.ty {
            Ty::Prim(Prim::String) => pick(
                format!("read_nullable_string(buf, {c})?"),
                format!("read_string(buf, {c})?"),
            ),
            Ty::Prim(Prim::Bytes) | Ty::Prim(Prim::Records) => pick(
                format!("read_nullable_bytes(buf, {c})?"),
                format!("read_bytes(buf, {c})?"),
            ),
            Ty::Prim(p) => format!("{}(buf)?", prim_reader(*p)?),
            Ty::Array(elem) => {
                let elem = elem_reader(elem, c)?;
                pick(
                    format!("read_nullable_array(buf, {c}, {elem})?"),
                    format!("read_array(buf, {c}, {elem})?"),
                )
            }
            Ty::Struct(name) => pick(
                format!("read_nullable_struct(buf, |buf| {name}::decode(buf, version))?"),
                format!("{name}::decode(buf, version)?"),
            ),
        })
    }

    /// An expression making a random value of this field that is valid at `version`.
    fn random_expr(&self) -> Result<String> {
        let value = match &self.ty {
            Ty::Prim(Prim::Records) | Ty::Prim(Prim::Bytes) => "rng.bytes()".to_string(),
            Ty::Prim(Prim::String) => "rng.string()".to_string(),
            Ty::Prim(Prim::Uuid) => "rng.uuid()".to_string(),
            Ty::Prim(Prim::Bool) => "rng.bool()".to_string(),
            Ty::Prim(Prim::F64) => "rng.f64()".to_string(),
            Ty::Prim(p) => format!("rng.next_u64() as {}", base_type(&Ty::Prim(*p))?),
            Ty::Array(elem) => {
                let item = match elem.as_ref() {
                    Ty::Struct(name) => {
                        format!("<{name} as crate::testing::Random>::random(rng, version)")
                    }
                    Ty::Prim(Prim::String) => "rng.string()".to_string(),
                    Ty::Prim(Prim::Bytes) | Ty::Prim(Prim::Records) => "rng.bytes()".to_string(),
                    Ty::Prim(Prim::Uuid) => "rng.uuid()".to_string(),
                    Ty::Prim(Prim::Bool) => "rng.bool()".to_string(),
                    Ty::Prim(Prim::F64) => "rng.f64()".to_string(),
                    Ty::Prim(p) => format!("rng.next_u64() as {}", base_type(&Ty::Prim(*p))?),
                    Ty::Array(_) => bail!("nested arrays"),
                };
                format!("(0..rng.below(4)).map(|_| {item}).collect()")
            }
            Ty::Struct(name) => {
                format!("<{name} as crate::testing::Random>::random(rng, version)")
            }
        };
        if !self.is_option() {
            return Ok(value);
        }
        Ok(match cond(self.nullable, self.present) {
            Cond::Always => format!("if rng.below(4) == 0 {{ None }} else {{ Some({value}) }}"),
            Cond::Never => format!("Some({value})"),
            Cond::Expr(e) => {
                format!("if {e} && rng.below(4) == 0 {{ None }} else {{ Some({value}) }}")
            }
        })
    }

    /// Statements writing this field at `version`.
    fn write_stmt(&self) -> Result<String> {
        let c = self.compact();
        let f = format!("self.{}", self.rust_name);
        let null_err = format!("EncodeError::NullNotAllowed({:?})", self.schema_name);
        let nullable = cond(self.nullable, self.present);
        // (nullable writer taking an Option of a borrowed value, strict writer taking the value)
        let pick = |nullable_write: &dyn Fn(&str) -> String,
                    strict_write: &dyn Fn(&str) -> String,
                    borrow: &str|
         -> String {
            if !self.is_option() {
                return strict_write(&format!("&{f}"));
            }
            let opt = format!("{f}{borrow}");
            let strict = strict_write(&format!("{opt}.ok_or({null_err})?"));
            match &nullable {
                Cond::Always => nullable_write(&opt),
                Cond::Never => strict,
                Cond::Expr(e) => {
                    format!("if {e} {{ {} }} else {{ {strict} }}", nullable_write(&opt))
                }
            }
        };
        Ok(match &self.ty {
            Ty::Prim(Prim::String) => pick(
                &|v| format!("write_nullable_string(buf, {v}, {c})?;"),
                &|v| format!("write_string(buf, {v}, {c})?;"),
                ".as_deref()",
            ),
            // Record sets and bytes are written from their `Bytes` handle, so a chunked writer
            // can share them instead of copying.
            Ty::Prim(Prim::Bytes) | Ty::Prim(Prim::Records) => pick(
                &|v| format!("write_nullable_shared(buf, {v}, {c})?;"),
                &|v| format!("write_shared(buf, {v}, {c})?;"),
                ".as_ref()",
            ),
            Ty::Prim(p) => format!("{}(buf, {f});", prim_writer(*p)?),
            Ty::Array(elem) => {
                let elem = elem_writer(elem, c)?;
                pick(
                    &|v| format!("write_nullable_array(buf, {v}, {c}, {elem})?;"),
                    &|v| format!("write_array(buf, {v}, {c}, {elem})?;"),
                    ".as_deref()",
                )
            }
            Ty::Struct(_) => pick(
                &|v| format!("write_nullable_struct(buf, {v}, |buf, s| s.encode(buf, version))?;"),
                &|v| format!("({v}).encode(buf, version)?;"),
                ".as_ref()",
            ),
        })
    }
}

fn int_literal(text: &str) -> Result<String> {
    let text = text.trim();
    let (neg, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let value: i128 = if let Some(hex) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        i128::from_str_radix(hex, 16)?
    } else {
        digits.parse()?
    };
    Ok(if neg {
        format!("-{value}")
    } else {
        value.to_string()
    })
}

fn base_type(ty: &Ty) -> Result<String> {
    Ok(match ty {
        Ty::Prim(p) => match p {
            Prim::I8 => "i8",
            Prim::I16 => "i16",
            Prim::U16 => "u16",
            Prim::I32 => "i32",
            Prim::U32 => "u32",
            Prim::I64 => "i64",
            Prim::F64 => "f64",
            Prim::Bool => "bool",
            Prim::Uuid => "Uuid",
            Prim::String => "ByteString",
            Prim::Bytes | Prim::Records => "Bytes",
        }
        .to_string(),
        Ty::Struct(name) => name.clone(),
        Ty::Array(inner) => format!("Vec<{}>", base_type(inner)?),
    })
}

fn prim_reader(p: Prim) -> Result<&'static str> {
    Ok(match p {
        Prim::I8 => "read_i8",
        Prim::I16 => "read_i16",
        Prim::U16 => "read_u16",
        Prim::I32 => "read_i32",
        Prim::U32 => "read_u32",
        Prim::I64 => "read_i64",
        Prim::F64 => "read_f64",
        Prim::Bool => "read_bool",
        Prim::Uuid => "read_uuid",
        Prim::String | Prim::Bytes | Prim::Records => bail!("{p:?} has a length prefix"),
    })
}

fn prim_writer(p: Prim) -> Result<&'static str> {
    Ok(match p {
        Prim::I8 => "write_i8",
        Prim::I16 => "write_i16",
        Prim::U16 => "write_u16",
        Prim::I32 => "write_i32",
        Prim::U32 => "write_u32",
        Prim::I64 => "write_i64",
        Prim::F64 => "write_f64",
        Prim::Bool => "write_bool",
        Prim::Uuid => "write_uuid",
        Prim::String | Prim::Bytes | Prim::Records => bail!("{p:?} has a length prefix"),
    })
}

fn elem_reader(elem: &Ty, compact: &str) -> Result<String> {
    Ok(match elem {
        Ty::Prim(Prim::String) => format!("|buf| read_string(buf, {compact})"),
        Ty::Prim(Prim::Bytes) | Ty::Prim(Prim::Records) => {
            format!("|buf| read_bytes(buf, {compact})")
        }
        Ty::Prim(p) => prim_reader(*p)?.to_string(),
        Ty::Struct(name) => format!("|buf| {name}::decode(buf, version)"),
        Ty::Array(_) => bail!("nested arrays"),
    })
}

fn elem_writer(elem: &Ty, compact: &str) -> Result<String> {
    Ok(match elem {
        Ty::Prim(Prim::String) => format!("|buf, item| write_string(buf, item, {compact})"),
        Ty::Prim(Prim::Bytes) | Ty::Prim(Prim::Records) => {
            format!("|buf, item| write_shared(buf, item, {compact})")
        }
        Ty::Prim(p) => format!("|buf, item| {{ {}(buf, *item); Ok(()) }}", prim_writer(*p)?),
        Ty::Struct(_) => "|buf, item| item.encode(buf, version)".to_string(),
        Ty::Array(_) => bail!("nested arrays"),
    })
}

// ----------------------------------------------------------------------------------------------
// Files

fn emit_message(msg: &Msg) -> Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "// Generated by `cargo xtask codegen` from {}.json. Do not edit.\n",
        msg.file_stem
    )?;
    out.push_str(
        "use bytes::{Bytes, BytesMut};\n\nuse crate::codec::*;\nuse crate::uuid::Uuid;\n\n",
    );
    let flexible_cond = match cond(msg.flexible, msg.valid) {
        Cond::Always => "true".to_string(),
        Cond::Never => "false".to_string(),
        Cond::Expr(e) => e,
    };
    for (index, def) in msg.structs.iter().enumerate() {
        let top = index == 0;
        // Struct definition.
        out.push_str("#[derive(Debug, Clone, PartialEq)]\n");
        writeln!(out, "pub struct {} {{", def.name)?;
        for f in &def.fields {
            if f.present.is_empty() {
                continue;
            }
            writeln!(out, "pub {}: {},", f.rust_name, f.rust_type()?)?;
        }
        out.push_str("pub unknown_tagged_fields: Vec<RawTaggedField>,\n}\n\n");

        // Default.
        writeln!(
            out,
            "impl Default for {} {{ fn default() -> Self {{ Self {{",
            def.name
        )?;
        for f in &def.fields {
            if f.present.is_empty() {
                continue;
            }
            writeln!(out, "{}: {},", f.rust_name, f.default_expr()?)?;
        }
        out.push_str("unknown_tagged_fields: Vec::new(), } } }\n\n");

        // Decode.
        writeln!(out, "impl Decodable for {} {{", def.name)?;
        out.push_str("fn decode(buf: &mut Bytes, version: i16) -> DecodeResult<Self> {\n");
        if top {
            writeln!(
                out,
                "if !<Self as Message>::supports_version(version) {{ return Err(DecodeError::UnsupportedVersion {{ api: {:?}, version }}); }}",
                msg.raw_name
            )?;
        }
        writeln!(out, "let flexible = {flexible_cond};")?;
        // Every field is a local holding what was read, or the field's default in versions that
        // lack it; the struct is built from them at the end (no default-then-overwrite).
        for f in def.fields.iter().filter(|f| !f.present.is_empty()) {
            let local = f.local();
            if f.tag.is_some() {
                writeln!(out, "let mut {local} = {};", f.default_expr()?)?;
                continue;
            }
            match cond(f.present, msg.valid) {
                Cond::Always => writeln!(out, "let {local} = {};", f.read_expr()?)?,
                Cond::Never => {}
                Cond::Expr(e) => writeln!(
                    out,
                    "let {local} = if {e} {{ {} }} else {{ {} }};",
                    f.read_expr()?,
                    f.default_expr()?
                )?,
            }
        }
        out.push_str("let mut unknown_tagged_fields = Vec::new();\n");
        out.push_str("if flexible { read_tagged_fields(buf, |tag, data| { match tag {\n");
        for f in def.fields.iter().filter(|f| f.tag.is_some()) {
            let tag = f.tag.unwrap_or_default();
            let when = match cond(f.present, msg.valid) {
                Cond::Never => continue,
                Cond::Always => String::new(),
                Cond::Expr(e) => format!(" if {e}"),
            };
            writeln!(
                out,
                "{tag}{when} => {{ {} = decode_tagged(tag, data, |buf| Ok({}))?; }}",
                f.local(),
                f.read_expr()?
            )?;
        }
        out.push_str(
            "_ => keep_unknown(&mut unknown_tagged_fields, tag, data), }\nOk(()) })?; }\n",
        );
        out.push_str("Ok(Self {\n");
        for f in def.fields.iter().filter(|f| !f.present.is_empty()) {
            writeln!(out, "{}: {},", f.rust_name, f.local())?;
        }
        out.push_str("unknown_tagged_fields,\n})\n}\n}\n\n");

        // Encode.
        writeln!(out, "impl Encodable for {} {{", def.name)?;
        out.push_str(
            "fn encode<W: WriteBuf + ?Sized>(&self, buf: &mut W, version: i16) -> EncodeResult {\n",
        );
        if top {
            writeln!(
                out,
                "if !<Self as Message>::supports_version(version) {{ return Err(EncodeError::UnsupportedVersion {{ api: {:?}, version }}); }}",
                msg.raw_name
            )?;
        }
        writeln!(out, "let flexible = {flexible_cond};")?;
        for f in def.fields.iter().filter(|f| f.tag.is_none()) {
            out.push_str(&guard(&cond(f.present, msg.valid), &f.write_stmt()?));
        }
        let tagged: Vec<&Field> = def
            .fields
            .iter()
            .filter(|f| f.tag.is_some() && !f.present.is_empty())
            .collect();
        if tagged.is_empty() {
            out.push_str(
                "if flexible { write_unknown_tagged_fields(buf, &self.unknown_tagged_fields)?; }\n",
            );
        } else {
            out.push_str("if flexible { let mut tagged = TaggedFieldsWriter::new();\n");
            for f in tagged {
                let mut when = format!("self.{} != {}", f.rust_name, f.default_expr()?);
                if let Cond::Expr(e) = cond(f.present, msg.valid) {
                    when = format!("{e} && {when}");
                }
                writeln!(
                    out,
                    "if {when} {{ tagged.field({}, |buf| {{ {} Ok(()) }})?; }}",
                    f.tag.unwrap_or_default(),
                    f.write_stmt()?
                )?;
            }
            out.push_str("tagged.finish(buf, &self.unknown_tagged_fields)?; }\n");
        }
        out.push_str("Ok(())\n}\n}\n\n");

        // Random instances (feature `testing`): only the fields of `version` are set, so that
        // decode(encode(x)) == x holds exactly.
        writeln!(
            out,
            "#[cfg(feature = \"testing\")]\nimpl crate::testing::Random for {} {{",
            def.name
        )?;
        out.push_str("fn random(rng: &mut crate::testing::Rng, version: i16) -> Self {\n");
        out.push_str("let mut this = Self::default();\n");
        for f in &def.fields {
            let body = format!("this.{} = {};", f.rust_name, f.random_expr()?);
            out.push_str(&guard(&cond(f.present, msg.valid), &body));
        }
        out.push_str("this\n}\n}\n\n");

        if top {
            let flexible_since = if msg.flexible.is_empty() {
                "None".to_string()
            } else {
                format!("Some({})", msg.flexible.lo)
            };
            writeln!(
                out,
                "impl Message for {} {{ const NAME: &'static str = {:?}; const LOWEST_VERSION: i16 = {}; const HIGHEST_VERSION: i16 = {}; const FLEXIBLE_SINCE: Option<i16> = {flexible_since}; }}\n",
                def.name, def.name, msg.valid.lo, msg.valid.hi
            )?;
            if let Some(key) = msg.api_key {
                writeln!(
                    out,
                    "impl {} {{ pub const API_KEY: i16 = {key}; }}\n",
                    def.name
                )?;
            }
        }
    }
    Ok(out)
}

/// The version ranges (within the valid ones) in which `msg`'s first untagged field is an array.
fn array_first_versions(msg: &Msg) -> Vec<(i16, i16)> {
    let Some(top) = msg.structs.first() else {
        return Vec::new();
    };
    let mut ranges: Vec<(i16, i16)> = Vec::new();
    if msg.valid.is_empty() {
        return ranges;
    }
    for version in msg.valid.lo..=msg.valid.hi {
        let first = top
            .fields
            .iter()
            .find(|f| f.tag.is_none() && f.present.lo <= version && version <= f.present.hi);
        if first.is_some_and(|f| matches!(f.ty, Ty::Array(_))) {
            match ranges.last_mut() {
                Some(last) if last.1 + 1 == version => last.1 = version,
                _ => ranges.push((version, version)),
            }
        }
    }
    ranges
}

fn emit_mod(messages: &[Msg]) -> String {
    let mut out = String::from(
        "// Generated by `cargo xtask codegen`. Do not edit.\n\n#![allow(unused_variables, unused_mut, unused_imports, clippy::all)]\n\npub mod api;\n",
    );
    for m in messages {
        let _ = writeln!(out, "pub mod {};", m.module);
    }
    out.push('\n');
    for m in messages {
        let _ = writeln!(out, "pub use {}::{};", m.module, m.raw_name);
    }
    out
}

fn emit_api(messages: &[Msg]) -> Result<String> {
    struct Api<'a> {
        key: i16,
        name: String,
        request: &'a Msg,
        response: &'a Msg,
    }
    let mut requests: BTreeMap<i16, &Msg> = BTreeMap::new();
    let mut responses: BTreeMap<i16, &Msg> = BTreeMap::new();
    for m in messages {
        match (m.kind.as_str(), m.api_key) {
            ("request", Some(k)) => {
                requests.insert(k, m);
            }
            ("response", Some(k)) => {
                responses.insert(k, m);
            }
            _ => {}
        }
    }
    let mut apis = Vec::new();
    for (key, request) in &requests {
        let response = responses
            .get(key)
            .with_context(|| format!("API key {key} has no response schema"))?;
        let name = request
            .raw_name
            .strip_suffix("Request")
            .context("request schema names end in Request")?
            .to_string();
        apis.push(Api {
            key: *key,
            name,
            request,
            response,
        });
    }

    let mut out = String::from(
        "// Generated by `cargo xtask codegen`. Do not edit.\n\n//! Every Kafka API: keys, versions, header rules, request/response enums, and the\n//! [`RequestBody`] trait tying each request type to its response type.\n\nuse bytes::{Bytes, BytesMut};\n\nuse super::*;\nuse crate::codec::*;\n\n",
    );
    out.push_str("/// A Kafka API key.\n#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]\n#[repr(i16)]\npub enum ApiKey {\n");
    for a in &apis {
        writeln!(out, "{} = {},", a.name, a.key)?;
    }
    out.push_str("}\n\nimpl ApiKey {\n");
    out.push_str("/// Every API key, in key order.\npub const ALL: &'static [ApiKey] = &[");
    for a in &apis {
        write!(out, "ApiKey::{},", a.name)?;
    }
    out.push_str("];\n\n");
    out.push_str("pub fn from_i16(key: i16) -> Option<ApiKey> { match key {\n");
    for a in &apis {
        writeln!(out, "{} => Some(ApiKey::{}),", a.key, a.name)?;
    }
    out.push_str("_ => None, } }\n\n");
    out.push_str("/// The key as sent on the wire.\npub fn key(self) -> i16 { self as i16 }\n\n");
    out.push_str(
        "/// Kafka's name for the API.\npub fn name(self) -> &'static str { match self {\n",
    );
    for a in &apis {
        writeln!(out, "ApiKey::{0} => {0:?},", a.name)?;
    }
    out.push_str("} }\n\n");
    out.push_str("/// The lowest and highest request versions the schemas define.\npub fn versions(self) -> (i16, i16) { match self {\n");
    for a in &apis {
        writeln!(
            out,
            "ApiKey::{} => ({}, {}),",
            a.name, a.request.valid.lo, a.request.valid.hi
        )?;
    }
    out.push_str("} }\n\n");
    out.push_str("/// Whether the highest version is still marked unstable in the schemas.\npub fn latest_version_unstable(self) -> bool { match self {\n");
    for a in apis.iter().filter(|a| a.request.latest_unstable) {
        writeln!(out, "ApiKey::{} => true,", a.name)?;
    }
    out.push_str("_ => false, } }\n\n");
    for (fn_name, pick) in [
        ("request_flexible_since", true),
        ("response_flexible_since", false),
    ] {
        writeln!(
            out,
            "/// The first flexible version, if any.\npub fn {fn_name}(self) -> Option<i16> {{ match self {{"
        )?;
        for a in &apis {
            let m = if pick { a.request } else { a.response };
            let v = if m.flexible.is_empty() {
                "None".to_string()
            } else {
                format!("Some({})", m.flexible.lo)
            };
            writeln!(out, "ApiKey::{} => {v},", a.name)?;
        }
        out.push_str("} }\n\n");
    }
    for (fn_name, pick) in [
        ("request_starts_with_array", true),
        ("response_starts_with_array", false),
    ] {
        writeln!(
            out,
            "/// Whether the body at `version` starts with an array (its first untagged field there).\n\
             /// Hostile-input tests use it to know where a huge count must be refused up front.\n\
             pub fn {fn_name}(self, version: i16) -> bool {{ match self {{"
        )?;
        for a in &apis {
            let m = if pick { a.request } else { a.response };
            let ranges = array_first_versions(m);
            if ranges.is_empty() {
                continue;
            }
            let arms: Vec<String> = ranges
                .iter()
                .map(|&(lo, hi)| {
                    if lo == hi {
                        lo.to_string()
                    } else {
                        format!("{lo}..={hi}")
                    }
                })
                .collect();
            writeln!(
                out,
                "ApiKey::{} => matches!(version, {}),",
                a.name,
                arms.join(" | ")
            )?;
        }
        out.push_str("_ => false, } }\n\n");
    }
    out.push_str(
        "/// Request header version: 2 for flexible request versions, else 1.\n\
         pub fn request_header_version(self, version: i16) -> i16 {\n\
         match self.request_flexible_since() { Some(first) if version >= first => 2, _ => 1 }\n}\n\n\
         /// Response header version: 1 for flexible versions, else 0; ApiVersions always 0.\n\
         pub fn response_header_version(self, version: i16) -> i16 {\n\
         if self == ApiKey::ApiVersions { return 0; }\n\
         match self.response_flexible_since() { Some(first) if version >= first => 1, _ => 0 }\n}\n",
    );
    out.push_str("}\n\n");

    for (enum_name, suffix, pick) in [
        ("Request", "Request", true),
        ("Response", "Response", false),
    ] {
        writeln!(
            out,
            "/// A decoded {} body of any API.\n#[derive(Debug, Clone, PartialEq)]\npub enum {enum_name} {{",
            enum_name.to_lowercase()
        )?;
        for a in &apis {
            let m = if pick { a.request } else { a.response };
            writeln!(out, "{}({}),", a.name, m.raw_name)?;
        }
        out.push_str("}\n\n");
        writeln!(out, "impl {enum_name} {{")?;
        out.push_str("pub fn api_key(&self) -> ApiKey { match self {\n");
        for a in &apis {
            writeln!(out, "{enum_name}::{0}(_) => ApiKey::{0},", a.name)?;
        }
        out.push_str("} }\n\n");
        if !pick {
            // Quotas (KIP-219) set the throttle time of whatever response a throttled request
            // gets.
            out.push_str(
                "/// Sets the response's `ThrottleTimeMs` (responses without one are left as they are).\n\
                 pub fn set_throttle_time_ms(&mut self, ms: i32) { match self {\n",
            );
            for a in &apis {
                let throttled = a.response.structs.iter().any(|s| {
                    s.name == a.response.raw_name
                        && s.fields.iter().any(|f| f.schema_name == "ThrottleTimeMs")
                });
                if throttled {
                    writeln!(out, "Response::{}(m) => m.throttle_time_ms = ms,", a.name)?;
                }
            }
            out.push_str("_ => {} } }\n\n");
            out.push_str(
                "/// The response's `ThrottleTimeMs` (0 for responses without one).\n\
                 pub fn throttle_time_ms(&self) -> i32 { match self {\n",
            );
            for a in &apis {
                let throttled = a.response.structs.iter().any(|s| {
                    s.name == a.response.raw_name
                        && s.fields.iter().any(|f| f.schema_name == "ThrottleTimeMs")
                });
                if throttled {
                    writeln!(out, "Response::{}(m) => m.throttle_time_ms,", a.name)?;
                }
            }
            out.push_str("_ => 0 } }\n\n");
        }
        writeln!(
            out,
            "/// Decodes a {} body of `api_key` at `version`.\npub fn decode(api_key: ApiKey, version: i16, buf: &mut Bytes) -> DecodeResult<Self> {{ Ok(match api_key {{",
            suffix.to_lowercase()
        )?;
        for a in &apis {
            let m = if pick { a.request } else { a.response };
            writeln!(
                out,
                "ApiKey::{} => {enum_name}::{}({}::decode(buf, version)?),",
                a.name, a.name, m.raw_name
            )?;
        }
        out.push_str("}) }\n\n");
        out.push_str("/// Encodes the body at `version` into any [`WriteBuf`] (`BytesMut`, `ChunkedBuf`).\npub fn encode<W: WriteBuf + ?Sized>(&self, buf: &mut W, version: i16) -> EncodeResult { match self {\n");
        for a in &apis {
            writeln!(out, "{enum_name}::{}(m) => m.encode(buf, version),", a.name)?;
        }
        out.push_str("} }\n}\n\n");
        writeln!(
            out,
            "#[cfg(feature = \"testing\")]\nimpl {enum_name} {{\n/// A random {} of `api_key`, valid at `version`.\npub fn random(api_key: ApiKey, rng: &mut crate::testing::Rng, version: i16) -> Self {{ use crate::testing::Random; match api_key {{",
            suffix.to_lowercase()
        )?;
        for a in &apis {
            let m = if pick { a.request } else { a.response };
            writeln!(
                out,
                "ApiKey::{} => {enum_name}::{}({}::random(rng, version)),",
                a.name, a.name, m.raw_name
            )?;
        }
        out.push_str("} }\n}\n\n");
        for a in &apis {
            let m = if pick { a.request } else { a.response };
            writeln!(
                out,
                "impl From<{}> for {enum_name} {{ fn from(m: {}) -> Self {{ {enum_name}::{}(m) }} }}",
                m.raw_name, m.raw_name, a.name
            )?;
        }
        out.push('\n');
    }
    emit_request_body(&mut out, &apis, |a| {
        (a.name.as_str(), a.request, a.response)
    })?;
    Ok(out)
}

/// The `RequestBody` trait (rskafka's pattern): each request type names its response type, API
/// key and version range, so a caller gets the typed response back and a mismatched answer is
/// one error in one place instead of a match arm per call site.
fn emit_request_body<'a, A>(
    out: &mut String,
    apis: &'a [A],
    parts: impl Fn(&'a A) -> (&'a str, &'a Msg, &'a Msg),
) -> Result<()> {
    out.push_str(
        "/// A request body type tied to its API: the response type it is answered with and the\n\
         /// versions the schemas define. [`RequestBody::from_response`] takes the typed body out of\n\
         /// a decoded [`Response`] (or hands the response back when it answers another API).\n\
         pub trait RequestBody: Into<Request> {\n\
         /// The response body this request is answered with.\n\
         type Response;\n\
         /// The API this request belongs to. (The message's inherent `API_KEY` is the wire number;\n\
         /// name this one as `<T as RequestBody>::API_KEY` outside generic code.)\n\
         const API_KEY: ApiKey;\n\
         /// The lowest request version the schemas define.\n\
         const MIN_VERSION: i16;\n\
         /// The highest request version the schemas define.\n\
         const MAX_VERSION: i16;\n\
         /// The typed body of `response`, or `response` itself when it answers another API.\n\
         fn from_response(response: Response) -> Result<Self::Response, Response>;\n\
         }\n\n",
    );
    for a in apis {
        let (name, request, response) = parts(a);
        writeln!(
            out,
            "impl RequestBody for {req} {{ type Response = {resp}; const API_KEY: ApiKey = ApiKey::{name}; \
             const MIN_VERSION: i16 = {lo}; const MAX_VERSION: i16 = {hi}; \
             fn from_response(response: Response) -> Result<{resp}, Response> {{ \
             match response {{ Response::{name}(m) => Ok(m), other => Err(other) }} }} }}",
            req = request.raw_name,
            resp = response.raw_name,
            lo = request.valid.lo,
            hi = request.valid.hi,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snake_case_handles_acronyms() {
        assert_eq!(snake_case("ClientInstanceId"), "client_instance_id");
        assert_eq!(snake_case("KRaftVersionRecord"), "k_raft_version_record");
        assert_eq!(snake_case("ApiVersionsRequest"), "api_versions_request");
        assert_eq!(field_ident("Type"), "r#type");
    }

    #[test]
    fn version_conditions_are_relative_to_the_valid_range() {
        let valid = Versions { lo: 0, hi: 13 };
        assert!(matches!(
            cond(Versions::parse("0+").unwrap_or(Versions::NONE), valid),
            Cond::Always
        ));
        assert!(matches!(
            cond(Versions::parse("14+").unwrap_or(Versions::NONE), valid),
            Cond::Never
        ));
        match cond(Versions { lo: 8, hi: 10 }, valid) {
            Cond::Expr(e) => assert_eq!(e, "(8..=10).contains(&version)"),
            _ => panic!("expected a range"),
        }
    }

    #[test]
    fn int_literals_accept_hex_and_negatives() {
        assert_eq!(
            int_literal("0x7fffffff").ok().as_deref(),
            Some("2147483647")
        );
        assert_eq!(int_literal("-1").ok().as_deref(), Some("-1"));
    }
}
