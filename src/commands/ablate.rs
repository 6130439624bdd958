//! `sinklab ablate`.

use super::AnalysisArgs;
use crate::analysis::ablate::{self, AblateOptions, AblateReport, MeanFrom, parse_units};
use crate::analysis::tasks::Task;
use crate::intervene::{AblationKind, Metric, Positions};
use anyhow::{Result, bail};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A run directory (its newest checkpoint is used) or runs/NAME/checkpoints/step_N.
    pub checkpoint: PathBuf,
    #[command(flatten)]
    pub common: AnalysisArgs,
    /// How a head's z (a group's k and v) is replaced: zero, mean (over --mean-from),
    /// resample (another sequence's, a seeded derangement) or move-to-first (the head's
    /// pattern row put on the first token; heads only).
    #[arg(long, default_value = "zero", value_parser = ["zero", "mean", "resample", "move-to-first"])]
    pub kind: String,
    /// `all` (every head on its own), `L:H,L:H` (a named set, ablated at once, against
    /// matched-random sets), `kv L:G,…` (key/value groups) or `kv all` (quoted or not:
    /// `--heads kv 18:2` and `--heads "kv 18:2"` are the same).
    #[arg(long, default_value = "all", num_args = 1..=2, value_names = ["SET", "UNITS"])]
    pub heads: Vec<String>,
    /// loss (mean NLL at --positions), kl (KL(clean ‖ ablated) at --positions) or logit-diff
    /// (mean over prompts of logit(answer) − logit(wrong) at the last position, as sinklab
    /// patch reads it; needs --task prompts FILE). Δ = ablated − baseline: a head that matters
    /// raises the loss and the KL and lowers the logit difference.
    #[arg(long, default_value = "loss", value_parser = ["loss", "logit-diff", "kl"])]
    pub metric: String,
    /// repeat ([first, R, R] with --n distinct tokens), natural (validation windows), text
    /// FILE (its windows), bb (Bigram-Backcopy: copy and bigram targets apart), or prompts FILE
    /// (the clean prompts of a sinklab patch --prompts file, every line: {"clean", "corrupt",
    /// "answer", "wrong"}; the one counted target is the answer at the last position).
    #[arg(long, default_value = "repeat", num_args = 1..=2, value_names = ["TASK", "FILE"])]
    pub task: Vec<String>,
    /// Where the metric is read: all, last or second-half of the positions with targets
    /// (default second-half on repeat, last on prompts, all otherwise). Ablations act at every
    /// position. On prompts the answer is the only counted target, so every choice reads the
    /// last position.
    #[arg(long, value_parser = ["all", "last", "second-half"])]
    pub positions: Option<String>,
    /// Distinct tokens of the repeat task (default 50; only with --task repeat).
    #[arg(long)]
    pub n: Option<usize>,
    /// Tokens per sequence of the natural, text and bb tasks (default: min(model.ctx, 128); the
    /// repeat task has 2·n + 1).
    #[arg(long)]
    pub len: Option<usize>,
    /// Sequences of the task (default 8; a prompts file gives all its prompts).
    #[arg(long)]
    pub sequences: Option<usize>,
    /// The reference set of a mean ablation: batch (the task batch itself), natural
    /// (validation windows) or task (another draw of the task; on prompts, the corrupted
    /// prompts).
    #[arg(long, default_value = "batch", value_parser = ["batch", "natural", "task"])]
    pub mean_from: String,
    /// Matched-random control sets of a named set.
    #[arg(long, default_value_t = 20)]
    pub controls: usize,
    /// Print ablate.json to stdout instead of the tables.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let kind = match a.kind.as_str() {
        "zero" => AblationKind::Zero,
        "mean" => AblationKind::Mean,
        "resample" => AblationKind::Resample,
        _ => AblationKind::MoveToFirst,
    };
    let metric = match a.metric.as_str() {
        "loss" => Metric::Loss,
        "kl" => Metric::Kl,
        _ => Metric::LogitDiff,
    };
    if a.heads.len() == 2 && a.heads[0] != "kv" {
        bail!(
            "--heads {}: two values only as `kv UNITS` (e.g. --heads kv 18:2); one otherwise \
             (the run directory comes before the options)",
            a.heads.join(" ")
        );
    }
    let units = parse_units(&a.heads.join(" "))?;
    if a.controls == 0 && matches!(units, crate::analysis::ablate::Units::Named { .. }) {
        bail!("--controls 0: a named set is compared with at least one matched-random set");
    }
    if a.mean_from != "batch" && kind != AblationKind::Mean {
        bail!("--mean-from names the reference set of --kind mean");
    }
    let run = a.common.device.open(&a.checkpoint)?;
    let len = a.len.unwrap_or(run.exp.model.ctx.min(128));
    let task = match a
        .task
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["repeat"] => {
            if let Some(l) = a.len {
                bail!("--len {l}: the repeat task's sequences have 2·--n + 1 tokens; set --n");
            }
            Task::Repeat {
                n: a.n.unwrap_or(50),
                reps: 2,
            }
        }
        [other, ..] if a.n.is_some() && *other != "repeat" => bail!(
            "--n: only --task repeat has a segment length (--task {other} reads --len and \
             --sequences)"
        ),
        ["natural"] => Task::Natural { len },
        ["text", file] => Task::Text {
            file: file.into(),
            len,
        },
        ["bb"] => Task::Bb { len },
        ["prompts", file] => Task::Prompts { file: file.into() },
        other => bail!(
            "--task {}: valid tasks are repeat, natural, text FILE, bb and prompts FILE",
            other.join(" ")
        ),
    };
    let positions = match a.positions.as_deref() {
        Some("all") => Positions::All,
        Some("last") => Positions::Last,
        Some(_) => Positions::SecondHalf,
        None if matches!(task, Task::Repeat { .. }) => Positions::SecondHalf,
        None if matches!(task, Task::Prompts { .. }) => Positions::Last,
        None => Positions::All,
    };
    if let Task::Prompts { file } = &task {
        for (flag, given) in [
            ("--sequences", a.sequences.is_some()),
            ("--len", a.len.is_some()),
        ] {
            if given {
                bail!(
                    "{flag}: --task prompts takes every prompt of {} at its own length",
                    file.display()
                );
            }
        }
    }
    let o = AblateOptions {
        kind,
        units,
        metric,
        task,
        positions,
        sequences: a.sequences.unwrap_or(8),
        mean_from: match a.mean_from.as_str() {
            "batch" => MeanFrom::Batch,
            "natural" => MeanFrom::Natural,
            _ => MeanFrom::Task,
        },
        controls: a.controls,
        seed: a.common.seed,
        dest: a.common.destination(),
    };
    let r = ablate::ablate(&run, &o, &mut |m| eprintln!("{m}"))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    let dir = o.dest.dir(&run);
    print(&r, &dir);
    Ok(())
}

