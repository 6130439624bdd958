//! Activation patching and directional addition (docs/reference.md §11; TransformerLens's
//! `patching.py`): one site of one run (the target) replaced by another run's (the source)
//! recorded activation — by head, head × position or layer × position —, one copy of the
//! target batch per patch; and a stored direction added at a site.

use super::{Prepared, aggregate};
use crate::model::{Edit, HeadSite, HookSet, Site, StreamSite};
use anyhow::{Result, bail};
use burn::tensor::{Bool, Tensor, TensorData};
use std::collections::BTreeMap;

/// One patch: `site` of `layer`, one head (or key/value group for k, v) or all, one real
/// position or all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct PatchSpec {
    pub layer: usize,
    pub site: Site,
    pub index: Option<usize>,
    pub position: Option<usize>,
}

fn check(p: &Prepared, spec: &PatchSpec) -> Result<()> {
    let cfg = &p.model.cfg;
    if spec.layer >= cfg.n_layers {
        bail!(
            "layer {}: the model has layers 0..{}",
            spec.layer,
            cfg.n_layers
        );
    }
    let n = match spec.site {
        Site::Head(HeadSite::K | HeadSite::V) => cfg.kv_heads(),
        Site::Head(_) => cfg.n_heads,
        Site::Stream(_) => 1,
    };
    if let Some(i) = spec.index {
        if matches!(spec.site, Site::Stream(_)) {
            bail!("{} is a residual-stream site: it has no heads", spec.site);
        }
        if i >= n {
            bail!("{} of layer {}: index {i} of 0..{n}", spec.site, spec.layer);
        }
    }
    if let Some(q) = spec.position
        && q >= p.batch.len
    {
        bail!(
            "position {q}: the prompts have positions 0..{}",
            p.batch.len
        );
    }
    Ok(())
}

/// The edits that apply patch i of `patches` to copy i of `target`'s batch (from `source`'s
/// record), and the layer the walk restarts at.
pub fn patch_hooks(
    target: &Prepared,
    source: &Prepared,
    patches: &[PatchSpec],
) -> Result<(usize, HookSet)> {
    if target.batch.batch != source.batch.batch || target.batch.len != source.batch.len {
        bail!(
            "patching needs clean and corrupted prompts of the same shape ({} × {} vs {} × {})",
            source.batch.batch,
            source.batch.len,
            target.batch.batch,
            target.batch.len
        );
    }
    for s in patches {
        check(target, s)?;
    }
    let Some(start) = patches.iter().map(|s| s.layer).min() else {
        bail!("no patch to apply");
    };
    let b = target.batch.batch;
    let n_sink = target.model.cfg.sink_tokens;
    let device = target.resid[0].device();
    let k = patches.len();
    let rows = k * b;
    let mut at: BTreeMap<(usize, Site), Vec<(usize, PatchSpec)>> = BTreeMap::new();
    for (i, s) in patches.iter().enumerate() {
        at.entry((s.layer, s.site)).or_default().push((i, *s));
    }
    let mut hooks = HookSet::new();
    for (&(l, site), specs) in &at {
        // true where copy i's patch covers (index j, query/sequence row q)
        let on = |r: usize, j: usize, q: usize| {
            specs.iter().any(|(i, s)| {
                *i == r / b
                    && s.index.is_none_or(|x| x == j)
                    && s.position.is_none_or(|x| x + n_sink == q)
            })
        };
        match site {
            Site::Head(hs) => {
                let v = source.heads(l, hs)?; // (B, n, Q, x)
                let [_, n, q, _] = v.dims();
                let data: Vec<bool> = (0..rows * n * q)
                    .map(|i| on(i / (n * q), (i / q) % n, i % q))
                    .collect();
                let mask =
                    Tensor::<4, Bool>::from_data(TensorData::new(data, [rows, n, q, 1]), &device);
                let value = if k == 1 {
                    v
                } else {
                    Tensor::cat(vec![v; k], 0)
                };
                hooks = hooks.edit_heads(
                    l,
                    hs,
                    Edit::Replace {
                        value,
                        mask: Some(Box::new(mask)),
                    },
                );
            }
            Site::Stream(ss) => {
                let v = source.stream(l, ss)?; // (B, S, d)
                let q = v.dims()[1];
                let data: Vec<bool> = (0..rows * q).map(|i| on(i / q, 0, i % q)).collect();
                let mask =
                    Tensor::<3, Bool>::from_data(TensorData::new(data, [rows, q, 1]), &device);
                let value = if k == 1 {
                    v
                } else {
                    Tensor::cat(vec![v; k], 0)
                };
                hooks = hooks.edit_stream(
                    l,
                    ss,
                    Edit::Replace {
                        value,
                        mask: Some(Box::new(mask)),
                    },
                );
            }
        }
    }
    Ok((start, hooks))
}

