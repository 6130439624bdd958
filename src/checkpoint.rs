//! Files that must never be half-written: atomic writes, safetensors, checkpoint directories.
//!
//! A checkpoint is a directory `checkpoints/step_NNNNNNNN/` holding `model.safetensors` (the
//! weights, loadable by PyTorch's `safetensors` package), `optim.safetensors` (AdamW moments)
//! and `state.json` (step, data position, resolved config digest). It is written under a
//! temporary name and renamed into place, so a directory with the final name is always
//! complete. Its `SHA256SUMS` (the format `sha256sum -c` reads) is verified before a resume
//! trusts it: a corrupt newest checkpoint gives way to the newest good one.

use crate::rundir::{self, RunDir};
use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Write `bytes` to `path` atomically: temp file in the same directory, fsync, rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_file_atomic(path, &mut |w| Ok(w.write_all(bytes)?))
}

/// Move a directory built under `tmp` into place at `out` once `built` succeeded; on any
/// failure remove `tmp`, so that nothing half-written is left. `what` names it in errors.
pub fn publish_dir(built: Result<()>, tmp: &Path, out: &Path, what: &str) -> Result<()> {
    if let Err(e) = built {
        std::fs::remove_dir_all(tmp).ok();
        return Err(e);
    }
    std::fs::rename(tmp, out).with_context(|| {
        std::fs::remove_dir_all(tmp).ok();
        format!("moving {what} into {}", out.display())
    })
}

/// A host-side f32 tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// Stream named f32 tensors in the safetensors format to `w`: an 8-byte little-endian header
/// length, the JSON header (`{name: {dtype, shape, data_offsets}, "__metadata__": {..}}`,
/// names sorted, space-padded to a multiple of 8) and the raw little-endian data, tensor by
/// tensor. Nothing is copied whole: writing a model costs no memory beyond the model.
pub fn write_safetensors(
    w: &mut dyn Write,
    tensors: &BTreeMap<String, HostTensor>,
    metadata: Option<&std::collections::HashMap<String, String>>,
) -> Result<()> {
    let mut header = serde_json::Map::new();
    if let Some(m) = metadata {
        let sorted: BTreeMap<&String, &String> = m.iter().collect();
        header.insert("__metadata__".into(), serde_json::to_value(sorted)?);
    }
    let mut offset = 0usize;
    for (name, t) in tensors {
        if t.shape.iter().product::<usize>() != t.data.len() {
            bail!(
                "tensor `{name}`: shape {:?} does not hold {} values",
                t.shape,
                t.data.len()
            );
        }
        let end = offset + 4 * t.data.len();
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": "F32", "shape": t.shape, "data_offsets": [offset, end]}),
        );
        offset = end;
    }
    let mut text = serde_json::to_string(&header)?.into_bytes();
    while text.len() % 8 != 0 {
        text.push(b' ');
    }
    w.write_all(&(text.len() as u64).to_le_bytes())?;
    w.write_all(&text)?;
    let mut buf = Vec::with_capacity(1 << 16);
    for t in tensors.values() {
        for chunk in t.data.chunks(1 << 14) {
            buf.clear();
            chunk
                .iter()
                .for_each(|x| buf.extend_from_slice(&x.to_le_bytes()));
            w.write_all(&buf)?;
        }
    }
    Ok(())
}

/// Serialize named f32 tensors to safetensors bytes (see [`write_safetensors`]).
pub fn safetensors_bytes(
    tensors: &BTreeMap<String, HostTensor>,
    metadata: Option<std::collections::HashMap<String, String>>,
) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    write_safetensors(&mut out, tensors, metadata.as_ref())?;
    Ok(out)
}

/// Write a safetensors file atomically (temp file, fsync, rename), streaming the tensors.
pub fn save_safetensors(
    path: &Path,
    tensors: &BTreeMap<String, HostTensor>,
    metadata: Option<std::collections::HashMap<String, String>>,
) -> Result<()> {
    write_file_atomic(path, &mut |w| {
        write_safetensors(w, tensors, metadata.as_ref())
    })
}

/// Write `path` atomically from a writer callback: temp file in the same directory, fsync,
/// rename; the temp file is removed if the callback fails.
pub fn write_file_atomic(
    path: &Path,
    body: &mut dyn FnMut(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    let written = (|| -> Result<()> {
        let f =
            std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        body(&mut w).with_context(|| format!("writing {}", tmp.display()))?;
        let f = w
            .into_inner()
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", tmp.display()))?;
        f.sync_all().ok();
        Ok(())
    })();
    if let Err(e) = written {
        std::fs::remove_file(&tmp).ok();
        return Err(e);
    }
    std::fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    Ok(())
}

/// The body of one checkpoint file.
pub enum FileBody<'a> {
    Bytes(Vec<u8>),
    /// Tensors streamed as safetensors, with metadata.
    Tensors(
        &'a BTreeMap<String, HostTensor>,
        Option<std::collections::HashMap<String, String>>,
    ),
}

