//! Reading a corpus one document at a time: plain text (documents separated by a line
//! `<|doc|>`), JSONL with a text field, gzip- or zstd-compressed text or JSONL, and Parquet
//! with a text column. Nothing holds more than one document (text, JSONL) or one row group's
//! page (Parquet) besides what the caller keeps.
//!
//! Bad input — a malformed JSON line, a record without the text field, invalid UTF-8, an empty
//! file, a truncated compressed stream, a Parquet file without the column — is an error naming
//! the file and the line (policy `error`, the default) or a counted skip (`skip`) that the
//! preparation reports and records in the manifest. Never a silently smaller corpus.

use super::DOC_SEPARATOR;
use crate::config::{BadInput, SourceFormat};
use anyhow::{Context, Result, anyhow, bail};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// The container of a source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Jsonl,
    Parquet,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

/// Where a source's bytes come from.
#[derive(Debug, Clone)]
pub enum Origin {
    File(PathBuf),
    /// A text compiled into the binary (the embedded corpus).
    Embedded(&'static str, &'static str),
}

/// One source file of a domain.
#[derive(Debug, Clone)]
pub struct SourceFile {
    pub origin: Origin,
    pub format: Format,
    pub compression: Compression,
    /// Size on disk (compressed), bytes.
    pub size: u64,
    /// Modification time (ns since the epoch; 0 for embedded texts): with the path and size it
    /// keys the prepared cache without reading the file.
    pub mtime_ns: u128,
}

/// What reading one source file gave.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct FileRead {
    pub documents: u64,
    /// Text bytes of the documents kept.
    pub text_bytes: u64,
    /// sha256 of the file's bytes as stored (compressed).
    pub sha256: String,
    /// Skipped input by kind (policy `skip`): malformed_json, missing_field, invalid_utf8,
    /// empty_file, truncated, missing_column.
    pub skipped: BTreeMap<String, u64>,
}

impl SourceFile {
    /// A file on disk; its format from `format` or, for "auto", its extension (`.txt`,
    /// `.jsonl`/`.json`/`.ndjson`, `.parquet`, each text or JSONL optionally `.gz`/`.zst`).
    pub fn open(path: &Path, format: SourceFormat) -> Result<Self> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        let (stem, compression) = if let Some(s) = name.strip_suffix(".gz") {
            (s, Compression::Gzip)
        } else if let Some(s) = name.strip_suffix(".zst").or(name.strip_suffix(".zstd")) {
            (s, Compression::Zstd)
        } else {
            (name.as_str(), Compression::None)
        };
        let by_ext = if stem.ends_with(".parquet") {
            Some(Format::Parquet)
        } else if [".jsonl", ".json", ".ndjson"]
            .iter()
            .any(|e| stem.ends_with(e))
        {
            Some(Format::Jsonl)
        } else if stem.ends_with(".txt") || stem.ends_with(".text") {
            Some(Format::Text)
        } else {
            None
        };
        let format = match format {
            SourceFormat::Auto => by_ext.ok_or_else(|| {
                anyhow!(
                    "{}: cannot tell the format from the extension; valid: .txt, .jsonl, .json, \
                     .ndjson, .parquet (text and JSONL optionally .gz or .zst), or set `format`",
                    path.display()
                )
            })?,
            SourceFormat::Text => Format::Text,
            SourceFormat::Jsonl => Format::Jsonl,
            SourceFormat::Parquet => Format::Parquet,
        };
        if format == Format::Parquet && compression != Compression::None {
            bail!(
                "{}: a compressed Parquet file; Parquet compresses its pages itself",
                path.display()
            );
        }
        let meta =
            std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        Ok(Self {
            origin: Origin::File(path.to_path_buf()),
            format,
            compression,
            size: meta.len(),
            mtime_ns,
        })
    }

    pub fn embedded(name: &'static str, text: &'static str) -> Self {
        Self {
            origin: Origin::Embedded(name, text),
            format: Format::Text,
            compression: Compression::None,
            size: text.len() as u64,
            mtime_ns: 0,
        }
    }

    /// The path (or `embedded:NAME`) for messages and the manifest.
    pub fn name(&self) -> String {
        match &self.origin {
            Origin::File(p) => p.display().to_string(),
            Origin::Embedded(n, _) => format!("embedded:{n}"),
        }
    }

    /// Stream the documents of this file to `each`, in order. `progress` gets the stored
    /// (compressed) bytes consumed since its last call.
    pub fn read(
        &self,
        text_field: &str,
        policy: BadInput,
        progress: &(dyn Fn(u64) + Sync),
        each: &mut dyn FnMut(String) -> Result<()>,
    ) -> Result<FileRead> {
        let mut out = FileRead::default();
        let mut keep = |doc: String, out: &mut FileRead| -> Result<()> {
            if doc.trim().is_empty() {
                return Ok(());
            }
            out.documents += 1;
            out.text_bytes += doc.len() as u64;
            each(doc)
        };
        let name = self.name();
        if self.format == Format::Parquet {
            let Origin::File(path) = &self.origin else {
                unreachable!("embedded texts are text")
            };
            out.sha256 = crate::checkpoint::file_sha256(path)?;
            read_parquet(path, text_field, policy, progress, &mut |d| {
                keep(d, &mut out)
            })
            .map(|skips| out.skipped = skips)?;
        } else {
            let raw: Box<dyn Read + Send> = match &self.origin {
                Origin::File(p) => Box::new(
                    std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?,
                ),
                Origin::Embedded(_, t) => Box::new(t.as_bytes()),
            };
            let mut hashed = Hashing {
                inner: raw,
                hash: Sha256::new(),
                progress,
            };
            let skips = {
                let decoded: Box<dyn Read + Send + '_> = match self.compression {
                    Compression::None => Box::new(&mut hashed),
                    Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(&mut hashed)),
                    Compression::Zstd => Box::new(
                        zstd::stream::read::Decoder::new(&mut hashed)
                            .with_context(|| format!("{name}: starting the zstd decoder"))?,
                    ),
                };
                let lines = BufReader::with_capacity(1 << 20, decoded);
                let mut kept = |d: String| keep(d, &mut out);
                match self.format {
                    Format::Text => read_text(lines, &name, policy, &mut kept)?,
                    Format::Jsonl => read_jsonl(lines, &name, text_field, policy, &mut kept)?,
                    Format::Parquet => unreachable!("handled above"),
                }
            };
            // the rest of the stored bytes (after a truncation was skipped) still count
            std::io::copy(&mut hashed, &mut std::io::sink()).ok();
            out.sha256 = super::hex(&hashed.hash.finalize());
            out.skipped = skips;
        }
        if out.documents == 0 && out.skipped.is_empty() {
            match policy {
                BadInput::Error => bail!(
                    "{name}: empty (no document); remove it or set data.bad_input = \"skip\" to \
                     count and skip empty files"
                ),
                BadInput::Skip => {
                    out.skipped.insert("empty_file".into(), 1);
                }
            }
        }
        Ok(out)
    }
}

