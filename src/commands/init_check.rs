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
        print!("{}", r.render(&a.experiment.display().to_string()));
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
    /// The terminal table. Layers count block inputs from 0, as every sinklab metric
    /// (`layer00` = block 0): layer l is block l's input, the last one the last block's output.
    pub fn render(&self, experiment: &str) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let last = self.layers.len().saturating_sub(1);
        let _ = writeln!(
            out,
            "{experiment}: token kernel at init, {} sequences × {} tokens (layer l = the \
             block-l input, blocks counted from 0; layer {last} = the output of block {})",
            self.sequences,
            self.len,
            last.saturating_sub(1)
        );
        let spa = self.layers.iter().any(|l| l.spa_distance.is_some());
        let _ = write!(out, "{:>5} {:>10} {:>10}", "layer", "mean cos", "‖x‖²/d");
        if spa {
            let _ = write!(
                out,
                " {:>11} {:>14} {:>12}",
                "target cos", "‖C−Σ‖/‖Σ‖", "min A_l"
            );
        }
        out.push('\n');
        for l in &self.layers {
            let _ = write!(out, "{:>5} {:>10.4} {:>10.4}", l.layer, l.mean_cos, l.diag);
            if spa {
                let f =
                    |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
                let _ = write!(
                    out,
                    " {:>11} {:>14} {:>12}",
                    f(l.target_mean_cos, 4),
                    f(l.spa_distance, 4),
                    l.min_entry.map_or("-".into(), |v| format!("{v:.2e}"))
                );
            }
            out.push('\n');
        }
        if spa {
            out.push_str("every causal entry of every A_l is positive (checked in f64)\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_are_block_inputs_counted_from_zero() {
        // a 2-block model: rows 0, 1, 2 = block 0's input, block 1's input, block 1's output
        let row = |layer| LayerKernel {
            layer,
            mean_cos: 0.5,
            diag: 1.0,
            target_mean_cos: None,
            spa_distance: None,
            min_entry: None,
        };
        let r = InitReport {
            sequences: 4,
            len: 8,
            layers: (0..3).map(row).collect(),
        };
        let text = r.render("x.toml");
        let header = text.lines().next().unwrap();
        assert!(header.contains("layer l = the block-l input"), "{header}");
        assert!(
            header.contains("layer 2 = the output of block 1)"),
            "{header}"
        );
        assert!(!header.contains("block 2"), "there is no block 2: {header}");
        let rows: Vec<&str> = text.lines().skip(2).collect();
        assert_eq!(rows.len(), 3, "{text}");
        assert!(rows[0].trim_start().starts_with("0 ") && rows[2].trim_start().starts_with("2 "));
    }
}
