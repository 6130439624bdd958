//! Data: corpora, token shards, splits and the deterministic sampler.
//!
//! A corpus is `"embedded"` (the public-domain corpus compiled into the binary,
//! `datasets/embedded`), a directory with `manifest.json` and one UTF-8 text file per domain,
//! documents separated by a line `<|doc|>` (format in `datasets/README.md`), or files on disk
//! per domain (`[data.sources.NAME]`: text, JSONL, Parquet, gzip/zstd; [`source`]).
//!
//! Preparation ([`prepare`]) streams the corpus into memory-mapped `u16`/`u32` token shards
//! with a manifest, cached under `data.cache_dir/NAME-KEY/`; each domain's stream is its
//! documents, each followed by `<|endoftext|>`, the last `val_fraction` held out for
//! validation. Concurrent preparations of one corpus share a lock; a failed one removes what it
//! created ([`lock`]).
//!
//! Sampling is a pure function of (seed, step, micro-batch index): a killed run that resumes at
//! step s reads exactly the batches the uninterrupted run read.

use crate::config::DataConfig;
use crate::tokenizer::{RegularIds, Tokenizer};
use anyhow::{Result, anyhow, bail};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::PathBuf;

mod lock;
mod prepare;
pub mod repeat;
mod source;
pub mod synthetic;
mod text;
mod tokens;

pub use prepare::{BATCH_BYTES, DomainManifest, Manifest, Shard, check, read_manifest};
pub use source::FileRead;
pub use synthetic::{BbTask, query_groups, split_repeated, split_targets};
pub use text::text_batch;
pub use tokens::{Tokens, Width};

pub const DOC_SEPARATOR: &str = "<|doc|>";

/// The embedded corpus (public-domain Shakespeare and Milton), compiled into the binary.
const EMBEDDED: &[(&str, &str)] = &[
    ("milton", include_str!("../../datasets/embedded/milton.txt")),
    (
        "shakespeare",
        include_str!("../../datasets/embedded/shakespeare.txt"),
    ),
];
/// One text of the embedded corpus by name ("milton", "shakespeare").
pub fn embedded_text(name: &str) -> &'static str {
    EMBEDDED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .unwrap_or_else(|| panic!("no embedded text {name}"))
}

const EMBEDDED_MANIFEST: &str = include_str!("../../datasets/embedded/manifest.json");

pub use crate::checkpoint::hex;

/// One domain's token streams.
pub struct Domain {
    pub name: String,
    pub train: Tokens,
    pub val: Tokens,
    /// Generated data: the streams are independent records of this many tokens, and every
    /// window starts at a record's start. Text: `None` (a window may start anywhere).
    pub record: Option<usize>,
}

/// Prepared, tokenized data.
pub struct Dataset {
    pub tokenizer: Tokenizer,
    pub domains: Vec<Domain>,
    /// Directory holding `tokenizer.json` and the shards.
    pub dir: PathBuf,
}

impl Dataset {
    pub fn vocab_size(&self) -> usize {
        self.tokenizer.vocab_size()
    }
}

/// A batch of token ids, row-major `[batch, len]`, with per-target loss weights.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub batch: usize,
    pub len: usize,
    pub inputs: Vec<u32>,
    pub targets: Vec<u32>,
    /// 1.0 where the target counts in the loss, 0.0 where it is ignored.
    pub loss_mask: Vec<f32>,
    /// Domain index each sequence was drawn from.
    pub domains: Vec<usize>,
}

/// Builds training batches deterministically from (seed, step, micro-batch index).
pub struct Sampler {
    /// Per domain: the usable prefix of its training stream (the token budget applied).
    limits: Vec<usize>,
    /// Cumulative sampling weights.
    cumulative: Vec<f64>,
    ctx: usize,
    bos: Option<u32>,
    seed: u64,
    random_positions: Vec<usize>,
    fixed: Option<(usize, u32)>,
    /// Ids that random tokens are drawn from (every non-special id).
    regular: RegularIds,
}

