//! Synthetic data on which attention sinks form in small models within minutes.
//!
//! **Bigram-Backcopy** (Guo et al. 2024, "Active-Dormant Attention Heads", arXiv 2410.13835;
//! docs/reference.md §10). A fixed bigram Markov chain over `vocab` tokens plus `triggers`
//! trigger tokens: after a trigger the next token is a copy of the token `offset` positions
//! before the trigger; everywhere else it is drawn from the bigram row of the current token.
//! A head that copies on triggers must do nothing elsewhere ("dormant"); softmax has to put
//! its mass somewhere, and it learns to put it on BOS: an attention sink, with the BOS value
//! driven towards 0 (the value-state drain).
//!
//! The paper's chain is tiny-Shakespeare's character bigram (65 characters; triggers ' ', 'e',
//! 't'). `chain = "shakespeare_chars"` builds the same kind of chain from the embedded
//! Shakespeare (the complete works, 5.1M characters, 88 distinct): π = the character
//! frequencies, row c = the empirical P(next | c) over adjacent pairs, tokens ordered by
//! descending frequency (ties by code point), so the triggers are ' ', 'e', 't', … as in the
//! paper. The default `chain = "zipf"` is a self-contained stand-in with the statistics that
//! matter: a Zipf unigram π_r ∝ r^−zipf over the tokens (token 0 most frequent), every bigram
//! row drawn from Dirichlet(concentration · π) (so its mean is π) from `task_seed`. Either
//! way the triggers are the `triggers` most frequent tokens (ids 0..triggers). Trigger group g = i mod |offsets| copies `offsets[g]` positions back (one
//! offset, 1, is the paper's task; several give every head of a layer its own copy job).
//!
//! A sequence x_1 x_2 … (BOS, prepended by `data.bos`, is x_0): x_1 ~ π without the
//! triggers; for t ≥ 2, if x_{t−1} is a trigger of offset g and t − 1 − g ≥ 1, then
//! x_t = x_{t−1−g}; otherwise x_t ~ row x_{t−1} of the bigram. Training and validation
//! sequences are independent draws ("records"), each long enough for one training window.
//!
//! **Repeat** (Olsson et al. 2022, "In-context Learning and Induction Heads"; docs/reference.md
//! §11). Every record is a run of segments of n ~ U{min_segment..=max_segment} tokens; each
//! segment after the first is, with probability `copy_probability`, a copy of a uniformly
//! chosen earlier fresh segment of the record, else fresh tokens uniform over the vocabulary.
//! A fresh token cannot be predicted (ln V nats); a copied one can, once its segment has
//! started, by a two-layer circuit: a layer-0 previous-token head writes "the token before me"
//! into each position, and a layer-1 induction head attends from the current token to the
//! position after its earlier occurrence and copies that token. Copies sit at every distance,
//! so no fixed-offset head can stand in for the circuit (with copies always adjacent, R R, a
//! small RoPE model learns fixed-offset heads instead). A 2-layer attention-only model learns
//! the circuit in a phase change, visible in the live head scores (`heads/previous/*`,
//! `heads/induction/*`) and the loss on repeated targets
//! (`repeat/loss_repeated`, [`repeated_targets`]).

use super::{Dataset, Domain};
use crate::config::{BbChain, BigramBackcopy, DataConfig, RepeatTask, SyntheticConfig};
use crate::tokenizer::Tokenizer;
use anyhow::{Context, Result, anyhow};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};

/// The generator of one Bigram-Backcopy task.
#[derive(Debug, Clone)]
pub struct BbTask {
    pub vocab: usize,
    pub triggers: usize,
    pub offsets: Vec<usize>,
    /// The unigram π (sums to 1).
    pub unigram: Vec<f64>,
    /// Cumulative bigram rows, `vocab × vocab`.
    rows: Vec<f64>,
    /// Cumulative first-token distribution (π without the triggers).
    first: Vec<f64>,
    /// The character of each token (chain "shakespeare_chars").
    chars: Option<Vec<char>>,
}

fn cumulative(p: &[f64]) -> Vec<f64> {
    let total: f64 = p.iter().sum();
    let mut acc = 0.0;
    p.iter()
        .map(|x| {
            acc += x / total;
            acc
        })
        .collect()
}

