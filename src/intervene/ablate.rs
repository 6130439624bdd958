//! Ablations (docs/reference.md §11): sets of heads or key/value groups replaced at once —
//! zero, mean over a reference set, resample from another sequence, or (heads) move-to-first —
//! each set one copy of the batch, restarted at the set's first layer; scans of every unit and
//! the matched-random control of a named set.

use super::{AblationKind, Prepared, Unit, aggregate, derangement, unit_mask};
use crate::model::{Edit, HeadSite, HookSet, Site};
use anyhow::{Result, bail};
use burn::tensor::{Bool, Int, Tensor, TensorData};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use std::collections::BTreeMap;

/// The sites an ablation of `units` by `kind` reads from the recorded walk.
pub fn sites(kind: AblationKind, units: &[Unit]) -> Vec<Site> {
    let mut s = Vec::new();
    if kind == AblationKind::Zero || kind == AblationKind::MoveToFirst {
        return s;
    }
    if units.iter().any(|u| matches!(u, Unit::Head { .. })) {
        s.push(Site::Head(HeadSite::Z));
    }
    if units.iter().any(|u| matches!(u, Unit::KvGroup { .. })) {
        s.push(Site::Head(HeadSite::K));
        s.push(Site::Head(HeadSite::V));
    }
    s
}

/// What replaces the ablated activations.
pub struct Ablation<'a> {
    pub kind: AblationKind,
    /// The reference set of a mean ablation (the batch itself, or another set of the same
    /// length walked with the same sites).
    pub mean_from: Option<&'a Prepared<'a>>,
    /// The derangement of a resample ablation: sequence b takes sequence `perm[b]`'s values.
    pub perm: Vec<usize>,
}

impl<'a> Ablation<'a> {
    pub fn new(
        kind: AblationKind,
        batch: usize,
        seed: u64,
        mean_from: Option<&'a Prepared<'a>>,
    ) -> Self {
        Self {
            kind,
            mean_from,
            perm: derangement(batch, seed),
        }
    }

    /// The replacement at (layer, site) for `copies` copies of `p`'s batch.
    fn value(
        &self,
        p: &Prepared,
        layer: usize,
        site: HeadSite,
        copies: usize,
    ) -> Result<Tensor<4>> {
        let device = p.resid[0].device();
        Ok(match self.kind {
            AblationKind::Zero => Tensor::zeros([1, 1, 1, 1], &device),
            AblationKind::Mean => {
                let r = self.mean_from.unwrap_or(p);
                let a = r.heads(layer, site)?; // (B_ref, n, S, d_h)
                if a.dims()[2] != p.resid[0].dims()[1] {
                    bail!("the mean-ablation reference set has another length than the batch");
                }
                a.mean_dim(0) // (1, n, S, d_h)
            }
            AblationKind::Resample => {
                let a = p.heads(layer, site)?;
                let idx: Vec<i64> = self.perm.iter().map(|&i| i as i64).collect();
                let idx =
                    Tensor::<1, Int>::from_data(TensorData::new(idx, [self.perm.len()]), &device);
                let a = a.select(0, idx); // (B, n, S, d_h): sequence b gets perm[b]'s
                if copies == 1 {
                    a
                } else {
                    Tensor::cat(vec![a; copies], 0)
                }
            }
            AblationKind::MoveToFirst => {
                let cfg = &p.model.cfg;
                let s = cfg.sink_tokens + p.batch.len;
                let slots = cfg.attention.slot.slot_columns();
                let mut row = vec![0f32; slots + s];
                row[slots + cfg.sink_tokens] = 1.0; // the first real token
                Tensor::from_data(TensorData::new(row, [1, 1, 1, slots + s]), &device)
            }
        })
    }
}

/// Check that every unit exists and fits the ablation kind.
fn check_units(p: &Prepared, ab: &Ablation, sets: &[Vec<Unit>]) -> Result<()> {
    let cfg = &p.model.cfg;
    let (h, kv) = (cfg.n_heads, cfg.kv_heads());
    for u in sets.iter().flatten() {
        match *u {
            Unit::Head { layer, head } if layer < cfg.n_layers && head < h => {}
            Unit::KvGroup { layer, group } if layer < cfg.n_layers && group < kv => {
                if ab.kind == AblationKind::MoveToFirst {
                    bail!(
                        "move-to-first acts on a query head's pattern, not on a key/value group ({})",
                        u.label()
                    );
                }
            }
            _ => bail!(
                "{}: the model has layers 0..{}, heads 0..{h} and key/value groups 0..{kv}",
                u.label(),
                cfg.n_layers
            ),
        }
    }
    Ok(())
}

