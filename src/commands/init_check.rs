//! `sinklab init-check`: signal propagation at init (docs/reference.md §3.3). Builds the model,
//! pushes validation sequences through it and reports every layer's token kernel, against the
//! U-SPA / E-SPA target where the model has one.

use super::Overrides;
use crate::config::Experiment;
use crate::data;
use crate::model::Lm;
use crate::spa::{self, kernel_stats, relative_distance, spa_layers};
use anyhow::{Result, anyhow};
use burn::tensor::Device;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Experiment TOML file.
    pub experiment: PathBuf,
    #[command(flatten)]
    pub overrides: Overrides,
    /// Probe sequences.
    #[arg(long, default_value_t = 16)]
    pub sequences: usize,
    /// Tokens per probe sequence (default: model.ctx).
    #[arg(long)]
    pub len: Option<usize>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let exp = a.overrides.load(&a.experiment)?;
    let len = a.len.unwrap_or(exp.model.ctx);
    let sequences = a.sequences;
    if !(2..=exp.model.ctx).contains(&len) || sequences == 0 {
        return Err(anyhow!(
            "--len {len} / --sequences {sequences}: expected 2 ≤ len ≤ model.ctx = {} and at \
             least one sequence",
            exp.model.ctx
        ));
    }
    let device = crate::backend::device(exp.run.device)?;
    let r = init_check(&exp, &device, sequences, len, &mut |m| eprintln!("{m}"))?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        r.print(&a.experiment.display().to_string());
    }
    Ok(())
}

/// One layer's row of the `sinklab init-check` report (layer 0 is the input to block 0).
#[derive(Debug, Clone, serde::Serialize)]
pub struct LayerKernel {
    pub layer: usize,
    /// Mean off-diagonal cosine between token representations (1 = rank collapse).
    pub mean_cos: f64,
    /// Mean `‖x_i‖² / d`.
    pub diag: f64,
    /// U-SPA / E-SPA: mean off-diagonal entry of the target Σ_l.
    pub target_mean_cos: Option<f64>,
    /// U-SPA / E-SPA: `‖C̄ − Σ_l‖_F / ‖Σ_l‖_F`, C̄ the batch-mean cosine matrix.
    pub spa_distance: Option<f64>,
    /// U-SPA / E-SPA: the smallest causal entry of A_l (all positive, else the model would
    /// have been refused).
    pub min_entry: Option<f64>,
}

/// What `sinklab init-check` measures: the model at init on a probe batch.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InitReport {
    pub sequences: usize,
    pub len: usize,
    pub layers: Vec<LayerKernel>,
}

/// Build the model at init (seed of the experiment), push `sequences` validation sequences of
/// `len` tokens through it and measure every layer's token kernel.
pub fn init_check(
    exp: &Experiment,
    device: &Device,
    sequences: usize,
    len: usize,
    log: &mut dyn FnMut(&str),
) -> anyhow::Result<InitReport> {
    let ds = data::Dataset::prepare(&exp.data, log)?;
    let batch = data::validation_batch(&ds, sequences, len, exp.data.bos)?;
    let model = Lm::new(&exp.model, ds.vocab_size(), exp.run.seed, device);
    let (tokens, _, _) = crate::eval::batch_tensors(&batch, device);
    let hidden = model.hidden_states(tokens);
    let n_layers = exp.model.n_layers;
    let target = exp.model.attention.spa.target();
    let realised = match &target {
        Some(t) => spa_layers(t, n_layers, len)?,
        None => Vec::new(),
    };
    let d = exp.model.d_model;
    let mut layers = Vec::with_capacity(hidden.len());
    for (l, h) in hidden.into_iter().enumerate() {
        let x: Vec<f32> = h
            .into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .map_err(|e| anyhow::anyhow!("hidden states: {e:?}"))?;
        let st = kernel_stats(&x, sequences, len, d);
        let (target_mean_cos, spa_distance) = if let Some(t) = &target {
            let sigma = spa::target(t, l, n_layers, len);
            let off = (sigma.iter().sum::<f64>() - len as f64) / (len * (len - 1)) as f64;
            (Some(off), Some(relative_distance(&st.cos, &sigma)))
        } else {
            (None, None)
        };
        layers.push(LayerKernel {
            layer: l,
            mean_cos: st.mean_cos,
            diag: st.diag,
            target_mean_cos,
            spa_distance,
            min_entry: (l > 0 && target.is_some()).then(|| realised[l - 1].min_entry),
        });
    }
    Ok(InitReport {
        sequences,
        len,
        layers,
    })
}

impl InitReport {
    /// The terminal table.
    pub fn print(&self, experiment: &str) {
        println!(
            "{experiment}: token kernel at init, {} sequences × {} tokens (layer 0 = input to block 1)",
            self.sequences, self.len
        );
        let spa = self.layers.iter().any(|l| l.spa_distance.is_some());
        print!("{:>5} {:>10} {:>10}", "layer", "mean cos", "‖x‖²/d");
        if spa {
            print!(
                " {:>11} {:>14} {:>12}",
                "target cos", "‖C−Σ‖/‖Σ‖", "min A_l"
            );
        }
        println!();
        for l in &self.layers {
            print!("{:>5} {:>10.4} {:>10.4}", l.layer, l.mean_cos, l.diag);
            if spa {
                let f =
                    |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
                print!(
                    " {:>11} {:>14} {:>12}",
                    f(l.target_mean_cos, 4),
                    f(l.spa_distance, 4),
                    l.min_entry.map_or("-".into(), |v| format!("{v:.2e}"))
                );
            }
            println!();
        }
        if spa {
            println!("every causal entry of every A_l is positive (checked in f64)");
        }
    }
}