/// The target's metric (aggregated over its sequences) with each patch applied on its own.
pub fn patch_each(
    target: &Prepared,
    source: &Prepared,
    patches: &[PatchSpec],
    done: &mut dyn FnMut(usize),
) -> Result<Vec<f64>> {
    let b = target.batch.batch;
    let mut out = Vec::with_capacity(patches.len());
    for chunk in patches.chunks(target.max_copies()) {
        let k = chunk.len();
        let (start, mut hooks) = patch_hooks(target, source, chunk)?;
        let end = target.walk_copies(start, k, &mut hooks);
        let r = target.metric_rows(end, k);
        for i in 0..k {
            out.push(aggregate(&r[i * b..(i + 1) * b]));
        }
        done(k);
    }
    Ok(out)
}

/// Whether the clean and corrupted prompts' metrics differ by more than noise, so that the
/// normalised metric below — which divides by that difference — means something. The rule:
/// with d_i the clean − corrupted metric of pair i, the mean gap must be at least 2 standard
/// errors of the d_i (their standard deviation / √n; with one pair, no error is known) and at
/// least 1e-3 · max(1, |clean|, |corrupted|). `Err` says by how much it falls short.
pub fn gap_beyond_noise(clean: &[f64], corrupt: &[f64]) -> Result<(), String> {
    let n = clean.len().min(corrupt.len());
    if n == 0 {
        return Err("no prompt pairs".into());
    }
    let d: Vec<f64> = clean.iter().zip(corrupt).map(|(c, k)| c - k).collect();
    let gap = d.iter().sum::<f64>() / n as f64;
    let se = if n > 1 {
        let var = d.iter().map(|x| (x - gap).powi(2)).sum::<f64>() / (n - 1) as f64;
        (var / n as f64).sqrt()
    } else {
        0.0
    };
    let scale = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let floor = 1e-3 * 1f64.max(scale(clean).abs()).max(scale(corrupt).abs());
    if gap.abs() >= 2.0 * se && gap.abs() >= floor {
        return Ok(());
    }
    Err(format!(
        "the clean and corrupted prompts' metrics differ by {gap:+.4} (standard error {se:.4} \
         over {n} pairs): within noise (a normalised effect needs the gap to be at least 2 \
         standard errors and at least {floor:.1e}), so every effect normalised by it would be \
         noise divided by noise"
    ))
}

/// The normalised metric `(m − m_target) / (m_source − m_target)` (the normalised logit
/// difference when denoising: 1 at clean, 0 at corrupt).
pub fn normalise(m: f64, target: f64, source: f64) -> f64 {
    (m - target) / (source - target)
}

/// Where a direction can be added: a vector site (the stream, or q/k/v/z of one head), not the
/// pattern or the gate; a per-head site needs its head.
pub fn check_direction_place(site: Site, index: Option<usize>) -> Result<()> {
    match (site, index) {
        (Site::Head(HeadSite::Pattern), _) => {
            bail!("directions are added to vectors, not to the pattern")
        }
        (Site::Head(HeadSite::Gate), _) => {
            bail!("directions are added to vectors, not to the gate")
        }
        (Site::Head(_), None) => bail!("a direction at {site} needs a head (L:{site}:H)"),
        (Site::Head(_) | Site::Stream(_), _) => Ok(()),
    }
}