fn draw(cum: &[f64], rng: &mut ChaCha8Rng) -> u32 {
    let u: f64 = rng.r#gen();
    cum.partition_point(|&c| c <= u).min(cum.len() - 1) as u32
}

/// A Gamma(α, 1) draw (Marsaglia & Tsang 2000; α < 1 through Gamma(α + 1) · U^(1/α)).
fn gamma(alpha: f64, rng: &mut ChaCha8Rng) -> f64 {
    if alpha < 1.0 {
        let u: f64 = rng.r#gen::<f64>().max(f64::MIN_POSITIVE);
        return gamma(alpha + 1.0, rng) * u.powf(1.0 / alpha);
    }
    let d = alpha - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(rng);
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u: f64 = rng.r#gen();
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

/// A standard normal draw (Box–Muller).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = rng.r#gen::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.r#gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

impl BbTask {
    pub fn new(cfg: &BigramBackcopy) -> Self {
        let (unigram, rows, chars) = match cfg.chain {
            BbChain::Zipf => {
                let (unigram, rows) = zipf_chain(cfg);
                (unigram, rows, None)
            }
            BbChain::ShakespeareChars => {
                let (unigram, rows, chars) = char_chain(super::embedded_text("shakespeare"));
                (unigram, rows, Some(chars))
            }
        };
        let v = unigram.len();
        let first: Vec<f64> = unigram
            .iter()
            .enumerate()
            .map(|(i, p)| if i < cfg.triggers { 0.0 } else { *p })
            .collect();
        Self {
            vocab: v,
            triggers: cfg.triggers,
            offsets: cfg.offsets.clone(),
            unigram,
            rows,
            first: cumulative(&first),
            chars,
        }
    }

    /// The token strings of the vocabulary: `t0` … `t{V−1}` on the Zipf chain, the characters
    /// on a text chain (space as `␣`, newline as `⏎`, so no token holds whitespace).
    pub fn token_names(&self) -> Vec<String> {
        match &self.chars {
            None => (0..self.vocab).map(token_name).collect(),
            Some(cs) => cs
                .iter()
                .map(|&c| match c {
                    ' ' => "␣".to_string(),
                    '\n' => "⏎".to_string(),
                    c if c.is_whitespace() => format!("U+{:04X}", c as u32),
                    c => c.to_string(),
                })
                .collect(),
        }
    }

    pub fn is_trigger(&self, t: u32) -> bool {
        (t as usize) < self.triggers
    }

    /// Copy offset of trigger `t`.
    fn offset(&self, t: u32) -> usize {
        crate::config::trigger_offset(&self.offsets, t as usize)
    }

    /// One sequence x_1..x_len (BOS not included).
    pub fn sequence(&self, len: usize, rng: &mut ChaCha8Rng) -> Vec<u32> {
        let mut x: Vec<u32> = Vec::with_capacity(len);
        if len == 0 {
            return x;
        }
        x.push(draw(&self.first, rng));
        while x.len() < len {
            // x is 0-based here: x[i] is x_{i+1}; the previous token x_{t−1} is x[n − 1]
            let n = x.len();
            let prev = x[n - 1];
            let next = if self.is_trigger(prev) && n > self.offset(prev) {
                x[n - 1 - self.offset(prev)]
            } else {
                let row = prev as usize * self.vocab;
                draw(&self.rows[row..row + self.vocab], rng)
            };
            x.push(next);
        }
        x
    }

    /// `n` independent sequences of `len` tokens, concatenated, from `seed`.
    pub fn records(&self, n: usize, len: usize, seed: u64) -> Vec<u32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut out = Vec::with_capacity(n * len);
        for _ in 0..n {
            out.extend(self.sequence(len, &mut rng));
        }
        out
    }

    /// The bigram row of token `t` (probabilities).
    pub fn row(&self, t: u32) -> Vec<f64> {
        let r = &self.rows[t as usize * self.vocab..(t as usize + 1) * self.vocab];
        let mut prev = 0.0;
        r.iter()
            .map(|c| {
                let p = c - prev;
                prev = *c;
                p
            })
            .collect()
    }
}

