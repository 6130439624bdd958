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

use super::{Dataset, Domain};
use crate::config::{BbChain, BigramBackcopy, DataConfig, SyntheticConfig};
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
        self.offsets[t as usize % self.offsets.len()]
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

/// The generated dataset: one domain `bigram_backcopy` whose training records come from the
/// task seed and whose validation records from a second stream of it (disjoint draws), each
/// record `length` tokens; a word-level `tokenizer.json` (t0 … t{V−1}) in the cache
/// directory so that the run's tokenizer loads in Python's `tokenizers`.
pub fn dataset(
    cfg: &DataConfig,
    task: &SyntheticConfig,
    log: &mut dyn FnMut(&str),
) -> Result<Dataset> {
    let SyntheticConfig::BigramBackcopy(bb) = task;
    let length = bb.length.ok_or_else(|| {
        anyhow!("data.synthetic.length is unset (it defaults to model.ctx + 1 when loading)")
    })?;
    let t0 = std::time::Instant::now();
    let gen_ = BbTask::new(bb);
    let shift = |xs: Vec<u32>| -> Vec<u32> { xs.into_iter().map(|x| x + FIRST_ID).collect() };
    let n_val = ((bb.sequences as f64) * cfg.val_fraction).ceil() as usize;
    let train = shift(gen_.records(bb.sequences, length, bb.task_seed ^ 0x7EA1_0000_0000_0001));
    let val = shift(gen_.records(n_val.max(1), length, bb.task_seed ^ 0x7EA1_0000_0000_0002));
    let after_trigger = train
        .chunks_exact(length)
        .flat_map(|r| r.windows(2))
        .filter(|w| gen_.is_trigger(w[0] - FIRST_ID))
        .count();
    log(&format!(
        "data: bigram-backcopy over the {:?} chain, vocab {} ({} triggers, offsets {:?}), {} train / {} val records of {length} tokens \
         ({:.1}% of targets follow a trigger), generated in {:.2} s",
        bb.chain,
        gen_.vocab,
        bb.triggers,
        bb.offsets,
        bb.sequences,
        n_val.max(1),
        100.0 * after_trigger as f64 / (bb.sequences * (length - 1)) as f64,
        t0.elapsed().as_secs_f64()
    ));
    let words = gen_.token_names();
    let tokenizer = Tokenizer::word_level(&words)?;
    let key = crate::data::hex(&Sha256::digest(
        format!("{task:?}|{}", cfg.val_fraction).as_bytes(),
    ));
    let dir = cfg
        .cache_dir
        .join(format!("bigram_backcopy-{}", &key[..16]));
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
            name: "bigram_backcopy".into(),
            train: train.into(),
            val: val.into(),
            record: Some(length),
        }],
        dir,
    })
}

/// Query groups of a probe batch's `inputs` on a synthetic task: 0 where the input is no
/// trigger, 1 + i where it is trigger i; with the number of groups. `None` on text.
pub fn query_groups(cfg: &DataConfig, inputs: &[u32]) -> Option<(Vec<usize>, usize)> {
    let SyntheticConfig::BigramBackcopy(bb) = cfg.synthetic.as_ref()?;
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