/// (set i, head or group j): unit j of layer l is in set i.
type SetIndex = (usize, usize);

/// The edits that ablate set i of `sets` in copy i of `p`'s batch, and the layer the walk
/// restarts at (None when no set has a unit).
pub fn hooks_for(
    p: &Prepared,
    ab: &Ablation,
    sets: &[Vec<Unit>],
) -> Result<Option<(usize, HookSet)>> {
    check_units(p, ab, sets)?;
    let cfg = &p.model.cfg;
    let (h, kv) = (cfg.n_heads, cfg.kv_heads());
    let b = p.batch.batch;
    let n_sink = cfg.sink_tokens;
    let s = n_sink + p.batch.len;
    let device = p.resid[0].device();
    let k = sets.len();
    let rows = k * b;
    let mut layers: BTreeMap<usize, (Vec<SetIndex>, Vec<SetIndex>)> = BTreeMap::new();
    for (i, set) in sets.iter().enumerate() {
        for u in set {
            let e = layers.entry(u.layer()).or_default();
            match *u {
                Unit::Head { head, .. } => e.0.push((i, head)),
                Unit::KvGroup { group, .. } => e.1.push((i, group)),
            }
        }
    }
    let Some(&start) = layers.keys().next() else {
        return Ok(None);
    };
    let mut hooks = HookSet::new();
    for (&l, (heads, groups)) in &layers {
        if !heads.is_empty() {
            let on = |r: usize, j: usize| heads.contains(&(r / b, j));
            let (site, mask) = match ab.kind {
                // real query rows only: a sink token's query cannot see the first real token
                AblationKind::MoveToFirst => {
                    let data: Vec<bool> = (0..rows * h * s)
                        .map(|i| on(i / (h * s), (i / s) % h) && i % s >= n_sink)
                        .collect();
                    let m = Tensor::<4, Bool>::from_data(
                        TensorData::new(data, [rows, h, s, 1]),
                        &device,
                    );
                    (HeadSite::Pattern, m)
                }
                _ => (HeadSite::Z, unit_mask(rows, h, &device, on)),
            };
            let value = ab.value(p, l, site, k)?;
            hooks = hooks.edit_heads(
                l,
                site,
                Edit::Replace {
                    value,
                    mask: Some(Box::new(mask)),
                },
            );
        }
        if !groups.is_empty() {
            let mask = unit_mask(rows, kv, &device, |r, j| groups.contains(&(r / b, j)));
            for site in [HeadSite::K, HeadSite::V] {
                let value = ab.value(p, l, site, k)?;
                let m = Box::new(mask.clone());
                hooks = hooks.edit_heads(
                    l,
                    site,
                    Edit::Replace {
                        value,
                        mask: Some(m),
                    },
                );
            }
        }
    }
    Ok(Some((start, hooks)))
}

/// The metric of the batch with each set of `sets` ablated (all of a set's units at once), one
/// copy of the batch per set, as many sets per walk as memory allows.
pub fn ablate_sets(
    p: &Prepared,
    ab: &Ablation,
    sets: &[Vec<Unit>],
    done: &mut dyn FnMut(usize),
) -> Result<Vec<f64>> {
    check_units(p, ab, sets)?;
    let b = p.batch.batch;
    let mut out = Vec::with_capacity(sets.len());
    for chunk in sets.chunks(p.max_copies()) {
        let k = chunk.len();
        let Some((start, mut hooks)) = hooks_for(p, ab, chunk)? else {
            out.extend(std::iter::repeat_n(p.metric(), k));
            continue;
        };
        let end = p.walk_copies(start, k, &mut hooks);
        let r = p.metric_rows(end, k);
        for i in 0..k {
            out.push(aggregate(&r[i * b..(i + 1) * b]));
        }
        done(k);
    }
    Ok(out)
}