/// The Zipf–Dirichlet chain: (π, cumulative rows).
fn zipf_chain(cfg: &BigramBackcopy) -> (Vec<f64>, Vec<f64>) {
    let v = cfg.vocab;
    let weights: Vec<f64> = (1..=v).map(|r| (r as f64).powf(-cfg.zipf)).collect();
    let total: f64 = weights.iter().sum();
    let unigram: Vec<f64> = weights.iter().map(|w| w / total).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.task_seed);
    let mut rows = Vec::with_capacity(v * v);
    for _ in 0..v {
        let row: Vec<f64> = unigram
            .iter()
            .map(|p| gamma(cfg.concentration * p, &mut rng).max(1e-300))
            .collect();
        rows.extend(cumulative(&row));
    }
    (unigram, rows)
}

/// The character bigram chain of a text: (π, cumulative rows, the characters), tokens ordered
/// by descending count (ties by code point). π_c = count(c) / n; row c = count(c, d) /
/// count(c, ·) over the n − 1 adjacent pairs (a character seen only at the very end, with no
/// successor, gets π as its row).
pub fn char_chain(text: &str) -> (Vec<f64>, Vec<f64>, Vec<char>) {
    let mut counts: std::collections::BTreeMap<char, u64> = Default::default();
    for c in text.chars() {
        *counts.entry(c).or_default() += 1;
    }
    let mut chars: Vec<char> = counts.keys().copied().collect();
    chars.sort_by_key(|c| (std::cmp::Reverse(counts[c]), *c));
    let id: std::collections::HashMap<char, usize> =
        chars.iter().enumerate().map(|(i, &c)| (c, i)).collect();
    let v = chars.len();
    let n: u64 = counts.values().sum();
    let unigram: Vec<f64> = chars.iter().map(|c| counts[c] as f64 / n as f64).collect();
    let mut pairs = vec![0u64; v * v];
    let mut it = text.chars().map(|c| id[&c]);
    if let Some(mut prev) = it.next() {
        for next in it {
            pairs[prev * v + next] += 1;
            prev = next;
        }
    }
    let mut rows = Vec::with_capacity(v * v);
    for r in pairs.chunks_exact(v) {
        if r.iter().sum::<u64>() == 0 {
            rows.extend(cumulative(&unigram));
        } else {
            rows.extend(cumulative(&r.iter().map(|&x| x as f64).collect::<Vec<_>>()));
        }
    }
    (unigram, rows, chars)
}

/// Token ids: `<|bos|>` = 0, `<|endoftext|>` = 1, task token i ↦ i + 2 (the tokenizer's
/// specials come first, as for every sinklab tokenizer).
pub const FIRST_ID: u32 = 2;

