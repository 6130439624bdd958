//! `sinklab import`.

use super::parse_device;
use crate::config::DeviceKind;
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A Hugging Face model directory (config.json, model.safetensors or a sharded index,
    /// tokenizer.json; llama / mistral / qwen2, gpt2, gpt_neox) or a GGUF file (llama
    /// architecture; F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q6_K, Q4_K tensors).
    pub src: PathBuf,
    /// The run directory to create (must not exist), e.g. runs/smollm2.
    #[arg(long)]
    pub out: PathBuf,
    /// Context the run uses for evaluation and fine-tuning (default: the model's maximum
    /// positions, at most 2048).
    #[arg(long)]
    pub ctx: Option<usize>,
    /// Device the run records as its own (default flex); the import itself runs on the CPU.
    #[arg(long)]
    pub device: Option<String>,
}

pub fn run(a: Args) -> Result<()> {
    let kind = a.device.as_deref().map(parse_device).transpose()?;
    let started = std::time::Instant::now();
    let cpu = crate::backend::device(DeviceKind::Flex)?;
    let summary =
        crate::interop::import(&a.src, &a.out, a.ctx, kind, &cpu, &mut |m| eprintln!("{m}"))?;
    let m = &summary.exp.model;
    println!(
        "imported {} → {}: {} parameters, {}, d_model {}, {} ({} key/value), ctx {} ({:.1} s)",
        a.src.display(),
        summary.run_dir.display(),
        summary.params,
        crate::progress::count(m.n_layers, "layer", None),
        m.d_model,
        crate::progress::count(m.n_heads, "head", None),
        m.n_kv_heads.unwrap_or(m.n_heads),
        m.ctx,
        started.elapsed().as_secs_f64()
    );
    println!(
        "next: sinklab eval {0} --text FILE | sinklab analyze {0} | sinklab generate {0} --prompt ...",
        summary.run_dir.display()
    );
    Ok(())
}
