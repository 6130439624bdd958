//! `sinklab eval`: the validation loss and the sink metrics of a checkpoint.

use super::RunDevice;
use crate::data::{self, Sampler};
use crate::eval::{eval_loss_with, probe_metrics_with, slice_batch};
use crate::metrics::{SinkReport, uniform_first_mass};
use crate::progress::{Progress, count};
use crate::run::OpenRun;
use crate::tokenizer::Unrepresented;
use anyhow::{Context, Result, bail};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// A run directory (its newest checkpoint is used) or runs/NAME/checkpoints/step_N.
    pub path: PathBuf,
    #[command(flatten)]
    pub device: RunDevice,
    /// Print the full report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Mean NLL and perplexity of this text file instead (the run's tokenizer; BOS in front of
    /// every window when the run trains with BOS; windows of --len tokens).
    #[arg(long, value_name = "FILE")]
    pub text: Option<PathBuf>,
    /// Sequences to evaluate: validation windows for the loss and probe sequences (defaults:
    /// train.eval_sequences and metrics.probe_sequences); with --text, at most this many
    /// windows of the text.
    #[arg(long, value_name = "N")]
    pub sequences: Option<usize>,
    /// Their length in tokens, 2 ≤ T ≤ model.ctx (defaults: model.ctx for the loss and
    /// --text, metrics.probe_len for the probes).
    #[arg(long, value_name = "T")]
    pub len: Option<usize>,
    /// Evaluate --text even when most of its tokens are the tokenizer's unknown or byte-fallback
    /// tokens (its perplexity then measures the tokenizer, not the model).
    #[arg(long, requires = "text")]
    pub allow_unknown: bool,
    /// The dtype of the loss's matrix products: f32, bf16 or f16 (mixed precision, as
    /// `train.precision`); the sink metrics are always computed in f32.
    #[arg(long, value_name = "P", default_value = "f32")]
    pub precision: crate::config::Precision,
}

/// Share of a text's tokens that are unknown or byte-fallback tokens from which `eval --text`
/// warns.
pub const UNREPRESENTED_WARN: f64 = 0.01;
/// Share from which `eval --text` refuses the text unless `--allow-unknown` is given.
pub const UNREPRESENTED_REFUSE: f64 = 0.5;
/// Plain progress lines per phase of `eval` without a terminal.
const EVAL_PROGRESS_LINES: u64 = 5;

/// `eval --json`. Fields in key order; a non-finite number is written as `null`.
#[derive(Serialize)]
struct EvalJson<'a> {
    /// Probe sequences and their length.
    probe_len: usize,
    probe_sequences: usize,
    run_dir: &'a Path,
    /// Every probe scalar, by its TensorBoard tag.
    scalars: BTreeMap<String, f64>,
    step: u64,
    /// Validation windows of the loss and their length.
    val_len: usize,
    val_loss: f64,
    /// The loss on the unchanged text, when the training data changes tokens.
    val_loss_unchanged: Option<f64>,
    val_sequences: usize,
    /// The dtype of the loss's matrix products (`--precision`).
    precision: &'static str,
}

/// `eval --text FILE --json`. Fields in key order, as [`EvalJson`].
#[derive(Serialize)]
struct TextEvalJson<'a> {
    bos: bool,
    /// Byte-fallback tokens of the text (`<0xE2>`: characters spelled byte by byte).
    byte_fallback_tokens: usize,
    /// Window length.
    len: usize,
    mean_nll: f64,
    ppl: f64,
    /// Tokens whose NLL is counted.
    predicted: usize,
    run_dir: &'a Path,
    seconds: f64,
    step: u64,
    text: &'a Path,
    /// Tokens in the file.
    tokens: usize,
    /// The tokenizer's unknown tokens in the text.
    unknown_tokens: usize,
    /// (unknown + byte-fallback tokens) / tokens.
    unrepresented_share: f64,
    windows: usize,
    /// The dtype of the loss's matrix products (`--precision`).
    precision: &'static str,
}

/// `--len` checked against the model's context.
fn checked_len(len: Option<usize>, ctx: usize) -> Result<Option<usize>> {
    match len {
        Some(t) if t < 2 || t > ctx => bail!("--len {t}: expected 2 ≤ len ≤ model.ctx = {ctx}"),
        _ => Ok(len),
    }
}