/// The generated dataset of `task`: one domain (`bigram_backcopy` or `repeat`) whose training
/// records come from the task seed and whose validation records from a second stream of it
/// (disjoint draws), each record `length` tokens; a word-level `tokenizer.json` (t0 … t{V−1})
/// in the cache directory so that the run's tokenizer loads in Python's `tokenizers`.
pub fn dataset(
    cfg: &DataConfig,
    task: &SyntheticConfig,
    log: &mut dyn FnMut(&str),
) -> Result<Dataset> {
    let length = task.length().ok_or_else(|| {
        anyhow!("data.synthetic.length is unset (it defaults to model.ctx + 1 when loading)")
    })?;
    let t0 = std::time::Instant::now();
    let sequences = task.sequences();
    let n_val = (((sequences as f64) * cfg.val_fraction).ceil() as usize).max(1);
    let shift = |xs: Vec<u32>| -> Vec<u32> { xs.into_iter().map(|x| x + FIRST_ID).collect() };
    let (seed_train, seed_val) = (0x7EA1_0000_0000_0001, 0x7EA1_0000_0000_0002);
    let (train, val, words) = match task {
        SyntheticConfig::BigramBackcopy(bb) => {
            let gen_ = BbTask::new(bb);
            let train = shift(gen_.records(sequences, length, bb.task_seed ^ seed_train));
            let val = shift(gen_.records(n_val, length, bb.task_seed ^ seed_val));
            let after_trigger = train
                .chunks_exact(length)
                .flat_map(|r| r.windows(2))
                .filter(|w| gen_.is_trigger(w[0] - FIRST_ID))
                .count();
            log(&format!(
                "data: bigram-backcopy over the {:?} chain, vocab {} ({} triggers, offsets {:?}), {sequences} train / {n_val} val records of {length} tokens \
                 ({:.1}% of targets follow a trigger), generated in {:.2} s",
                bb.chain,
                gen_.vocab,
                bb.triggers,
                bb.offsets,
                100.0 * after_trigger as f64 / (sequences * (length - 1)) as f64,
                t0.elapsed().as_secs_f64()
            ));
            (train, val, gen_.token_names())
        }
        SyntheticConfig::Repeat(r) => {
            let train = shift(repeat_records(
                r,
                sequences,
                length,
                r.task_seed ^ seed_train,
            ));
            let val = shift(repeat_records(r, n_val, length, r.task_seed ^ seed_val));
            let repeated = train
                .chunks_exact(length)
                .map(|rec| repeated_targets(rec).iter().filter(|&&x| x).count())
                .sum::<usize>();
            log(&format!(
                "data: repeat task, vocab {}, segments of {}..={} tokens, copies of earlier ones \
                 with probability {}, {sequences} train / {n_val} val records of {length} tokens ({:.1}% of targets \
                 repeat an earlier continuation), generated in {:.2} s",
                r.vocab,
                r.min_segment,
                r.max_segment,
                r.copy_probability,
                100.0 * repeated as f64 / (sequences * (length - 1)) as f64,
                t0.elapsed().as_secs_f64()
            ));
            (train, val, (0..r.vocab).map(token_name).collect())
        }
    };
    let tokenizer = Tokenizer::word_level(&words)?;
    let key = crate::data::hex(&Sha256::digest(
        format!("{task:?}|{}", cfg.val_fraction).as_bytes(),
    ));
    let dir = cfg
        .cache_dir
        .join(format!("{}-{}", task.kind(), &key[..16]));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("tokenizer.json");
    if !path.exists() {
        // several runs of a sweep may start at once: write a private file, then rename
        let tmp = dir.join(format!("tokenizer.json.tmp-{}", std::process::id()));
        tokenizer.save(&tmp)?;
        std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(Dataset {
        tokenizer,
        domains: vec![Domain {
            name: task.kind().into(),
            train: train.into(),
            val: val.into(),
            record: Some(length),
        }],
        dir,
    })
}

/// `n` records of `len` tokens of the repeat task (ids 0..vocab, not shifted), from `seed`:
/// segments of min_segment..=max_segment tokens, each a copy of a uniformly chosen earlier
/// fresh segment with probability `copy_probability` (after the first), else fresh tokens:
/// from the segment's third on σ(the token two before) with probability `skip_bigram`, else
/// uniform; the last cut at the record's end.
pub fn repeat_records(cfg: &RepeatTask, n: usize, len: usize, seed: u64) -> Vec<u32> {
    // σ: a fixed permutation of the vocabulary (of the task, not of the stream's seed)
    let mut sigma: Vec<u32> = (0..cfg.vocab as u32).collect();
    let mut task_rng = ChaCha8Rng::seed_from_u64(cfg.task_seed ^ 0x5167_0000_0000_0000);
    for i in (1..sigma.len()).rev() {
        sigma.swap(i, task_rng.gen_range(0..=i));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(n * len);
    for _ in 0..n {
        let start = out.len();
        // the record's fresh segments, as ranges of `out`
        let mut fresh: Vec<std::ops::Range<usize>> = Vec::new();
        while out.len() - start < len {
            if !fresh.is_empty() && rng.gen_bool(cfg.copy_probability) {
                let r = fresh[rng.gen_range(0..fresh.len())].clone();
                out.extend_from_within(r);
            } else {
                let k = rng.gen_range(cfg.min_segment..=cfg.max_segment);
                let at = out.len();
                for i in 0..k {
                    let t = if i >= 2 && rng.gen_bool(cfg.skip_bigram) {
                        sigma[out[out.len() - 2] as usize]
                    } else {
                        rng.gen_range(0..cfg.vocab as u32)
                    };
                    out.push(t);
                }
                fresh.push(at..at + k);
            }
        }
        out.truncate(start + len);
    }
    out
}

/// Which next-token targets of one sequence `x` a perfect induction head predicts: target i
/// (the token x_{i+1}) is "repeated" when x_i occurred before and the token that followed its
/// most recent earlier occurrence is x_{i+1}. One entry per target (len(x) − 1).
pub fn repeated_targets(x: &[u32]) -> Vec<bool> {
    let mut last = std::collections::HashMap::new();
    let mut out = Vec::with_capacity(x.len().saturating_sub(1));
    for i in 0..x.len().saturating_sub(1) {
        out.push(
            last.get(&x[i])
                .is_some_and(|&j: &usize| x[j + 1] == x[i + 1]),
        );
        last.insert(x[i], i);
    }
    out
}

/// The repeat task's validation batch split into the targets a perfect induction head
/// predicts ([`repeated_targets`]) and every other target, as two batches with complementary
/// loss masks; `None` on other data.
pub fn split_repeated(cfg: &DataConfig, b: &super::Batch) -> Option<(super::Batch, super::Batch)> {
    let Some(SyntheticConfig::Repeat(_)) = cfg.synthetic.as_ref() else {
        return None;
    };
    let (mut repeated, mut fresh) = (b.clone(), b.clone());
    for (s, x) in b.inputs.chunks_exact(b.len).enumerate() {
        // the targets of a sequence are its inputs shifted by one, plus the last target
        let last = b.targets[s * b.len + b.len - 1];
        let seq: Vec<u32> = x.iter().copied().chain([last]).collect();
        for (i, r) in repeated_targets(&seq).into_iter().enumerate() {
            let k = s * b.len + i;
            if r {
                fresh.loss_mask[k] = 0.0;
            } else {
                repeated.loss_mask[k] = 0.0;
            }
        }
    }
    Some((repeated, fresh))
}

/// Query groups of a probe batch's `inputs` on a synthetic task: 0 where the input is no
/// trigger, 1 + i where it is trigger i; with the number of groups. `None` on text.
pub fn query_groups(cfg: &DataConfig, inputs: &[u32]) -> Option<(Vec<usize>, usize)> {
    let Some(SyntheticConfig::BigramBackcopy(bb)) = cfg.synthetic.as_ref() else {
        return None;
    };
    let range = FIRST_ID..FIRST_ID + bb.triggers as u32;
    let groups = inputs
        .iter()
        .map(|x| {
            if range.contains(x) {
                (x - FIRST_ID) as usize + 1
            } else {
                0
            }
        })
        .collect();
    Some((groups, bb.triggers + 1))
}

/// A fixed batch split into its copy targets (after a trigger) and its bigram targets (every
/// other target), as two batches with complementary loss masks; `None` on text.
pub fn split_targets(cfg: &DataConfig, b: &super::Batch) -> Option<(super::Batch, super::Batch)> {
    let (groups, _) = query_groups(cfg, &b.inputs)?;
    let (mut copy, mut bigram) = (b.clone(), b.clone());
    for (i, g) in groups.iter().enumerate() {
        if *g > 0 {
            bigram.loss_mask[i] = 0.0;
        } else {
            copy.loss_mask[i] = 0.0;
        }
    }
    Some((copy, bigram))
}

/// The vocabulary's token strings: `t0` … `t{vocab−1}` (the triggers are `t0`…), then the
/// special tokens.
pub fn token_name(i: usize) -> String {
    format!("t{i}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(offsets: Vec<usize>) -> BbTask {
        BbTask::new(&BigramBackcopy {
            offsets,
            ..BigramBackcopy::default()
        })
    }

    /// The repeat task's records are fresh segments of min..=max uniform tokens and copies of
    /// earlier fresh segments of the same record, cut at the record's end; seeded.
    #[test]
    fn repeat_records_copy_earlier_segments() {
        let cfg = RepeatTask {
            vocab: 1000,
            min_segment: 3,
            max_segment: 6,
            ..RepeatTask::default()
        };
        let recs = repeat_records(&cfg, 200, 64, 9);
        assert_eq!(recs.len(), 200 * 64);
        assert_eq!(recs, repeat_records(&cfg, 200, 64, 9));
        assert_ne!(recs, repeat_records(&cfg, 200, 64, 10));
        assert!(recs.iter().all(|&t| t < 1000));
        // with 1000 tokens, a repeated continuation is almost always a copy: about half the
        // segments are copies, so a good share of the targets repeat, at many distances
        let mut distances = std::collections::BTreeSet::new();
        let mut repeated = 0usize;
        for r in recs.chunks_exact(64) {
            for (i, rep) in repeated_targets(r).into_iter().enumerate() {
                if rep {
                    repeated += 1;
                    let j = (0..i).rev().find(|&j| r[j] == r[i]).unwrap();
                    distances.insert(i - j);
                }
            }
        }
        let share = repeated as f64 / (200 * 63) as f64;
        assert!((0.25..0.5).contains(&share), "repeated share {share}");
        assert!(distances.len() > 30, "copy distances {distances:?}");
        // no copies: every target fresh; always copies: all but the first segment repeat
        let none = RepeatTask {
            copy_probability: 0.0,
            skip_bigram: 0.0,
            ..cfg.clone()
        };
        let r = repeat_records(&none, 20, 64, 1);
        assert!(
            r.chunks_exact(64)
                .all(|x| repeated_targets(x).iter().filter(|&&b| b).count() < 2)
        );
        let fixed = RepeatTask {
            copy_probability: 1.0,
            min_segment: 5,
            max_segment: 5,
            ..cfg
        };
        let r = repeat_records(&fixed, 1, 20, 0);
        assert_eq!(&r[0..5], &r[5..10]);
        assert_eq!(&r[0..5], &r[15..20]);
    }

    /// Repeated targets: a target is repeated when its token followed the most recent earlier
    /// occurrence of the current token.
    #[test]
    fn repeated_targets_follow_the_most_recent_occurrence() {
        //          x: 7  1  2  3  1  2  3  1  9  1
        // target of i:  1  2  3  1  2  3  1  9  1
        let x = [7, 1, 2, 3, 1, 2, 3, 1, 9, 1];
        let r = repeated_targets(&x);
        assert_eq!(
            r,
            vec![false, false, false, false, true, true, true, false, false]
        );
        // the last: x[8] = 9 never seen before; x[7] = 1 last seen at 4, followed by 2 ≠ 9
        assert!(repeated_targets(&[]).is_empty());
        assert!(repeated_targets(&[4]).is_empty());
    }

    #[test]
    fn sequences_follow_the_backcopy_rule() {
        let t = task(vec![1]);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut triggers = 0usize;
        let mut total = 0usize;
        for _ in 0..200 {
            let x = t.sequence(64, &mut rng);
            assert!(!t.is_trigger(x[0]), "the first token is never a trigger");
            for i in 1..x.len() {
                if t.is_trigger(x[i - 1]) {
                    // a trigger at x[i−1] (i − 1 ≥ 1 since x[0] is no trigger) copies x[i−2]
                    assert_eq!(x[i], x[i - 2], "copy after a trigger");
                    triggers += 1;
                }
                total += 1;
            }
        }
        let share = triggers as f64 / total as f64;
        // the notes' Zipf stand-in: about 30% of positions follow a trigger
        assert!((0.2..0.4).contains(&share), "trigger share {share}");
    }

    #[test]
    fn multi_offset_triggers_copy_further_back() {
        let t = task(vec![1, 2]);
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let mut seen2 = 0;
        for _ in 0..100 {
            let x = t.sequence(64, &mut rng);
            for i in 1..x.len() {
                let p = x[i - 1];
                if t.is_trigger(p) {
                    let g = if p.is_multiple_of(2) { 1 } else { 2 };
                    if i > g {
                        assert_eq!(x[i], x[i - 1 - g]);
                        seen2 += usize::from(g == 2);
                    }
                }
            }
        }
        assert!(seen2 > 50);
    }

    #[test]
    fn bigram_rows_are_distributions_around_the_unigram() {
        let t = task(vec![1]);
        let mut mean = vec![0.0; t.vocab];
        for i in 0..t.vocab as u32 {
            let r = t.row(i);
            assert!((r.iter().sum::<f64>() - 1.0).abs() < 1e-9);
            mean.iter_mut()
                .zip(&r)
                .for_each(|(m, p)| *m += p / t.vocab as f64);
        }
        // E[row] = π: the mean row is close to the Zipf unigram (64 Dirichlet draws)
        for (m, p) in mean.iter().zip(&t.unigram) {
            assert!((m - p).abs() < 0.05 + 0.5 * p, "{m} vs {p}");
        }
        assert!(mean[0] > mean[10] && mean[10] > mean[60]);
        // the task is a pure function of its seed
        let again = task(vec![1]);
        assert_eq!(t.records(3, 10, 1), again.records(3, 10, 1));
    }
}