impl Sampler {
    pub fn new(data: &Dataset, cfg: &DataConfig, ctx: usize, seed: u64) -> Result<Self> {
        let names: Vec<&str> = data.domains.iter().map(|d| d.name.as_str()).collect();
        let weights: Vec<f64> = match &cfg.mixture {
            None => data.domains.iter().map(|d| d.train.len() as f64).collect(),
            Some(mix) => {
                for k in mix.keys() {
                    if !names.contains(&k.as_str()) {
                        bail!(
                            "`data.mixture.{k}`: no such domain in corpus {:?}; domains are: {}",
                            cfg.corpus,
                            names.join(", ")
                        );
                    }
                }
                names
                    .iter()
                    .map(|n| mix.get(*n).copied().unwrap_or(0.0))
                    .collect()
            }
        };
        if let Some(ft) = &cfg.fixed_token
            && ft.token as usize >= data.vocab_size()
        {
            bail!(
                "`data.fixed_token.token` = {} is not a token id of this tokenizer; valid ids are 0..{} \
                 (0 = <|bos|>, 1 = <|endoftext|>)",
                ft.token,
                data.vocab_size()
            );
        }
        let total: f64 = weights.iter().sum();
        let need = if cfg.bos { ctx } else { ctx + 1 };
        let mut limits = Vec::new();
        for (d, w) in data.domains.iter().zip(&weights) {
            let limit = match cfg.token_budget {
                None => d.train.len(),
                Some(b) => {
                    let share = (b as f64 * w / total).floor() as usize;
                    if share > d.train.len() {
                        bail!(
                            "`data.token_budget` = {b} asks domain {} for {share} training tokens; \
                             it has {} (never silently fewer): lower the budget, change \
                             `data.mixture`, or add data",
                            d.name,
                            d.train.len()
                        );
                    }
                    share
                }
            };
            if let Some(r) = d.record
                && (need > r || (*w > 0.0 && limit < r))
            {
                bail!(
                    "domain {} is generated in records of {r} tokens; a training sequence needs {need} \
                     (raise `data.synthetic.length`) and the token budget at least one record ({limit} usable)",
                    d.name
                );
            }
            if *w > 0.0 && limit < need {
                bail!(
                    "domain {} has {limit} usable training tokens, fewer than one sequence needs ({need}); \
                     raise `data.token_budget` or give the domain weight 0 in `data.mixture`",
                    d.name
                );
            }
            limits.push(limit);
        }
        let mut acc = 0.0;
        let cumulative = weights
            .iter()
            .map(|w| {
                acc += w / total;
                acc
            })
            .collect();
        Ok(Self {
            limits,
            cumulative,
            ctx,
            bos: cfg.bos.then_some(data.tokenizer.bos_id),
            seed,
            random_positions: cfg.random_tokens.clone(),
            fixed: cfg.fixed_token.as_ref().map(|f| (f.position, f.token)),
            regular: data.tokenizer.regular_ids(data.vocab_size() as u32),
        })
    }

    /// Sampling probability of each domain.
    pub fn domain_probabilities(&self) -> Vec<f64> {
        let mut prev = 0.0;
        self.cumulative
            .iter()
            .map(|c| {
                let p = c - prev;
                prev = *c;
                p
            })
            .collect()
    }

    /// The training micro-batch `micro` of optimizer step `step`.
    pub fn batch(&self, data: &Dataset, step: u64, micro: usize, batch: usize) -> Batch {
        let stream_seed = self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ step.wrapping_mul(0xBF58_476D_1CE4_E5B9)
            ^ (micro as u64).wrapping_mul(0x94D0_49BB_1331_11EB);
        let mut rng = ChaCha8Rng::seed_from_u64(stream_seed);
        let t = self.ctx;
        let mut out = Batch {
            batch,
            len: t,
            inputs: Vec::with_capacity(batch * t),
            targets: Vec::with_capacity(batch * t),
            loss_mask: Vec::with_capacity(batch * t),
            domains: Vec::with_capacity(batch),
        };
        for _ in 0..batch {
            let u: f64 = rng.r#gen();
            let d = self
                .cumulative
                .iter()
                .position(|c| u < *c)
                .unwrap_or(self.cumulative.len() - 1);
            let need = if self.bos.is_some() { t } else { t + 1 };
            let start = match data.domains[d].record {
                None => rng.gen_range(0..=self.limits[d] - need),
                Some(r) => rng.gen_range(0..self.limits[d] / r) * r,
            };
            // The full sequence s of length t+1: inputs s[0..t], targets s[1..t+1].
            let mut seq: Vec<u32> = Vec::with_capacity(t + 1);
            if let Some(b) = self.bos {
                seq.push(b);
            }
            data.domains[d].train.copy_to(start, need, &mut seq);
            let mut ignore = vec![false; t + 1];
            for &p in &self.random_positions {
                seq[p - 1] = self.regular.draw(&mut rng);
                ignore[p - 1] = true;
            }
            if let Some((p, tok)) = self.fixed {
                seq[p - 1] = tok;
                ignore[p - 1] = true;
            }
            out.inputs.extend_from_slice(&seq[..t]);
            out.targets.extend_from_slice(&seq[1..]);
            out.loss_mask
                .extend(ignore[1..].iter().map(|&i| if i { 0.0 } else { 1.0 }));
            out.domains.push(d);
        }
        out
    }
}