fn print(r: &AblateReport, dir: &std::path::Path) {
    println!("ablate: Δ {} ({:.1} s)", ablate::describe(r), r.seconds);
    match r.baseline_bigram {
        Some(b) => println!(
            "  baseline: copy loss {:.4}, bigram loss {b:.4}",
            r.baseline
        ),
        None => println!("  baseline {:.4}", r.baseline),
    }
    if let Some(s) = &r.scan {
        let mut all: Vec<(f64, String)> = s
            .iter()
            .enumerate()
            .flat_map(|(l, row)| {
                row.iter().enumerate().map(move |(h, &d)| {
                    let label = if r.groups {
                        format!("kv {l}.{h}")
                    } else {
                        format!("{l}.{h}")
                    };
                    (d, label)
                })
            })
            .collect();
        // the units whose ablation hurts most first: the logit difference falls, the rest rise
        let (order, what) = match r.metric {
            Metric::LogitDiff => (-1.0, "largest drops (most negative Δ)"),
            Metric::Loss | Metric::Kl => (1.0, "largest Δ"),
        };
        all.sort_by(|a, b| (order * b.0).total_cmp(&(order * a.0)));
        let top: Vec<String> = all
            .iter()
            .take(8)
            .map(|(d, l)| format!("{l} {d:+.4}"))
            .collect();
        println!("  {what}: {}", top.join(", "));
        if let Some(b) = &r.scan_bigram {
            let at = |label: &str| -> f64 {
                let (l, h) = label
                    .trim_start_matches("kv ")
                    .split_once('.')
                    .expect("L.H");
                b[l.parse::<usize>().expect("layer")][h.parse::<usize>().expect("head")]
            };
            let top: Vec<String> = all
                .iter()
                .take(8)
                .map(|(_, l)| format!("{l} {:+.4}", at(l)))
                .collect();
            println!("  bigram Δ of the same: {}", top.join(", "));
        }
    }
    if let Some(t) = &r.triggers {
        println!("  copy Δ by trigger (its targets: input trigger i):");
        for (i, g) in t.offsets.iter().enumerate() {
            let deltas = match (&t.scan, &t.named) {
                (Some(scan), _) => {
                    let mut all: Vec<(f64, String)> = scan[i]
                        .iter()
                        .enumerate()
                        .flat_map(|(l, row)| {
                            row.iter().enumerate().map(move |(h, &d)| {
                                let kv = if r.groups { "kv " } else { "" };
                                (d, format!("{kv}{l}.{h}"))
                            })
                        })
                        .collect();
                    all.sort_by(|a, b| b.0.total_cmp(&a.0));
                    let top: Vec<String> = all
                        .iter()
                        .take(8)
                        .map(|(d, l)| format!("{l} {d:+.4}"))
                        .collect();
                    format!("largest Δ {}", top.join(", "))
                }
                (None, Some(named)) => format!("named set Δ {:+.4}", named[i]),
                (None, None) => String::new(),
            };
            println!(
                "    trigger {i} (offset {g}, {} targets, baseline {:.4}): {deltas}",
                t.targets[i], t.baseline[i]
            );
        }
    }
    if let Some(d) = &r.dormancy {
        let group = |g: &crate::analysis::ablate::DormancyGroup| match (g.mean_delta, g.max_delta) {
            (Some(mean), Some(max)) => {
                format!(
                    "{}, mean Δ {mean:+.4}, max {max:+.4}",
                    crate::progress::count(g.heads, "head", None)
                )
            }
            _ => "no heads".to_string(),
        };
        let rho = d
            .spearman_sink_share_delta
            .map_or("undefined (a constant)".to_string(), |r| format!("{r:+.2}"));
        println!(
            "  dormant heads (sink share ≥ {}, AHON-LN ≤ {}): {}; active: {}; Spearman(sink share, Δ) {rho}",
            d.thresholds.dormant_sink_share,
            d.thresholds.low_output_ahon_ln,
            group(&d.dormant),
            group(&d.active),
        );
    }
    if let Some(n) = &r.named {
        let mut c = n.controls.clone();
        c.sort_by(f64::total_cmp);
        println!(
            "  {}: Δ {:+.4}{}; {} ({}): median {:+.4}, max {:+.4}; percentile {:.0}",
            n.units.join(" "),
            n.delta,
            n.delta_bigram
                .map_or(String::new(), |b| format!(" (bigram {b:+.4})")),
            crate::progress::count(c.len(), "matched-random set", None),
            if n.exact {
                format!(
                    "every distinct matched set: the exact distribution of {}",
                    c.len()
                )
            } else {
                format!("drawn without repeats from {} distinct", n.distinct_sets)
            },
            crate::metrics::median(c.clone()),
            c.last().copied().expect("at least one control"),
            n.percentile
        );
    }
    println!("results in {}: {}", dir.display(), r.files.join(", "));
}