/// Named host tensors handed out one at a time, so that a model loads with one tensor in
/// flight: a map in memory, or a safetensors file read on demand ([`SafetensorsReader`]).
pub trait TensorSource {
    /// Remove and return the tensor `name`; `Ok(None)` if the source has no such tensor.
    fn take(&mut self, name: &str) -> Result<Option<HostTensor>>;
    /// Names not taken yet.
    fn rest(&self) -> Vec<String>;
}

impl TensorSource for BTreeMap<String, HostTensor> {
    fn take(&mut self, name: &str) -> Result<Option<HostTensor>> {
        Ok(self.remove(name))
    }
    fn rest(&self) -> Vec<String> {
        self.keys().cloned().collect()
    }
}

/// An F32 safetensors file opened for reading tensor by tensor: the header is parsed and
/// checked up front (dtype, shape against byte range, range inside the file); the data is read
/// through a small buffer when a tensor is taken, so the file's bytes are never held beside the
/// tensors.
pub struct SafetensorsReader {
    path: PathBuf,
    file: std::fs::File,
    data_start: u64,
    /// name → (shape, begin offset in the data section)
    entries: BTreeMap<String, (Vec<usize>, u64)>,
}

impl SafetensorsReader {
    pub fn open(path: &Path) -> Result<Self> {
        use std::io::Read;
        let bad =
            |what: String| anyhow::anyhow!("{}: not a safetensors file ({what})", path.display());
        let mut f =
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let file_len = f.metadata()?.len();
        let mut len8 = [0u8; 8];
        f.read_exact(&mut len8)
            .map_err(|e| bad(format!("header length: {e}")))?;
        let n = u64::from_le_bytes(len8);
        if n > file_len.saturating_sub(8) || n > 100 << 20 {
            return Err(bad(format!(
                "header length {n} for a file of {file_len} bytes"
            )));
        }
        let mut header = vec![0u8; n as usize];
        f.read_exact(&mut header)
            .map_err(|e| bad(format!("header: {e}")))?;
        let header: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&header).map_err(|e| bad(format!("header JSON: {e}")))?;
        let data_start = 8 + n;
        let mut entries = BTreeMap::new();
        for (name, v) in &header {
            if name == "__metadata__" {
                continue;
            }
            let dtype = v["dtype"].as_str().unwrap_or("?");
            if dtype != "F32" {
                bail!(
                    "{}: tensor {name} has dtype {dtype}, expected F32",
                    path.display()
                );
            }
            let shape: Vec<usize> = v["shape"]
                .as_array()
                .ok_or_else(|| bad(format!("tensor {name} has no shape")))?
                .iter()
                .map(|x| x.as_u64().map(|x| x as usize))
                .collect::<Option<_>>()
                .ok_or_else(|| bad(format!("tensor {name}: shape {}", v["shape"])))?;
            let offs = v["data_offsets"].as_array();
            let (Some(begin), Some(end)) = (
                offs.and_then(|o| o.first()).and_then(|x| x.as_u64()),
                offs.and_then(|o| o.get(1)).and_then(|x| x.as_u64()),
            ) else {
                return Err(bad(format!(
                    "tensor {name}: data_offsets {}",
                    v["data_offsets"]
                )));
            };
            let count: usize = shape.iter().product();
            if end < begin || end - begin != 4 * count as u64 || data_start + end > file_len {
                return Err(bad(format!(
                    "tensor {name}: offsets {begin}..{end} for shape {shape:?} in {file_len} bytes"
                )));
            }
            entries.insert(name.clone(), (shape, begin));
        }
        Ok(Self {
            path: path.to_path_buf(),
            file: f,
            data_start,
            entries,
        })
    }
}

impl TensorSource for SafetensorsReader {
    fn take(&mut self, name: &str) -> Result<Option<HostTensor>> {
        use std::io::{Read, Seek, SeekFrom};
        let Some((shape, begin)) = self.entries.remove(name) else {
            return Ok(None);
        };
        let count: usize = shape.iter().product();
        self.file.seek(SeekFrom::Start(self.data_start + begin))?;
        let mut data = Vec::with_capacity(count);
        let mut buf = vec![0u8; 1 << 16];
        while data.len() < count {
            let take = (4 * (count - data.len())).min(buf.len());
            self.file
                .read_exact(&mut buf[..take])
                .with_context(|| format!("{}: reading tensor {name}", self.path.display()))?;
            data.extend(
                buf[..take]
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            );
        }
        Ok(Some(HostTensor { shape, data }))
    }
    fn rest(&self) -> Vec<String> {
        self.entries.keys().cloned().collect()
    }
}

/// Read every tensor of an F32 safetensors file ([`SafetensorsReader`], in file order).
pub fn load_safetensors(path: &Path) -> Result<BTreeMap<String, HostTensor>> {
    let mut r = SafetensorsReader::open(path)?;
    let mut order: Vec<(u64, String)> = r
        .entries
        .iter()
        .map(|(n, (_, b))| (*b, n.clone()))
        .collect();
    order.sort();
    let mut out = BTreeMap::new();
    for (_, name) in order {
        let t = r.take(&name)?.expect("listed in the header");
        out.insert(name, t);
    }
    Ok(out)
}

