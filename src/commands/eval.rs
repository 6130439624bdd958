//! `sinklab eval`: the validation loss and the sink metrics of a checkpoint.

use super::RunDevice;
use crate::data::{self, Sampler};
use crate::eval::{eval_loss, probe_metrics};
use crate::metrics::{SinkReport, uniform_first_mass};
use crate::run::OpenRun;
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
    /// Window length for --text (default and maximum: model.ctx).
    #[arg(long, requires = "text")]
    pub len: Option<usize>,
}

/// `eval --json`. Fields in key order (the order the output has always had); a non-finite
/// number is written as `null`.
#[derive(Serialize)]
struct EvalJson<'a> {
    run_dir: &'a Path,
    /// Every probe scalar, by its TensorBoard tag.
    scalars: BTreeMap<String, f64>,
    step: u64,
    val_loss: f64,
    /// The loss on the unchanged text, when the training data changes tokens.
    val_loss_unchanged: Option<f64>,
}

/// `eval --text FILE --json`. Fields in key order, as [`EvalJson`].
#[derive(Serialize)]
struct TextEvalJson<'a> {
    bos: bool,
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
    windows: usize,
}

pub fn run(a: Args) -> Result<()> {
    let run = a.device.open(&a.path)?;
    if let Some(file) = &a.text {
        return eval_text(&run, file, a.len, a.json);
    }
    let (exp, model, device, ds) = (&run.exp, &run.model, &run.device, &run.data);
    // Validation and probes carry the training data's token changes, as in training.
    let sampler = Sampler::new(ds, &exp.data, exp.model.ctx, exp.run.seed)?;
    let mut plain =
        data::validation_batch(ds, exp.train.eval_sequences, exp.model.ctx, exp.data.bos)?;
    data::ignore_first_targets(&mut plain, exp.model.attention.mask.ignored_targets());
    let mut val = plain.clone();
    sampler.apply_token_changes(&mut val);
    let mut probe = data::validation_batch(
        ds,
        exp.metrics.probe_sequences,
        exp.metrics.probe_len,
        exp.data.bos,
    )?;
    sampler.apply_token_changes(&mut probe);
    let chunk = exp.train.micro_batch;
    let loss = eval_loss(model, &val, chunk, device);
    let loss_unchanged = sampler
        .has_token_changes()
        .then(|| eval_loss(model, &plain, chunk, device));
    let report = probe_metrics(model, &probe, chunk, exp, device);
    if a.json {
        let out = EvalJson {
            run_dir: &run.run_dir,
            scalars: report.scalars().into_iter().collect(),
            step: run.state.step,
            val_loss: loss,
            val_loss_unchanged: loss_unchanged,
        };
        println!("{}", serde_json::to_string(&out)?);
        return Ok(());
    }
    println!("run {} at step {}", run.run_dir.display(), run.state.step);
    match loss_unchanged {
        None => println!("validation loss: {loss:.4} (ppl {:.2})", loss.exp()),
        Some(u) => println!(
            "validation loss: {loss:.4} (ppl {:.2}) with the training data's token changes; \
             {u:.4} (ppl {:.2}) on the unchanged text",
            loss.exp(),
            u.exp()
        ),
    }
    print_report(&report, exp.metrics.probe_sequences, exp.metrics.probe_len);
    Ok(())
}

/// Mean NLL and perplexity of a text file.
fn eval_text(run: &OpenRun, file: &Path, len: Option<usize>, json: bool) -> Result<()> {
    let exp = &run.exp;
    let ctx = exp.model.ctx;
    let len = len.unwrap_or(ctx);
    if len < 2 || len > ctx {
        bail!("--len {len}: expected 2 ≤ len ≤ model.ctx = {ctx}");
    }
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading --text {}", file.display()))?;
    let ids = run.data.tokenizer.encode(&text)?;
    let bos = exp.data.bos.then_some(run.data.tokenizer.bos_id);
    let batch = data::text_batch(&ids, len, bos, false)
        .with_context(|| format!("--text {}", file.display()))?;
    let predicted: f64 = batch.loss_mask.iter().map(|&m| m as f64).sum();
    let started = std::time::Instant::now();
    let nll = eval_loss(
        &run.model,
        &batch,
        exp.train.micro_batch.max(1),
        &run.device,
    );
    let secs = started.elapsed().as_secs_f64();
    if json {
        let out = TextEvalJson {
            bos: exp.data.bos,
            len: batch.len,
            mean_nll: nll,
            ppl: nll.exp(),
            predicted: predicted as usize,
            run_dir: &run.run_dir,
            seconds: secs,
            step: run.state.step,
            text: file,
            tokens: ids.len(),
            windows: batch.batch,
        };
        println!("{}", serde_json::to_string(&out)?);
    } else {
        println!(
            "{}: {} tokens ({} predicted, {} window(s) of {}{}), mean NLL {nll:.4}, \
             perplexity {:.3} ({secs:.2} s)",
            file.display(),
            ids.len(),
            predicted as usize,
            batch.batch,
            batch.len,
            if exp.data.bos { ", BOS first" } else { "" },
            nll.exp()
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
