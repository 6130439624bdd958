//! Files that must never be half-written: atomic writes, safetensors, checkpoint directories.
//!
//! A checkpoint is a directory `checkpoints/step_NNNNNNNN/` holding `model.safetensors` (the
//! weights, loadable by PyTorch's `safetensors` package), `optim.safetensors` (AdamW moments)
//! and `state.json` (step, data position, resolved config digest). It is written under a
//! temporary name and renamed into place, so a directory with the final name is always
//! complete.

use anyhow::{Context, Result, bail};
use safetensors::tensor::{Dtype, TensorView};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Write `bytes` to `path` atomically: temp file in the same directory, fsync, rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    {
        let mut f =
            std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(bytes)
            .with_context(|| format!("writing {}", tmp.display()))?;
        f.sync_all().ok();
    }
    std::fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    Ok(())
}

/// A host-side f32 tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// Serialize named f32 tensors to safetensors bytes (names sorted, metadata attached).
pub fn safetensors_bytes(
    tensors: &BTreeMap<String, HostTensor>,
    metadata: Option<std::collections::HashMap<String, String>>,
) -> Result<Vec<u8>> {
    let raw: Vec<(String, Vec<u8>, Vec<usize>)> = tensors
        .iter()
        .map(|(k, t)| {
            let mut b = Vec::with_capacity(t.data.len() * 4);
            for x in &t.data {
                b.extend_from_slice(&x.to_le_bytes());
            }
            (k.clone(), b, t.shape.clone())
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = raw
        .iter()
        .map(|(k, b, s)| Ok((k.clone(), TensorView::new(Dtype::F32, s.clone(), b)?)))
        .collect::<Result<_, safetensors::SafeTensorError>>()?;
    Ok(safetensors::serialize(views, metadata)?)
}

pub fn save_safetensors(
    path: &Path,
    tensors: &BTreeMap<String, HostTensor>,
    metadata: Option<std::collections::HashMap<String, String>>,
) -> Result<()> {
    write_atomic(path, &safetensors_bytes(tensors, metadata)?)
}

pub fn load_safetensors(path: &Path) -> Result<BTreeMap<String, HostTensor>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .with_context(|| format!("{}: not a safetensors file", path.display()))?;
    let mut out = BTreeMap::new();
    for (name, view) in st.tensors() {
        if view.dtype() != Dtype::F32 {
            bail!(
                "{}: tensor {name} has dtype {:?}, expected F32",
                path.display(),
                view.dtype()
            );
        }
        let data = view
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        out.insert(
            name,
            HostTensor {
                shape: view.shape().to_vec(),
                data,
            },
        );
    }
    Ok(out)
}

/// Checkpoint directory name for a step.
pub fn step_dir(run_dir: &Path, step: u64) -> PathBuf {
    run_dir.join("checkpoints").join(format!("step_{step:08}"))
}

/// Complete checkpoints of a run, oldest first.
pub fn list_checkpoints(run_dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(run_dir.join("checkpoints")) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(n) = name.strip_prefix("step_")
                && let Ok(step) = n.parse::<u64>()
                && e.path().join("state.json").exists()
            {
                out.push((step, e.path()));
            }
        }
    }
    out.sort();
    out
}

/// Write a checkpoint directory atomically, then delete all but the newest `keep`.
pub fn commit_checkpoint(
    run_dir: &Path,
    step: u64,
    files: &[(&str, Vec<u8>)],
    keep: usize,
) -> Result<PathBuf> {
    let final_dir = step_dir(run_dir, step);
    let parent = final_dir.parent().expect("has parent");
    std::fs::create_dir_all(parent)?;
    let tmp = parent.join(format!(".tmp_step_{step:08}_{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)?;
    }
    std::fs::create_dir_all(&tmp)?;
    for (name, bytes) in files {
        let mut f = std::fs::File::create(tmp.join(name))?;
        f.write_all(bytes)?;
        f.sync_all().ok();
    }
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
            commit_checkpoint(dir.path(), step, &[("state.json", b"{}".to_vec())], 2).unwrap();
        }
        let steps: Vec<u64> = list_checkpoints(dir.path()).iter().map(|c| c.0).collect();
        assert_eq!(steps, vec![30, 40]);
    }
}