pub fn run(a: Args) -> Result<()> {
    if a.sequences == Some(0) {
        bail!("--sequences 0: expected at least 1");
    }
    let run = a.device.open(&a.path)?;
    crate::backend::check_precision(run.exp.run.device, &run.device, a.precision)?;
    let len = checked_len(a.len, run.exp.model.ctx)?;
    if let Some(file) = &a.text {
        return eval_text(&run, file, &a, len);
    }
    let (exp, model, device, ds) = (&run.exp, &run.model, &run.device, &run.data);
    let (val_n, val_len) = (
        a.sequences.unwrap_or(exp.train.eval_sequences),
        len.unwrap_or(exp.model.ctx),
    );
    let (probe_n, probe_len) = (
        a.sequences.unwrap_or(exp.metrics.probe_sequences),
        len.unwrap_or(exp.metrics.probe_len),
    );
    // Validation and probes carry the training data's token changes, as in training.
    let sampler = Sampler::new(ds, &exp.data, exp.model.ctx, exp.run.seed)?;
    let mut plain = data::validation_batch(ds, val_n, val_len, exp.data.bos)?;
    data::ignore_first_targets(&mut plain, exp.model.attention.mask.ignored_targets());
    let mut val = plain.clone();
    sampler.apply_token_changes(&mut val);
    let mut probe = data::validation_batch(ds, probe_n, probe_len, exp.data.bos)?;
    sampler.apply_token_changes(&mut probe);
    let chunk = exp.train.micro_batch.max(1);
    let changes = sampler.has_token_changes();
    // a bar on a terminal, a few plain lines per phase without one
    let bar = Progress::with_lines(
        (val_n * (1 + usize::from(changes))) as u64,
        &format!("eval: validation sequences of {val_len} tokens"),
        EVAL_PROGRESS_LINES,
    );
    let mut tick = |k: usize| bar.inc(k as u64);
    let low = model.clone().with_precision(a.precision); // the loss's products
    let loss = eval_loss_with(&low, &val, chunk, device, None, &mut tick);
    let loss_unchanged =
        changes.then(|| eval_loss_with(&low, &plain, chunk, device, None, &mut tick));
    bar.finish();
    let bar = Progress::with_lines(
        exp.model.n_layers as u64,
        &format!("eval: probe ({probe_n} × {probe_len}) blocks"),
        EVAL_PROGRESS_LINES,
    );
    let report = probe_metrics_with(model, &probe, chunk, exp, device, &mut |_| bar.inc(1));
    bar.finish();
    if a.json {
        let out = EvalJson {
            probe_len,
            probe_sequences: probe_n,
            run_dir: &run.run_dir,
            scalars: report
                .scalars()
                .into_iter()
                .map(|(t, v)| (t.to_string(), v))
                .collect(),
            step: run.state.step,
            val_len,
            val_loss: loss,
            val_loss_unchanged: loss_unchanged,
            val_sequences: val_n,
            precision: a.precision.name(),
        };
        println!("{}", serde_json::to_string(&out)?);
        return Ok(());
    }
    println!("run {} at step {}", run.run_dir.display(), run.state.step);
    let on = format!(
        "{val_n} × {val_len} tokens, products in {}",
        a.precision.name()
    );
    match loss_unchanged {
        None => println!("validation loss on {on}: {loss:.4} (ppl {:.2})", loss.exp()),
        Some(u) => println!(
            "validation loss on {on}: {loss:.4} (ppl {:.2}) with the training data's token \
             changes; {u:.4} (ppl {:.2}) on the unchanged text",
            loss.exp(),
            u.exp()
        ),
    }
    print_report(&report, probe_n, probe_len);
    Ok(())
}

/// What to do about a text whose tokens are `share` unknown or byte-fallback tokens: `Ok(None)`
/// (nothing to say), `Ok(Some(warning))`, or an error (refused; `allow` overrides).
fn unrepresented_verdict(
    file: &Path,
    n: Unrepresented,
    tokens: usize,
    allow: bool,
) -> Result<Option<String>> {
    let share = n.total() as f64 / tokens.max(1) as f64;
    if share < UNREPRESENTED_WARN {
        return Ok(None);
    }
    let what = format!(
        "--text {}: {} of its {} tokens ({:.1}%) {} not in the tokenizer's vocabulary ({} \
         unknown, {} byte-fallback)",
        file.display(),
        n.total(),
        tokens,
        100.0 * share,
        if n.total() == 1 { "is" } else { "are" },
        n.unknown,
        n.byte_fallback
    );
    if share >= UNREPRESENTED_REFUSE && !allow {
        bail!(
            "{what}: at {:.0}% or more the perplexity measures the tokenizer, not the model (was \
             the run trained on another kind of text, e.g. a synthetic task's vocabulary?); \
             evaluate a text in the run's vocabulary, or pass --allow-unknown",
            100.0 * UNREPRESENTED_REFUSE
        );
    }
    Ok(Some(format!(
        "warning: {what}; its perplexity is not comparable with a text the tokenizer represents"
    )))
}

