//! `sinklab generate`.

use super::RunDevice;
use crate::generate::{self, Sampling};
use crate::model::CachePolicy;
use anyhow::{Result, anyhow};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A run directory (its newest checkpoint is used) or runs/NAME/checkpoints/step_N.
    pub checkpoint: PathBuf,
    /// Prompt text (BOS is prepended when the run trains with BOS).
    #[arg(long)]
    pub prompt: String,
    /// Tokens to generate.
    #[arg(long, default_value_t = 100)]
    pub tokens: usize,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f64,
    /// Sample from the k most likely tokens (0 = all).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Keep the first S prompt tokens when the cache is full (StreamingLLM sinks).
    #[arg(long, default_value_t = 4)]
    pub sinks: usize,
    /// Most recent tokens kept once the cache is full (default: model.ctx − sinks);
    /// generation can then run past the training context.
    #[arg(long)]
    pub window: Option<usize>,
    #[command(flatten)]
    pub device: RunDevice,
}

pub fn run(a: Args) -> Result<()> {
    let run = a.device.open(&a.checkpoint)?;
    let ctx = run.exp.model.ctx;
    let window = a.window.unwrap_or(ctx.saturating_sub(a.sinks));
    let mut ids = Vec::new();
    if run.exp.data.bos {
        ids.push(run.data.tokenizer.bos_id);
    }
    ids.extend(run.data.tokenizer.encode(&a.prompt)?);
    if ids.len() > window {
        return Err(anyhow!(
            "the prompt is {} tokens, more than the cache window {window} (model.ctx = {ctx})",
            ids.len()
        ));
    }
    let policy = CachePolicy {
        sinks: a.sinks,
        window: Some(window),
    };
    let sampling = Sampling {
        temperature: a.temperature,
        top_k: a.top_k,
        seed: a.seed,
    };
    let model = burn::module::Module::valid(&run.model);
    let out = generate::generate(&model, &ids, a.tokens, &sampling, policy, &run.device)?;
    // Decode prompt and continuation together (a word-level tokenizer puts the space between
    // them); fall back to prompt + continuation when the prompt does not round-trip.
    let tok = &run.data.tokenizer;
    let prompt_ids = &ids[usize::from(run.exp.data.bos)..];
    let whole = tok.decode(&[prompt_ids, &out[..]].concat())?;
    match whole.starts_with(&a.prompt) {
        true => println!("{whole}"),
        false => println!("{}{}", a.prompt, tok.decode(&out)?),
    }
    Ok(())
}