/// Counts, hashes and reports the stored bytes as they are read.
struct Hashing<'a> {
    inner: Box<dyn Read + Send>,
    hash: Sha256,
    progress: &'a (dyn Fn(u64) + Sync),
}

impl Read for Hashing<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        (self.progress)(n as u64);
        Ok(n)
    }
}

/// Record a skip under `policy`, or fail with `msg`.
fn skip_or_fail(
    policy: BadInput,
    skips: &mut BTreeMap<String, u64>,
    kind: &str,
    msg: impl FnOnce() -> String,
) -> Result<()> {
    match policy {
        BadInput::Error => Err(anyhow!(
            "{}; set data.bad_input = \"skip\" to count and skip such input",
            msg()
        )),
        BadInput::Skip => {
            *skips.entry(kind.into()).or_default() += 1;
            Ok(())
        }
    }
}

/// The next line (with its `\n`), `None` at the end. A read error is a truncated or corrupt
/// stream: an error, or under `skip` the end of this file counted as `truncated`.
fn next_line(
    r: &mut impl BufRead,
    buf: &mut Vec<u8>,
    name: &str,
    line_no: u64,
    policy: BadInput,
    skips: &mut BTreeMap<String, u64>,
) -> Result<bool> {
    buf.clear();
    match r.read_until(b'\n', buf) {
        Ok(0) => Ok(false),
        Ok(_) => Ok(true),
        Err(e) => {
            skip_or_fail(policy, skips, "truncated", || {
                format!("{name}: truncated or corrupt after line {line_no}: {e}")
            })?;
            Ok(false)
        }
    }
}

/// The line as text; invalid UTF-8 is an error or (`skip`) `None`, counted.
fn utf8_line<'a>(
    buf: &'a [u8],
    name: &str,
    line_no: u64,
    policy: BadInput,
    skips: &mut BTreeMap<String, u64>,
) -> Result<Option<&'a str>> {
    match std::str::from_utf8(buf) {
        Ok(l) => Ok(Some(l)),
        Err(e) => {
            skip_or_fail(policy, skips, "invalid_utf8", || {
                format!(
                    "{name}: line {line_no} is not valid UTF-8 (byte {} of the line)",
                    e.valid_up_to()
                )
            })?;
            Ok(None)
        }
    }
}

