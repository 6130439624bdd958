//! Looking inside a trained checkpoint (docs/reference.md §4, §6, §7): `inspect` (the
//! `analyze` command), `dark` (dark signals), `stream` (StreamingLLM evaluation), with the
//! probe kinds and the geometry helpers they share.
//!
//! Everything works on any sinklab checkpoint: non-softmax normalisers are read through their
//! proxy (the metric is then Sink*), slots and sink tokens are reported as slot mass. Results go
//! to `analysis.json` / `dark.json` and PNG plots in the output directory, and optionally to the
//! run's TensorBoard (tags `analyze/...` and `dark/...` at the checkpoint's step).
//!
//! Definitions beyond `metrics`:
//! - probe kinds (Gu et al. Table 1): `natural` = validation windows; `random` = tokens drawn
//!   uniformly from the vocabulary without the special tokens; `repeated` = one such token
//!   repeated (a different one per sequence); BOS first when the run trains with BOS; for a
//!   run trained with a fixed or random token, also `as_trained` = the natural windows with
//!   those token changes applied;
//! - q·k geometry per (layer, head), queries t ≥ 1 (0-based): for the first key
//!   `mean_t cos(q_t, k_0)` and `mean_t ‖q_t‖‖k_0‖/√d_h`, against the mean over the other
//!   visible keys `1 ≤ j ≤ t`; the logit is their product;
//! - attention bars ("HMLV" tokens, Cancedda §7): key position k ≥ 1 of a sequence in head
//!   (l, h) whose received attention from the later queries `t ∈ (k, T)` (at least
//!   `bar_min_queries` of them) has mean > `bar_mean` and standard deviation < `bar_std`;
//! - massive channels: for each layer, how often each channel holds a massive activation
//!   (|x| > 100 and ≥ 1000 × the sequence's median |h|), and the channels with the largest
//!   max |h| with the share of those maxima found at token 1.

pub mod ablate;
pub mod dark;
pub mod findings;
pub mod geometry;
pub mod heads;
pub mod inspect;
pub mod names;
pub mod patch;
pub mod probes;
pub mod stream;
pub mod tasks;
pub mod valley;

use crate::model::Lm;
use crate::plot;
use crate::run::OpenRun;
use crate::rundir::RunDir;
use crate::tensorboard::EventWriter;
use anyhow::{Context, Result};
use std::path::PathBuf;

/// Where an analysis writes (`--out`, `--tensorboard`, `--force` of every analysis command).
#[derive(Debug, Clone, Default)]
pub struct Destination {
    /// The output directory (default `RUN/analysis/step_N/`).
    pub out: Option<PathBuf>,
    /// Also write to the run's TensorBoard, under the analysis's own prefix (`analyze/`,
    /// `dark/`, `ablate/`, `patch/`, `heads_analysis/`, `stream/`), never a live training tag.
    pub tensorboard: bool,
    /// Replace the report of an earlier analysis of the same name.
    pub force: bool,
}

impl Destination {
    /// The directory an analysis of `run` writes into.
    pub fn dir(&self, run: &OpenRun) -> PathBuf {
        self.out
            .clone()
            .unwrap_or_else(|| RunDir(&run.run_dir).analysis(run.state.step))
    }

    /// Claims the name `stem` for an analysis before it computes anything: its report is
    /// `<stem>.json` and its figures `<stem>_….png` (or, for the analyses with one report per
    /// checkpoint, their fixed names). A report of that name already in the directory — an
    /// earlier analysis — is never replaced without `force`: the refusal says so, before any
    /// work is done.
    pub fn claim(&self, run: &OpenRun, stem: impl Into<String>) -> Result<Claim> {
        let stem = stem.into();
        let dir = self.dir(run);
        let report = dir.join(format!("{stem}.json"));
        if report.exists() && !self.force {
            anyhow::bail!(
                "{} exists: an earlier analysis wrote it (the same command and settings, which \
                 name the report); --force replaces it, --out DIR writes elsewhere",
                report.display()
            );
        }
        Ok(Claim {
            dir,
            stem,
            tensorboard: self.tensorboard,
        })
    }
}

/// An analysis's claimed place ([`Destination::claim`]).
#[derive(Debug, Clone)]
pub struct Claim {
    pub dir: PathBuf,
    pub stem: String,
    tensorboard: bool,
}

impl Claim {
    /// `<stem>_<what>.png`.
    pub fn figure(&self, what: &str) -> String {
        format!("{}_{what}.png", self.stem)
    }
    /// `<stem>.json`.
    pub fn report(&self) -> String {
        format!("{}.json", self.stem)
    }
}