/// The target's metric with `scale · u` added at `site` of `layer` (a head's slice with
/// `index`; every real position, or one), for each scale.
pub fn add_direction(
    p: &Prepared,
    layer: usize,
    site: Site,
    index: Option<usize>,
    position: Option<usize>,
    u: &[f32],
    scales: &[f64],
) -> Result<Vec<f64>> {
    check(
        p,
        &PatchSpec {
            layer,
            site,
            index,
            position,
        },
    )?;
    check_direction_place(site, index)?;
    let cfg = &p.model.cfg;
    let b = p.batch.batch;
    let n_sink = cfg.sink_tokens;
    let s = n_sink + p.batch.len;
    let device = p.resid[0].device();
    let at_pos = |q: usize| q >= n_sink && position.is_none_or(|x| x + n_sink == q);
    let mut out = Vec::with_capacity(scales.len());
    for chunk in scales.chunks(p.max_copies()) {
        let k = chunk.len();
        let rows = k * b;
        let mut hooks = HookSet::new();
        match site {
            Site::Stream(ss) => {
                let d = cfg.d_model;
                if u.len() != d {
                    bail!(
                        "the direction has {} values; {site} needs d_model = {d}",
                        u.len()
                    );
                }
                let mut data = vec![0f32; rows * s * d];
                for r in 0..rows {
                    for q in (0..s).filter(|&q| at_pos(q)) {
                        for (i, x) in u.iter().enumerate() {
                            data[(r * s + q) * d + i] = (chunk[r / b] as f32) * x;
                        }
                    }
                }
                let v = Tensor::<3>::from_data(TensorData::new(data, [rows, s, d]), &device);
                hooks = hooks.edit_stream(layer, ss, Edit::Add(v));
            }
            Site::Head(hs) => {
                let Some(j) = index else {
                    bail!("a direction at {site} needs a head (L:{site}:H)");
                };
                let n = if matches!(hs, HeadSite::K | HeadSite::V) {
                    cfg.kv_heads()
                } else {
                    cfg.n_heads
                };
                // a vector of one head (check_direction_place refused the pattern and the gate)
                let w = cfg.d_head();
                if u.len() != w {
                    bail!(
                        "the direction has {} values; {site} needs d_head = {w}",
                        u.len()
                    );
                }
                let mut data = vec![0f32; rows * n * s * w];
                for r in 0..rows {
                    for q in (0..s).filter(|&q| at_pos(q)) {
                        for (i, x) in u.iter().enumerate() {
                            data[((r * n + j) * s + q) * w + i] = (chunk[r / b] as f32) * x;
                        }
                    }
                }
                let v = Tensor::<4>::from_data(TensorData::new(data, [rows, n, s, w]), &device);
                hooks = hooks.edit_heads(layer, hs, Edit::Add(v));
            }
        }
        let end = p.walk_copies(layer, k, &mut hooks);
        let r = p.metric_rows(end, k);
        for i in 0..k {
            out.push(aggregate(&r[i * b..(i + 1) * b]));
        }
    }
    Ok(out)
}

/// The mean over sequences of `a − b` at one real position (the last by default) of a
/// recorded site: a stored direction (e.g. clean minus corrupt).
pub fn mean_difference(
    a: &Prepared,
    b: &Prepared,
    layer: usize,
    site: Site,
    index: Option<usize>,
    position: Option<usize>,
) -> Result<Vec<f32>> {
    let n_sink = a.model.cfg.sink_tokens;
    let q = n_sink + position.unwrap_or(a.batch.len - 1);
    let diff = |p: &Prepared| -> Result<Vec<f32>> {
        Ok(match site {
            Site::Stream(ss) => {
                let t = p.stream(layer, ss)?; // (B, S, d)
                crate::eval::to_array(t.narrow(1, q, 1).mean_dim(0)).data
            }
            Site::Head(hs) => {
                let Some(j) = index else {
                    bail!("a direction at {site} needs a head");
                };
                let t = p.heads(layer, hs)?; // (B, n, S, d_h)
                crate::eval::to_array(t.narrow(1, j, 1).narrow(2, q, 1).mean_dim(0)).data
            }
        })
    };
    let (x, y) = (diff(a)?, diff(b)?);
    Ok(x.iter().zip(&y).map(|(p, q)| p - q).collect())
}

/// Sites whose patches need the source to record them (resid_pre always is).
pub fn needs(site: Site) -> Option<Site> {
    (site != Site::Stream(StreamSite::ResidPre)).then_some(site)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quickstart's built-in pairs gave a gap of 0.0004 and a head "+1.000 restored": a gap
    /// inside its own noise is refused; a clear one passes; one pair needs only the floor.
    #[test]
    fn a_gap_within_noise_is_refused() {
        let clean = [3.10, 3.05, 2.98, 3.02];
        let noisy = [3.11, 2.98, 3.07, 2.99]; // mean gap 0.0, spread ±0.05
        let e = gap_beyond_noise(&clean, &noisy).unwrap_err();
        assert!(e.contains("within noise"), "{e}");
        let tiny = [3.1000, 3.0500, 2.9800, 3.0200];
        let near = [3.0996, 3.0496, 2.9796, 3.0196]; // every pair 0.0004 apart: below the floor
        assert!(gap_beyond_noise(&tiny, &near).is_err());
        let corrupt = [-3.4, -3.6, -3.5, -3.3];
        assert!(gap_beyond_noise(&clean, &corrupt).is_ok());
        assert!(gap_beyond_noise(&[1.0], &[0.5]).is_ok());
        assert!(gap_beyond_noise(&[1.0], &[0.9995]).is_err());
        assert!(gap_beyond_noise(&[], &[]).is_err());
    }
}