/// Mean NLL and perplexity of a text file.
fn eval_text(run: &OpenRun, file: &Path, a: &Args, len: Option<usize>) -> Result<()> {
    let exp = &run.exp;
    let len = len.unwrap_or(exp.model.ctx);
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading --text {}", file.display()))?;
    let (ids, unrepresented) = run.data.tokenizer.encode_counted(&text)?;
    if let Some(w) = unrepresented_verdict(file, unrepresented, ids.len(), a.allow_unknown)? {
        eprintln!("{w}");
    }
    let bos = exp.data.bos.then_some(run.data.tokenizer.bos_id);
    let mut batch = data::text_batch(&ids, len, bos, false)
        .with_context(|| format!("--text {}", file.display()))?;
    let all_windows = batch.batch;
    if let Some(n) = a.sequences {
        batch = slice_batch(&batch, 0, n.min(batch.batch));
    }
    let predicted: f64 = batch.loss_mask.iter().map(|&m| m as f64).sum();
    let started = std::time::Instant::now();
    let bar = Progress::with_lines(
        batch.batch as u64,
        &format!("eval: windows of {}", batch.len),
        EVAL_PROGRESS_LINES,
    );
    let nll = eval_loss_with(
        &run.model.clone().with_precision(a.precision),
        &batch,
        exp.train.micro_batch.max(1),
        &run.device,
        None,
        &mut |k| bar.inc(k as u64),
    );
    bar.finish();
    let secs = started.elapsed().as_secs_f64();
    let share = unrepresented.total() as f64 / ids.len().max(1) as f64;
    if a.json {
        let out = TextEvalJson {
            bos: exp.data.bos,
            byte_fallback_tokens: unrepresented.byte_fallback,
            len: batch.len,
            mean_nll: nll,
            ppl: nll.exp(),
            predicted: predicted as usize,
            run_dir: &run.run_dir,
            seconds: secs,
            step: run.state.step,
            text: file,
            tokens: ids.len(),
            unknown_tokens: unrepresented.unknown,
            unrepresented_share: share,
            windows: batch.batch,
            precision: a.precision.name(),
        };
        println!("{}", serde_json::to_string(&out)?);
    } else {
        let windows = if batch.batch < all_windows {
            format!("the first {} of {all_windows} windows", batch.batch)
        } else {
            count(batch.batch, "window", None)
        };
        println!(
            "{}: {} ({} predicted, {windows} of {}{}; {} unknown, {} byte-fallback), mean NLL \
             {nll:.4}, perplexity {:.3}, products in {} ({secs:.2} s)",
            file.display(),
            count(ids.len(), "token", None),
            predicted as usize,
            batch.len,
            if exp.data.bos { ", BOS first" } else { "" },
            unrepresented.unknown,
            unrepresented.byte_fallback,
            nll.exp(),
            a.precision.name()
        );
    }
    Ok(())
}

/// The sink-metric tables of a probe pass.
fn print_report(report: &SinkReport, sequences: usize, len: usize) {
    println!("\nSink_k^eps (%), probe {sequences} × {len}:");
    let k_max = report.sink_rate.values().next().map_or(0, Vec::len);
    print!("{:>6}", "eps");
    for k in 1..=k_max {
        print!("{:>7}", format!("k={k}"));
    }
    println!();
    for (e, rates) in &report.sink_rate {
        print!("{e:>6}");
        for r in rates {
            print!("{r:>7.1}");
        }
        println!();
    }
    if !report.slot_rate.is_empty() {
        print!("\nSink1* on the slot (sink logit / KV-K bias / memory / sink tokens), %:");
        for (e, r) in &report.slot_rate {
            print!("  eps {e}: {r:.1}");
        }
        println!();
    }
    println!(
        "F-Attn (mean attention on token 1) {:.3} (uniform causal attention: {:.3}) | M-Act \
         (largest mean top-1 |h|) {:.2}",
        report.f_attn(),
        uniform_first_mass(len),
        report.m_act()
    );
    println!(
        "\nper layer: first-token importance by head | norm ratio | entropy | massive | slot mass | gate"
    );
    for (l, heads) in report.importance_first.iter().enumerate() {
        let hs: Vec<String> = heads.iter().map(|v| format!("{v:.2}")).collect();
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
        println!(
            "layer {l:02}: [{}] | {:.2} | {:.3} | {:.1} | {} | {}",
            hs.join(" "),
            report.hidden[l].norm_ratio,
            report.entropy[l],
            report.hidden[l].massive_count,
            opt(report.slot_mass[l]),
            opt(report.gate_mean[l])
        );
    }
}
