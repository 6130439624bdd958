//! The tasks ablations and patches are measured on (docs/reference.md §11): the repeat task
//! ([first, R, R], next-token targets), natural text (validation windows or a file),
//! Bigram-Backcopy's validation records split into copy and bigram targets, and the clean /
//! corrupted prompt pairs of activation patching (whose clean prompts, with the answer as the
//! one target, are also a task: the logit difference of `sinklab ablate`).

use crate::config::{Experiment, SyntheticConfig};
use crate::data::Batch;
use crate::data::repeat::{distinct, repeat_probe};
use crate::run::OpenRun;
use anyhow::{Context, Result, bail};
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// A task: sequences with next-token targets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Task {
    /// [first, R, R, …]: n distinct random tokens repeated.
    Repeat { n: usize, reps: usize },
    /// Validation windows of `len` tokens.
    Natural { len: usize },
    /// A text file's consecutive windows of `len` tokens.
    Text { file: PathBuf, len: usize },
    /// Bigram-Backcopy validation records: the copy targets (after a trigger) and the bigram
    /// targets measured apart.
    Bb { len: usize },
    /// The clean prompts of a patching prompts file ([`file_pairs`]), every prompt, with one
    /// counted target: the answer at the last position (and the wrong answer beside it, for
    /// the logit difference).
    Prompts { file: PathBuf },
}

/// A task's batch as built, and, for Bigram-Backcopy, its copy and bigram halves.
pub struct TaskBatch {
    pub batch: Batch,
    /// (copy, bigram) target masks, (B, T) each.
    pub split: Option<(Vec<f32>, Vec<f32>)>,
    /// Bigram-Backcopy: the copy mask split by trigger (the query groups: `[i]` keeps the
    /// targets whose input is trigger i), (B, T) each; empty on other tasks.
    pub by_trigger: Vec<Vec<f32>>,
    /// `--task prompts`: per prompt (answer, wrong answer) at the last position.
    pub answers: Option<Vec<(u32, u32)>>,
}

/// Bigram-Backcopy's copy offset of each trigger, `offsets[i mod len]` (docs/reference.md
/// §10); `None` on other data.
pub fn trigger_offsets(exp: &Experiment) -> Option<Vec<usize>> {
    match &exp.data.synthetic {
        Some(SyntheticConfig::BigramBackcopy(bb)) => Some(
            (0..bb.triggers)
                .map(|i| crate::config::trigger_offset(&bb.offsets, i))
                .collect(),
        ),
        _ => None,
    }
}

/// The batch of `task`: `sequences` sequences (a text may give fewer), seeded.
pub fn task_batch(run: &OpenRun, task: &Task, sequences: usize, seed: u64) -> Result<TaskBatch> {
    let exp = &run.exp;
    let ctx = exp.model.ctx;
    let tok = &run.data.tokenizer;
    let bos = exp.data.bos.then_some(tok.bos_id);
    let fits = |len: usize| -> Result<()> {
        if !(2..=ctx).contains(&len) {
            bail!("--len {len}: the task needs 2 ≤ len ≤ model.ctx = {ctx}");
        }
        Ok(())
    };
    Ok(match task {
        Task::Repeat { n, reps } => {
            let t = reps * n + 1;
            if t > ctx {
                bail!(
                    "--n {n}: the repeat task has reps·n + 1 = {t} tokens but model.ctx = {ctx}; \
                     use --n ≤ {}",
                    (ctx - 1) / reps.max(&1)
                );
            }
            let ids = tok.regular_ids(run.data.vocab_size() as u32);
            TaskBatch {
                batch: repeat_probe(&ids, *n, *reps, sequences, seed, bos)?,
                split: None,
                by_trigger: Vec::new(),
                answers: None,
            }
        }
        Task::Natural { len } => {
            fits(*len)?;
            TaskBatch {
                batch: crate::data::validation_batch(&run.data, sequences, *len, exp.data.bos)?,
                split: None,
                by_trigger: Vec::new(),
                answers: None,
            }
        }
        Task::Text { file, len } => {
            fits(*len)?;
            let body = std::fs::read_to_string(file)
                .with_context(|| format!("reading {}", file.display()))?;
            let ids = tok.encode(&body)?;
            let mut b = crate::data::text_batch(&ids, *len, bos, true)
                .with_context(|| format!("{}", file.display()))?;
            if b.batch > sequences {
                b = crate::eval::slice_batch(&b, 0, sequences);
            }
            TaskBatch {
                batch: b,
                split: None,
                by_trigger: Vec::new(),
                answers: None,
            }
        }
        Task::Bb { len } => {
            fits(*len)?;
            let b = crate::data::validation_batch(&run.data, sequences, *len, exp.data.bos)?;
            let split = crate::data::split_targets(&exp.data, &b);
            let groups = crate::data::query_groups(&exp.data, &b.inputs);
            let (Some((copy, bigram)), Some((groups, n))) = (split, groups) else {
                bail!(
                    "--task bb needs a run trained on Bigram-Backcopy (data.synthetic = \
                     {{ kind = \"bigram_backcopy\" }}); use --task repeat, natural or text"
                );
            };
            let by_trigger = (1..n)
                .map(|g| {
                    copy.loss_mask
                        .iter()
                        .zip(&groups)
                        .map(|(&m, &q)| if q == g { m } else { 0.0 })
                        .collect()
                })
                .collect();
            TaskBatch {
                batch: b,
                split: Some((copy.loss_mask, bigram.loss_mask)),
                by_trigger,
                answers: None,
            }
        }
        Task::Prompts { file } => {
            let mut pairs = file_pairs(run, file)?;
            if pairs.clean.len > ctx {
                bail!(
                    "{}: the prompts are {} tokens; model.ctx = {ctx}",
                    file.display(),
                    pairs.clean.len
                );
            }
            answer_targets(&mut pairs.clean, &pairs.answers);
            TaskBatch {
                batch: pairs.clean,
                split: None,
                by_trigger: Vec::new(),
                answers: Some(pairs.answers),
            }
        }
    })
}