/// Where an analysis writes: its PNG figures and JSON file, and optionally the run's
/// TensorBoard (tags under the analysis's own prefix at the checkpoint's step).
pub struct Output {
    pub dir: PathBuf,
    pub claim: Claim,
    tb: Option<EventWriter>,
    step: i64,
    /// Files written so far, relative to `dir`.
    pub files: Vec<String>,
}

impl Output {
    /// The claimed directory (created) and, when asked for, the run's TensorBoard at the
    /// checkpoint's step.
    pub fn new(claim: Claim, run: &OpenRun) -> Result<Self> {
        let dir = claim.dir.clone();
        let (run_dir, step) = (&run.run_dir, run.state.step);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let tb = if claim.tensorboard {
            Some(EventWriter::create(run_dir)?)
        } else {
            None
        };
        Ok(Self {
            dir,
            claim,
            tb,
            step: step as i64,
            files: Vec::new(),
        })
    }

    /// The report, `<stem>.json`, written last.
    pub fn report<T: serde::Serialize>(&mut self, value: &T) -> Result<()> {
        let name = self.claim.report();
        self.json(&name, value)
    }

    pub fn png(&mut self, name: &str, tag: &str, png: Vec<u8>) -> Result<()> {
        plot::save(&self.dir.join(name), &png)?;
        if let Some(tb) = &mut self.tb {
            let (w, h) = plot::png_size(&png)?;
            tb.add_png(tag, self.step, w, h, png)?;
        }
        self.files.push(name.to_string());
        Ok(())
    }

    /// `values` under `{prefix}/`, their names a [`crate::tags::Tag`] or any other string.
    pub fn scalars<K: std::fmt::Display>(
        &mut self,
        prefix: &str,
        values: &[(K, f64)],
    ) -> Result<()> {
        if let Some(tb) = &mut self.tb {
            let named: Vec<(String, f64)> = values
                .iter()
                .filter(|(_, v)| v.is_finite())
                .map(|(k, v)| (format!("{prefix}/{k}"), *v))
                .collect();
            tb.add_scalars(self.step, &named)?;
        }
        Ok(())
    }

    pub fn json<T: serde::Serialize>(&mut self, name: &str, value: &T) -> Result<()> {
        let path = self.dir.join(name);
        crate::checkpoint::write_atomic(&path, serde_json::to_string_pretty(value)?.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        self.files.push(name.to_string());
        if let Some(tb) = &mut self.tb {
            tb.flush()?;
        }
        Ok(())
    }
}

/// The band decomposition of the plain unembedding W_U (d × V, no gain folded in), with its
/// Gram matrix accumulated over blocks of 4096 vocabulary columns: the host never holds a copy
/// of W_U (a pretrained vocabulary makes it a fifth of the model).
pub fn unembedding_bands(model: &Lm, n_bands: usize) -> crate::dark::Bands {
    const COLS: usize = 4096;
    let [v, d] = model.embed.dims();
    let w_u = match &model.head {
        Some(h) => h.matrix(),                 // (d, V)
        None => model.embed.val().transpose(), // tied: Eᵀ
    };
    let mut g = vec![0.0f64; d * d];
    for c0 in (0..v).step_by(COLS) {
        let n = COLS.min(v - c0);
        let part: Vec<f32> = w_u
            .clone()
            .narrow(1, c0, n) // (d, n)
            .into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .expect("f32");
        for (x, y) in g.iter_mut().zip(crate::dark::gram(&part, d, n)) {
            *x += y;
        }
    }
    crate::dark::Bands::from_gram(&g, d, n_bands.min(d))
}

/// The residual-side unembedding W_U (d × V; with `fold_gain`, `diag(g) W_U` with g the final
/// norm's gain) and the embedding `Eᵀ` (d × V) as f64 host matrices.
pub fn unembedding_and_embedding(
    model: &Lm,
    fold_gain: bool,
) -> (Vec<f64>, Vec<f64>, usize, usize) {
    let host = crate::eval::host_f64;
    let [v, d] = model.embed.dims();
    let e_t = host(model.embed.val().transpose()); // (d, V)
    let mut w_u = match &model.head {
        Some(h) => host(h.matrix()), // (d, V)
        None => e_t.clone(),
    };
    if let Some(n) = model.norm_f.as_ref().filter(|_| fold_gain) {
        let g = host(n.gain.val().unsqueeze::<2>());
        for (i, gi) in g.iter().enumerate() {
            w_u[i * v..(i + 1) * v].iter_mut().for_each(|x| *x *= gi);
        }
    }
    (w_u, e_t, d, v)
}