/// Every unit of the model on its own: `[layer][head]` (or `[layer][group]` with `groups`),
/// the metric with that unit ablated.
pub fn scan(
    p: &Prepared,
    ab: &Ablation,
    groups: bool,
    done: &mut dyn FnMut(usize),
) -> Result<Vec<Vec<f64>>> {
    let cfg = &p.model.cfg;
    let per = if groups { cfg.kv_heads() } else { cfg.n_heads };
    let mut out = Vec::with_capacity(cfg.n_layers);
    for layer in 0..cfg.n_layers {
        let sets: Vec<Vec<Unit>> = (0..per)
            .map(|i| {
                vec![if groups {
                    Unit::KvGroup { layer, group: i }
                } else {
                    Unit::Head { layer, head: i }
                }]
            })
            .collect();
        out.push(ablate_sets(p, ab, &sets, &mut |_| {})?);
        done(layer);
    }
    Ok(out)
}

/// The matched-random control sets of a named set ([`matched_random`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Controls {
    /// Distinct sets, each as many units from each layer as the named set has there.
    pub sets: Vec<Vec<Unit>>,
    /// How many distinct matched sets exist (saturating at `u64::MAX`).
    pub distinct: u64,
    /// Every distinct set is among `sets`: the percentile is read off the exact
    /// distribution rather than a sample.
    pub exact: bool,
}