/// Checkpoint directory name for a step.
pub fn step_dir(run_dir: &Path, step: u64) -> PathBuf {
    RunDir(run_dir).checkpoint(step)
}

/// Complete checkpoints of a run, oldest first.
pub fn list_checkpoints(run_dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(RunDir(run_dir).checkpoints()) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(step) = rundir::parse_step_name(&name)
                && e.path().join("state.json").exists()
            {
                out.push((step, e.path()));
            }
        }
    }
    out.sort();
    out
}

/// Bytes as lower-case hexadecimal (digests).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// sha256 of a file, hex, read in a stream.
pub fn file_sha256(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).with_context(|| format!("reading {}", path.display()))?;
    Ok(hex(&h.finalize()))
}

/// The checksum file of a checkpoint directory.
pub const SUMS: &str = "SHA256SUMS";

/// A writer that hashes what passes through it.
struct HashingWriter<W: Write> {
    inner: W,
    hash: Sha256,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Check every file of a checkpoint directory against its `SHA256SUMS`. A checkpoint written
/// before sinklab stored checksums (no `SHA256SUMS`) passes unchecked.
pub fn verify_checkpoint(dir: &Path) -> Result<()> {
    let sums_path = dir.join(SUMS);
    let Ok(sums) = std::fs::read_to_string(&sums_path) else {
        return Ok(());
    };
    for line in sums.lines().filter(|l| !l.trim().is_empty()) {
        let Some((want, name)) = line.split_once("  ") else {
            bail!("{}: malformed line {line:?}", sums_path.display());
        };
        let path = dir.join(name);
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let got = hex(&Sha256::digest(&bytes));
        if got != want {
            bail!(
                "{}: sha256 {got} differs from the {want} recorded in {SUMS}: the file is corrupt",
                path.display()
            );
        }
    }
    Ok(())
}

/// Remove checkpoint temporaries (`checkpoints/.tmp_step_*`) that a killed write left behind.
pub fn remove_stale_temporaries(run_dir: &Path) {
    for e in std::fs::read_dir(RunDir(run_dir).checkpoints())
        .into_iter()
        .flatten()
        .flatten()
    {
        if e.file_name().to_string_lossy().starts_with(".tmp_step_") {
            std::fs::remove_dir_all(e.path()).ok();
        }
    }
}

/// Write a checkpoint directory atomically, then delete all but the newest `keep`.
pub fn commit_checkpoint(
    run_dir: &Path,
    step: u64,
    files: &[(&str, FileBody<'_>)],
    keep: usize,
) -> Result<PathBuf> {
    let final_dir = step_dir(run_dir, step);
    let parent = final_dir.parent().expect("has parent");
    std::fs::create_dir_all(parent)?;
    let tmp = parent.join(format!(
        ".tmp_{}_{}",
        rundir::step_name(step),
        std::process::id()
    ));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)?;
    }
    std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let mut sums = String::new();
    for (name, body) in files {
        let path = tmp.join(name);
        let write = || -> Result<String> {
            let f = std::fs::File::create(&path)?;
            let mut w = HashingWriter {
                inner: std::io::BufWriter::with_capacity(1 << 20, f),
                hash: Sha256::new(),
            };
            match body {
                FileBody::Bytes(b) => w.write_all(b)?,
                FileBody::Tensors(t, meta) => write_safetensors(&mut w, t, meta.as_ref())?,
            }
            let digest = hex(&w.hash.finalize());
            let f = w.inner.into_inner().map_err(|e| e.into_error())?;
            f.sync_all()?;
            Ok(digest)
        };
        let digest = write().with_context(|| {
            format!(
                "writing {} (the previous checkpoint is untouched)",
                path.display()
            )
        })?;
        sums.push_str(&format!("{digest}  {name}\n"));
    }
    std::fs::write(tmp.join(SUMS), &sums)
        .with_context(|| format!("writing {}", tmp.join(SUMS).display()))?;
    if final_dir.exists() {
        std::fs::remove_dir_all(&final_dir)?;
    }
    std::fs::rename(&tmp, &final_dir)
        .with_context(|| format!("renaming checkpoint into {}", final_dir.display()))?;
    let all = list_checkpoints(run_dir);
    if all.len() > keep {
        for (_, p) in &all[..all.len() - keep] {
            std::fs::remove_dir_all(p).ok();
        }
    }
    Ok(final_dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safetensors_roundtrip_and_keep_last() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = BTreeMap::new();
        t.insert(
            "a.weight".to_string(),
            HostTensor {
                shape: vec![2, 3],
                data: vec![1.0, -2.0, 3.5, 0.0, 1e-8, f32::MAX],
            },
        );
        let p = dir.path().join("m.safetensors");
        save_safetensors(&p, &t, None).unwrap();
        assert_eq!(load_safetensors(&p).unwrap(), t);
        for step in [10, 20, 30, 40] {
            commit_checkpoint(
                dir.path(),
                step,
                &[("state.json", FileBody::Bytes(b"{}".to_vec()))],
                2,
            )
            .unwrap();
        }
        let steps: Vec<u64> = list_checkpoints(dir.path()).iter().map(|c| c.0).collect();
        assert_eq!(steps, vec![30, 40]);
    }
}
