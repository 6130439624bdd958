//! `sinklab heads`.

use super::AnalysisArgs;
use crate::analysis::heads::{self, HeadsOptions, HeadsReport, ProbeKind};
use crate::heads::{Measure, Score, Thresholds, TlMeasure, TriggerCopy};
use crate::progress::count;
use anyhow::{Result, bail};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A run directory (its newest checkpoint is used) or runs/NAME/checkpoints/step_N.
    pub checkpoint: PathBuf,
    #[command(flatten)]
    pub common: AnalysisArgs,
    /// The probe: `repeat` ([first, R, R] with R = --n distinct random tokens, repeated
    /// --reps times), `natural` (validation windows or --text) or `random` (random tokens).
    /// Default: `natural` with --text, else `repeat`.
    #[arg(long, value_parser = ["repeat", "natural", "random"])]
    pub probe: Option<String>,
    /// Distinct tokens of the repeated segment R.
    #[arg(long, default_value_t = 50)]
    pub n: usize,
    /// Copies of R.
    #[arg(long, default_value_t = 2)]
    pub reps: usize,
    /// Probe sequences.
    #[arg(long, default_value_t = 20)]
    pub sequences: usize,
    /// Tokens per sequence of the natural and random probes (default: min(model.ctx, 128)).
    #[arg(long)]
    pub len: Option<usize>,
    /// Natural probes from this text file's consecutive windows (implies --probe natural).
    #[arg(long, value_name = "FILE")]
    pub text: Option<PathBuf>,
    /// How the previous / duplicate / induction scores are measured: `primary` (the share of
    /// the whole row), or TransformerLens's detect_head `tl-mul` (Σ(A⊙D)/ΣA) or `tl-abs`
    /// (1 − round(Σ|A−D|/T, 3)).
    #[arg(long, default_value = "primary", value_parser = ["primary", "tl-mul", "tl-abs"])]
    pub measure: String,
    /// With tl-mul / tl-abs: `first` zeroes column 0 (its exclude_bos) or `none`.
    #[arg(long, value_parser = ["first", "none"])]
    pub exclude: Option<String>,
    /// Print heads.json to stdout instead of the tables.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let measure = match (a.measure.as_str(), a.exclude.as_deref()) {
        ("primary", None) => Measure::Primary,
        ("primary", Some(_)) => {
            bail!("--exclude applies to --measure tl-mul or tl-abs (TransformerLens's detect_head)")
        }
        (m, ex) => Measure::Tl {
            measure: if m == "tl-mul" {
                TlMeasure::Mul
            } else {
                TlMeasure::Abs
            },
            exclude_first: ex == Some("first"),
        },
    };
    let probe_name = match (a.probe.as_deref(), &a.text) {
        (None, Some(_)) => "natural",
        (None, None) => "repeat",
        (Some("natural"), _) => "natural",
        (Some(p), Some(_)) => bail!(
            "--text gives natural probes (the windows of the file); --probe {p} draws its own \
             tokens: drop one of the two"
        ),
        (Some(p), None) => p,
    };
    let run = a.common.device.open(&a.checkpoint)?;
    let len = a.len.unwrap_or(run.exp.model.ctx.min(128));
    let probe = match probe_name {
        "repeat" => {
            if a.len.is_some() {
                bail!(
                    "--len is the natural and random probes'; the repeat probe has --reps × --n + 1 tokens"
                );
            }
            ProbeKind::Repeat {
                n: a.n,
                reps: a.reps,
            }
        }
        "natural" => ProbeKind::Natural { len, text: a.text },
        _ => ProbeKind::Random { len },
    };
    let o = HeadsOptions {
        probe,
        sequences: a.sequences,
        seed: a.common.seed,
        measure,
        thresholds: Thresholds::default(),
        dest: a.common.destination(),
    };
    let report = heads::heads(&run, &o, &mut |m| eprintln!("{m}"))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let dir = o.dest.dir(&run);
    print(&report, &dir);
    Ok(())
}

fn print(r: &HeadsReport, dir: &std::path::Path) {
    println!(
        "heads: {} × {} ({}); {}; measure {}",
        count(r.n_layers, "layer", None),
        count(r.n_heads, "head", None),
        count(r.kv_heads, "key/value head", None),
        heads::probe_title(&r.probe),
        match r.measure {
            Measure::Primary => "share of the whole row".to_string(),
            Measure::Tl {
                measure,
                exclude_first,
            } => format!(
                "TransformerLens {} (exclude {})",
                if measure == TlMeasure::Mul {
                    "mul"
                } else {
                    "abs"
                },
                if exclude_first { "first" } else { "none" }
            ),
        }
    );
    for s in [
        Score::Previous,
        Score::Duplicate,
        Score::Induction,
        Score::Alpha1,
        Score::AhonLn,
        Score::Copy,
    ] {
        let top: Vec<String> = r.top[s.name()]
            .iter()
            .map(|t| format!("{} {:.3}", t.head, t.score))
            .collect();
        println!("  top {:<10} {}", s.name(), top.join(", "));
    }
    if let Some(tc) = &r.trigger_copy {
        println!(
            "  per-trigger copy score A[q, q − g] (validation windows, {} × {}):",
            tc.sequences, tc.len
        );
        for (i, (top, g)) in tc.top.iter().zip(&tc.offsets).enumerate() {
            let heads: Vec<String> = r.top[&TriggerCopy(i).name()]
                .iter()
                .map(|t| format!("{} {:.3}", t.head, t.score))
                .collect();
            let best = top.as_ref().map_or("none".into(), |t| t.head.clone());
            println!(
                "    trigger {i} (offset {g}, {} queries): copy head {best}; {}",
                tc.queries[i],
                heads.join(", ")
            );
        }
    }
    let counts: Vec<String> = r
        .class_counts
        .iter()
        .map(|(c, n)| format!("{c} {n}"))
        .collect();
    println!("  classes: {}", counts.join(", "));
    println!("results in {}: {}", dir.display(), r.files.join(", "));
}