/// Plain text: documents separated by lines `<|doc|>` (a file without them is one document).
fn read_text(
    mut r: impl BufRead,
    name: &str,
    policy: BadInput,
    each: &mut dyn FnMut(String) -> Result<()>,
) -> Result<BTreeMap<String, u64>> {
    let mut skips = BTreeMap::new();
    let (mut buf, mut cur, mut line_no) = (Vec::new(), String::new(), 0u64);
    while next_line(&mut r, &mut buf, name, line_no, policy, &mut skips)? {
        line_no += 1;
        let Some(line) = utf8_line(&buf, name, line_no, policy, &mut skips)? else {
            continue;
        };
        if line.trim_end_matches(['\n', '\r']) == DOC_SEPARATOR {
            each(std::mem::take(&mut cur))?;
        } else {
            cur.push_str(line);
        }
    }
    if skips.contains_key("truncated") {
        return Ok(skips); // the document cut by the truncation is dropped
    }
    each(cur)?;
    Ok(skips)
}

/// JSONL: one JSON object per line, the document in the string field `field`.
fn read_jsonl(
    mut r: impl BufRead,
    name: &str,
    field: &str,
    policy: BadInput,
    each: &mut dyn FnMut(String) -> Result<()>,
) -> Result<BTreeMap<String, u64>> {
    let mut skips = BTreeMap::new();
    let (mut buf, mut line_no) = (Vec::new(), 0u64);
    while next_line(&mut r, &mut buf, name, line_no, policy, &mut skips)? {
        line_no += 1;
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if utf8_line(&buf, name, line_no, policy, &mut skips)?.is_none() {
            continue;
        }
        let mut obj: serde_json::Map<String, serde_json::Value> = match serde_json::from_slice(&buf)
        {
            Ok(o) => o,
            Err(e) => {
                skip_or_fail(policy, &mut skips, "malformed_json", || {
                    format!("{name}: line {line_no} is not a JSON object: {e}")
                })?;
                continue;
            }
        };
        match obj.remove(field) {
            Some(serde_json::Value::String(s)) => each(s)?,
            other => skip_or_fail(policy, &mut skips, "missing_field", || {
                let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
                format!(
                    "{name}: line {line_no} has no string field {field:?} ({}; fields: {}); set \
                     the source's text_field",
                    if other.is_some() {
                        "not a string"
                    } else {
                        "absent"
                    },
                    keys.join(", ")
                )
            })?,
        }
    }
    Ok(skips)
}

/// Parquet: the string column `field`, row by row (nulls are missing fields).
fn read_parquet(
    path: &Path,
    field: &str,
    policy: BadInput,
    progress: &(dyn Fn(u64) + Sync),
    each: &mut dyn FnMut(String) -> Result<()>,
) -> Result<BTreeMap<String, u64>> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    let mut skips = BTreeMap::new();
    let name = path.display();
    let f = std::fs::File::open(path).with_context(|| format!("opening {name}"))?;
    let reader =
        SerializedFileReader::new(f).with_context(|| format!("{name}: not a Parquet file"))?;
    let schema = reader.metadata().file_metadata().schema_descr_ptr();
    let root = schema.root_schema();
    let Some(col) = root.get_fields().iter().find(|t| t.name() == field) else {
        let cols: Vec<&str> = root.get_fields().iter().map(|t| t.name()).collect();
        skip_or_fail(policy, &mut skips, "missing_column", || {
            format!(
                "{name}: no column {field:?} (columns: {}); set the source's text_field",
                cols.join(", ")
            )
        })?;
        return Ok(skips);
    };
    let projection = parquet::schema::types::Type::group_type_builder(root.name())
        .with_fields(vec![col.clone()])
        .build()
        .context("parquet projection")?;
    let groups = reader.metadata().num_row_groups();
    for g in 0..groups {
        let group = reader
            .get_row_group(g)
            .with_context(|| format!("{name}: row group {g}"))?;
        progress(group.metadata().compressed_size().max(0) as u64);
        let rows = group
            .get_row_iter(Some(projection.clone()))
            .with_context(|| format!("{name}: row group {g}"))?;
        for (i, row) in rows.enumerate() {
            let row = row.with_context(|| format!("{name}: row group {g}, row {i}"))?;
            match row.into_columns().into_iter().next().map(|(_, f)| f) {
                Some(Field::Str(s)) => each(s)?,
                _ => skip_or_fail(policy, &mut skips, "missing_field", || {
                    format!(
                        "{name}: row group {g}, row {i}: column {field:?} is null or not a string"
                    )
                })?,
            }
        }
    }
    Ok(skips)
}