impl Sampler {
    /// Whether the training sequences carry token changes (a fixed token or random tokens).
    pub fn has_token_changes(&self) -> bool {
        !self.random_positions.is_empty() || self.fixed.is_some()
    }

    /// Give a fixed (validation or probe) batch the training sequences' token changes: the
    /// fixed token at its position and uniformly random tokens at `data.random_tokens` (drawn
    /// from a constant seed, so the set is the same at every step and in every run). Sink
    /// metrics and the validation loss are then measured on the distribution the model was
    /// trained on (Gu et al. measure the sink of a fixed-token run on sequences that carry the
    /// token). Positions count from 1 over the sequence including BOS, as in training; as in
    /// training, the targets that predict a changed token get loss weight 0.
    pub fn apply_token_changes(&self, b: &mut Batch) {
        if !self.has_token_changes() {
            return;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(0x0005_1E4B_9A0B_E5E7);
        let len = b.len;
        for row in 0..b.batch {
            let mut set = |p: usize, tok: u32| {
                // index p-1 of the full sequence: input p-1 and target p-2
                if p - 1 < len {
                    b.inputs[row * len + p - 1] = tok;
                }
                if p >= 2 && p - 2 < len {
                    b.targets[row * len + p - 2] = tok;
                    b.loss_mask[row * len + p - 2] = 0.0;
                }
            };
            for &p in &self.random_positions {
                set(p, self.regular.draw(&mut rng));
            }
            if let Some((p, tok)) = self.fixed {
                set(p, tok);
            }
        }
    }
}

/// Zero the loss weight of the first `n` targets of every sequence (a prefix-LM's queries see
/// those tokens bidirectionally, so predicting them is trivial).
pub fn ignore_first_targets(b: &mut Batch, n: usize) {
    if n == 0 {
        return;
    }
    for row in b.loss_mask.chunks_exact_mut(b.len) {
        row[..n.min(b.len)].fill(0.0);
    }
}

/// Fixed validation sequences: `n` windows evenly spaced over the concatenated validation
/// streams (BOS prepended when `bos`), `len` inputs each with their next-token targets.
pub fn validation_batch(data: &Dataset, n: usize, len: usize, bos: bool) -> Result<Batch> {
    let stream = Tokens::concat(&data.domains.iter().map(|d| &d.val).collect::<Vec<_>>());
    let need = if bos { len } else { len + 1 };
    if stream.len() < need {
        return Err(anyhow!(
            "validation split has {} tokens, fewer than one sequence of {need}; raise data.val_fraction",
            stream.len()
        ));
    }
    // generated records: windows start at evenly spaced records
    let record = match data.domains.as_slice() {
        [d] => d.record,
        _ => None,
    };
    if let Some(r) = record
        && need > r
    {
        bail!(
            "the generated records are {r} tokens long, fewer than one sequence of {need}; \
             ask for shorter sequences or raise data.synthetic.length"
        );
    }
    let span = match record {
        None => stream.len() - need,
        Some(r) => stream.len() / r - 1,
    };
    let mut out = Batch {
        batch: n,
        len,
        inputs: Vec::new(),
        targets: Vec::new(),
        loss_mask: Vec::new(),
        domains: vec![0; n],
    };
    for i in 0..n {
        let start = if n == 1 { 0 } else { span * i / (n - 1) } * record.unwrap_or(1);
        let mut seq = Vec::with_capacity(len + 1);
        if bos {
            seq.push(data.tokenizer.bos_id);
        }
        stream.copy_to(start, need, &mut seq);
        out.inputs.extend_from_slice(&seq[..len]);
        out.targets.extend_from_slice(&seq[1..]);
        out.loss_mask.extend(std::iter::repeat_n(1.0, len));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