/// Up to `wanted` random sets matched to `named`: as many units from each layer as `named`
/// has there, drawn from that layer's other units (`per_layer` of them in a layer), no unit
/// twice in a set and no set twice. When at most `wanted` distinct matched sets exist, all of
/// them are returned, in a fixed order (the exact distribution); otherwise `wanted` distinct
/// ones drawn with a seeded generator.
pub fn matched_random(
    named: &[Unit],
    per_layer: usize,
    wanted: usize,
    seed: u64,
) -> Result<Controls> {
    let mut by_layer: BTreeMap<usize, Vec<Unit>> = BTreeMap::new();
    for u in named {
        by_layer.entry(u.layer()).or_default().push(*u);
    }
    // each layer's pool of other units and how many to take from it
    let mut layers: Vec<(Vec<Unit>, usize)> = Vec::with_capacity(by_layer.len());
    for (&layer, units) in &by_layer {
        let make = |i: usize| match units[0] {
            Unit::Head { .. } => Unit::Head { layer, head: i },
            Unit::KvGroup { .. } => Unit::KvGroup { layer, group: i },
        };
        let pool: Vec<Unit> = (0..per_layer)
            .map(make)
            .filter(|u| !units.contains(u))
            .collect();
        if pool.len() < units.len() {
            bail!(
                "no matched-random control: layer {layer} has only {} other {} for the {} named there",
                pool.len(),
                if pool.len() == 1 { "unit" } else { "units" },
                units.len()
            );
        }
        layers.push((pool, units.len()));
    }
    let distinct = layers.iter().fold(1u64, |acc, (pool, k)| {
        acc.saturating_mul(choose(pool.len(), *k))
    });
    if distinct <= wanted as u64 {
        // every distinct set: the product of each layer's combinations
        let mut sets: Vec<Vec<Unit>> = vec![Vec::new()];
        for (pool, k) in &layers {
            let combos = combinations(pool, *k);
            sets = sets
                .into_iter()
                .flat_map(|s| {
                    combos.iter().map(move |c| {
                        let mut s = s.clone();
                        s.extend(c.iter().copied());
                        s
                    })
                })
                .collect();
        }
        return Ok(Controls {
            sets,
            distinct,
            exact: true,
        });
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut seen = std::collections::BTreeSet::new();
    let mut sets = Vec::with_capacity(wanted);
    while sets.len() < wanted {
        let mut set = Vec::with_capacity(named.len());
        for (pool, k) in &layers {
            let mut pool = pool.clone();
            pool.shuffle(&mut rng);
            let mut take: Vec<Unit> = pool.into_iter().take(*k).collect();
            take.sort();
            set.extend(take);
        }
        if seen.insert(set.clone()) {
            sets.push(set);
        }
    }
    Ok(Controls {
        sets,
        distinct,
        exact: false,
    })
}

/// `n` choose `k` (saturating).
fn choose(n: usize, k: usize) -> u64 {
    let k = k.min(n - k.min(n));
    (0..k).fold(1u64, |acc, i| {
        // acc · (n − i) / (i + 1) is an integer at every step
        let num = (acc as u128) * (n - i) as u128 / (i + 1) as u128;
        u64::try_from(num).unwrap_or(u64::MAX)
    })
}

/// Every `k`-subset of `pool`, in lexicographic order of positions.
fn combinations(pool: &[Unit], k: usize) -> Vec<Vec<Unit>> {
    let mut out = Vec::new();
    let mut idx: Vec<usize> = (0..k).collect();
    if k > pool.len() {
        return out;
    }
    loop {
        out.push(idx.iter().map(|&i| pool[i]).collect());
        // the rightmost index that can still move
        let Some(i) = (0..k).rev().find(|&i| idx[i] < pool.len() - k + i) else {
            return out;
        };
        idx[i] += 1;
        for j in i + 1..k {
            idx[j] = idx[j - 1] + 1;
        }
    }
}

/// The named value's percentile among the controls: 100 · (#below + ½ #equal) / #controls.
pub fn percentile(value: f64, controls: &[f64]) -> f64 {
    let below = controls.iter().filter(|&&c| c < value).count() as f64;
    let equal = controls.iter().filter(|&&c| c == value).count() as f64;
    100.0 * (below + 0.5 * equal) / controls.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_match_the_named_layers_and_avoid_the_named_heads() {
        let named = [
            Unit::Head { layer: 1, head: 2 },
            Unit::Head { layer: 1, head: 5 },
            Unit::Head { layer: 4, head: 0 },
        ];
        // C(4, 2) · C(5, 1) = 30 distinct sets: 20 of them drawn, each once
        let c = matched_random(&named, 6, 20, 3).unwrap();
        assert_eq!((c.sets.len(), c.distinct, c.exact), (20, 30, false));
        let mut seen = std::collections::BTreeSet::new();
        let mut heads = std::collections::BTreeSet::new();
        for s in &c.sets {
            assert_eq!(s.iter().filter(|u| u.layer() == 1).count(), 2);
            assert_eq!(s.iter().filter(|u| u.layer() == 4).count(), 1);
            assert!(s.iter().all(|u| !named.contains(u)));
            let distinct: std::collections::BTreeSet<_> = s.iter().collect();
            assert_eq!(distinct.len(), 3);
            assert!(seen.insert(s.clone()), "a set drawn twice: {s:?}");
            heads.extend(s.iter().copied());
        }
        assert_eq!(
            heads.len(),
            4 + 5,
            "every other head of layers 1 and 4 gets drawn"
        );
        assert_eq!(c, matched_random(&named, 6, 20, 3).unwrap());
        // 50 wanted, 30 exist: all 30, the exact distribution
        let all = matched_random(&named, 6, 50, 3).unwrap();
        assert_eq!((all.sets.len(), all.distinct, all.exact), (30, 30, true));
        let unique: std::collections::BTreeSet<_> = all.sets.iter().collect();
        assert_eq!(unique.len(), 30);
        // the case: one head of a 4-head layer has 3 matched sets, not 20 draws of them
        let one = matched_random(&[Unit::Head { layer: 0, head: 1 }], 4, 20, 0).unwrap();
        assert_eq!((one.sets.len(), one.distinct, one.exact), (3, 3, true));
        assert_eq!(choose(9, 3), 84);
        assert_eq!(choose(5, 0), 1);
        assert_eq!(choose(200, 100), u64::MAX, "saturates");
        let full = [
            Unit::Head { layer: 1, head: 0 },
            Unit::Head { layer: 1, head: 1 },
        ];
        let e = matched_random(&full, 2, 1, 0).unwrap_err().to_string();
        assert!(e.contains("layer 1 has only 0 other units"), "{e}");
        assert_eq!(percentile(3.0, &[1.0, 2.0, 3.0, 4.0]), 62.5);
        assert_eq!(percentile(9.0, &[1.0, 2.0]), 100.0);
        let d = derangement(7, 1);
        assert!(d.iter().enumerate().all(|(i, &j)| i != j));
        let mut sorted = d.clone();
        sorted.sort();
        assert_eq!(sorted, (0..7).collect::<Vec<_>>());
    }
}
