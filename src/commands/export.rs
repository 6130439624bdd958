//! `sinklab export`.

use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A run directory (its newest checkpoint is exported) or runs/NAME/checkpoints/step_N.
    pub checkpoint: PathBuf,
    /// The Hugging Face model directory to create (must not exist).
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(a: Args) -> Result<()> {
    let started = std::time::Instant::now();
    let (run_dir, ckpt) = crate::run::locate_checkpoint(&a.checkpoint)?;
    let s = crate::interop::hf_export::export(&run_dir, &ckpt, &a.out)?;
    println!(
        "exported {} → {}: {} ({} tensors, {} parameters, {:.1} s); load it with \
         transformers' AutoModelForCausalLM.from_pretrained({:?})",
        ckpt.display(),
        a.out.display(),
        s.model_type,
        s.tensors,
        s.params,
        started.elapsed().as_secs_f64(),
        a.out.display().to_string()
    );
    Ok(())
}
