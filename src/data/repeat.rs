//! Repeated random segments: the probe of the head scores, [first, R, R, …] (Olsson et al.;
//! TransformerLens and ARENA score induction heads on it, docs/reference.md §11).

use super::Batch;
use crate::tokenizer::RegularIds;
use anyhow::{Result, bail};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeSet;

/// How many ids `ids` holds.
pub fn regular_count(ids: &RegularIds) -> usize {
    match ids {
        RegularIds::Range(lo, hi) => (hi - lo) as usize,
        RegularIds::List(v) => v.len(),
    }
}

/// `k` distinct ids drawn uniformly (without replacement) from `ids`, in draw order.
pub fn distinct(ids: &RegularIds, k: usize, rng: &mut ChaCha8Rng) -> Vec<u32> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(k);
    while out.len() < k {
        let t = ids.draw(rng);
        if seen.insert(t) {
            out.push(t);
        }
    }
    out
}

/// The repeat probe: `sequences` sequences [first, R, R, …] with R = `n` distinct ids drawn
/// uniformly from `ids` (the non-special vocabulary) and repeated `reps` times, first = `bos`
/// when the run trains with BOS, else one more id distinct from R; T = reps·n + 1. Every
/// position but the last predicts the next token (targets and mask; the last is masked), so
/// the repeats' loss is the copying loss. Seeded: the same arguments give the same batch.
pub fn repeat_probe(
    ids: &RegularIds,
    n: usize,
    reps: usize,
    sequences: usize,
    seed: u64,
    bos: Option<u32>,
) -> Result<Batch> {
    let need = n + usize::from(bos.is_none());
    let have = regular_count(ids);
    if n < 2 || reps < 2 || sequences == 0 {
        bail!(
            "repeat probe: need --n ≥ 2, --reps ≥ 2 and --sequences ≥ 1 (got {n}, {reps}, {sequences})"
        );
    }
    if need > have {
        bail!(
            "repeat probe: {need} distinct tokens needed (--n {n}{}) but the vocabulary has {have} \
             non-special tokens; lower --n",
            if bos.is_none() {
                " and a first token"
            } else {
                ""
            }
        );
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let t = reps * n + 1;
    let mut inputs = Vec::with_capacity(sequences * t);
    let mut targets = Vec::with_capacity(sequences * t);
    let mut mask = Vec::with_capacity(sequences * t);
    for _ in 0..sequences {
        let mut draw = distinct(ids, need, &mut rng);
        let first = bos.unwrap_or_else(|| draw.pop().expect("one more id"));
        let mut seq = vec![first];
        for _ in 0..reps {
            seq.extend_from_slice(&draw);
        }
        inputs.extend_from_slice(&seq);
        targets.extend(seq[1..].iter().copied().chain([0]));
        mask.extend((0..t).map(|i| if i + 1 < t { 1.0 } else { 0.0 }));
    }
    Ok(Batch {
        batch: sequences,
        len: t,
        inputs,
        targets,
        loss_mask: mask,
        domains: vec![0; sequences],
    })
}

/// The live head scores' probe of a training run (`metrics.heads`): [`repeat_probe`] with
/// reps 2 over the dataset's ordinary tokens, BOS first when the run uses BOS; `None` when
/// disabled.
pub fn live_probe(
    cfg: &crate::config::HeadMetricsConfig,
    data: &super::Dataset,
    bos: bool,
) -> Result<Option<Batch>> {
    if !cfg.enabled {
        return Ok(None);
    }
    let n = cfg.n;
    let tok = &data.tokenizer;
    let ids = tok.regular_ids(data.vocab_size() as u32);
    let b = repeat_probe(
        &ids,
        n,
        2,
        cfg.sequences,
        cfg.seed,
        bos.then_some(tok.bos_id),
    )
    .map_err(|e| {
        anyhow::anyhow!(
            "metrics.heads: {e} (set metrics.heads.n lower, or metrics.heads.enabled = false)"
        )
    })?;
    Ok(Some(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repeat_probe_repeats_distinct_tokens_after_the_first() {
        let ids = RegularIds::Range(2, 66);
        let b = repeat_probe(&ids, 5, 3, 4, 7, Some(0)).unwrap();
        assert_eq!((b.batch, b.len), (4, 16));
        for s in b.inputs.chunks_exact(16) {
            assert_eq!(s[0], 0);
            let r = &s[1..6];
            assert_eq!(r.iter().collect::<BTreeSet<_>>().len(), 5);
            assert!(r.iter().all(|&x| (2..66).contains(&x)));
            assert_eq!(&s[6..11], r);
            assert_eq!(&s[11..16], r);
        }
        assert_eq!(&b.targets[..15], &b.inputs[1..16]);
        assert_eq!(b.loss_mask[15], 0.0);
        assert_eq!(b, repeat_probe(&ids, 5, 3, 4, 7, Some(0)).unwrap());
        assert_ne!(b, repeat_probe(&ids, 5, 3, 4, 8, Some(0)).unwrap());
        // without BOS the first token is one more distinct regular id
        let b = repeat_probe(&ids, 5, 2, 2, 7, None).unwrap();
        for s in b.inputs.chunks_exact(11) {
            assert!(!s[1..6].contains(&s[0]) && s[0] >= 2);
        }
        let e = repeat_probe(&RegularIds::Range(2, 6), 5, 2, 1, 0, None).unwrap_err();
        assert!(e.to_string().contains("6 distinct tokens needed"), "{e}");
    }
}