/// Make each prompt's answer its one counted target, at the last position (the loss metric
/// of prompts; the logit difference reads the same position).
pub fn answer_targets(b: &mut Batch, answers: &[(u32, u32)]) {
    let t = b.len;
    for (s, (a, _)) in answers.iter().enumerate() {
        b.targets[s * t + t - 1] = *a;
        b.loss_mask[s * t + t - 1] = 1.0;
    }
}

/// Clean and corrupted prompts of one length with the answers at the last position.
pub struct PromptPairs {
    pub clean: Batch,
    pub corrupt: Batch,
    /// Per prompt (answer of the clean prompt, answer of the corrupted one).
    pub answers: Vec<(u32, u32)>,
}

/// The built-in patching task: clean [first, A, A₀ … A_{n−2}] (an induction head predicts
/// A_{n−1}); corrupted the same with A_{n−1} in the first copy replaced by another token W
/// (which an induction head then predicts). Only one position differs.
pub fn repeat_pairs(run: &OpenRun, n: usize, sequences: usize, seed: u64) -> Result<PromptPairs> {
    let ctx = run.exp.model.ctx;
    if 2 * n > ctx || n < 2 {
        bail!(
            "--n {n}: the patching task has 2n tokens and needs 2 ≤ n ≤ model.ctx / 2 = {}",
            ctx / 2
        );
    }
    let tok = &run.data.tokenizer;
    let ids = tok.regular_ids(run.data.vocab_size() as u32);
    let bos = run.exp.data.bos.then_some(tok.bos_id);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let (mut clean, mut corrupt, mut answers) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..sequences {
        let mut d = distinct(&ids, n + 1 + usize::from(bos.is_none()), &mut rng);
        let first = bos.unwrap_or_else(|| d.pop().expect("drawn"));
        let wrong = d.pop().expect("drawn");
        let mut c = vec![first];
        c.extend(&d);
        c.extend(&d[..n - 1]);
        let mut k = c.clone();
        k[n] = wrong;
        answers.push((d[n - 1], wrong));
        clean.push(c);
        corrupt.push(k);
    }
    let b = |s: Vec<Vec<u32>>| super::probes::batch_of(s);
    Ok(PromptPairs {
        clean: b(clean),
        corrupt: b(corrupt),
        answers,
    })
}

/// One line of a prompt file (JSON Lines).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptLine {
    clean: String,
    corrupt: String,
    answer: String,
    wrong: String,
}

/// Prompt pairs from a JSON Lines file: `{"clean", "corrupt", "answer", "wrong"}` per line;
/// every clean and corrupted prompt must tokenize to the same length, every answer to one token.
pub fn file_pairs(run: &OpenRun, file: &std::path::Path) -> Result<PromptPairs> {
    let tok = &run.data.tokenizer;
    let body =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let bos: Vec<u32> = run.exp.data.bos.then_some(tok.bos_id).into_iter().collect();
    let (mut clean, mut corrupt, mut answers) = (Vec::new(), Vec::new(), Vec::new());
    for (i, line) in body
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let at = || format!("{}:{}", file.display(), i + 1);
        let p: PromptLine = serde_json::from_str(line).with_context(|| {
            format!(
                "{}: expected {{\"clean\", \"corrupt\", \"answer\", \"wrong\"}}",
                at()
            )
        })?;
        let enc = |s: &str| -> Result<Vec<u32>> {
            let mut v = bos.clone();
            v.extend(tok.encode(s)?);
            Ok(v)
        };
        let one = |s: &str| -> Result<u32> {
            match tok.encode(s)?.as_slice() {
                [t] => Ok(*t),
                other => bail!(
                    "{}: {s:?} is {} tokens; an answer must be one token",
                    at(),
                    other.len()
                ),
            }
        };
        let (c, k) = (enc(&p.clean)?, enc(&p.corrupt)?);
        if c.len() != k.len() {
            bail!(
                "{}: the clean prompt is {} tokens and the corrupted one {}; patching by position \
                 needs equal lengths",
                at(),
                c.len(),
                k.len()
            );
        }
        answers.push((one(&p.answer)?, one(&p.wrong)?));
        clean.push(c);
        corrupt.push(k);
    }
    if clean.is_empty() {
        bail!("{}: no prompts", file.display());
    }
    if clean.iter().any(|c| c.len() != clean[0].len()) {
        bail!(
            "{}: every prompt must have the same number of tokens",
            file.display()
        );
    }
    let b = |s: Vec<Vec<u32>>| super::probes::batch_of(s);
    Ok(PromptPairs {
        clean: b(clean),
        corrupt: b(corrupt),
        answers,
    })
}
