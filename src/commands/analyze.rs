//! `sinklab analyze`.

use super::AnalysisArgs;
use crate::analysis::geometry::QkHead;
use crate::analysis::inspect::{self, AnalysisReport, AnalyzeOptions};
use crate::metrics::{HEADLINE_EPS, eps_name};
use anyhow::{Result, anyhow};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A run directory (its newest checkpoint is used) or runs/NAME/checkpoints/step_N.
    pub checkpoint: PathBuf,
    #[command(flatten)]
    pub common: AnalysisArgs,
    /// Probe sequences per kind.
    #[arg(long, default_value_t = 100)]
    pub sequences: usize,
    /// Probe length T (capped at model.ctx).
    #[arg(long, default_value_t = 64)]
    pub len: usize,
    /// Thresholds ε of the Sink_k^ε table (comma-separated; must hold the headline ε 0.3).
    #[arg(long, value_delimiter = ',', default_values_t = crate::metrics::EPS_GRID)]
    pub eps: Vec<f64>,
    /// Largest k of the Sink_k^ε table.
    #[arg(long, default_value_t = 10)]
    pub k_max: usize,
    /// Attention maps to draw as LAYER:HEAD (repeatable, 0-based; default: per layer the
    /// head with the highest first-token importance).
    #[arg(long = "map", value_name = "LAYER:HEAD")]
    pub maps: Vec<String>,
    /// Text for the attention maps (default: the first natural probe sequence).
    #[arg(long)]
    pub map_text: Option<String>,
    /// Attention bar: mean received attention must exceed this.
    #[arg(long, default_value_t = 0.2)]
    pub bar_mean: f64,
    /// Attention bar: standard deviation of received attention must be below this.
    #[arg(long, default_value_t = 0.1)]
    pub bar_std: f64,
    /// Attention bar: at least this many later queries must see the key.
    #[arg(long, default_value_t = 8)]
    pub bar_min_queries: usize,
    /// W_U bands for the dark ratio of attention-bar tokens.
    #[arg(long, default_value_t = 20)]
    pub bands: usize,
    /// Natural probes from this text file: its consecutive windows of --len tokens (at most
    /// --sequences; a shorter text is one window of its own length) instead of the run's
    /// validation split.
    #[arg(long, value_name = "FILE")]
    pub text: Option<PathBuf>,
    /// Print analysis.json to stdout instead of the tables.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let maps = a
        .maps
        .iter()
        .map(|m| {
            m.split_once(':')
                .and_then(|(l, h)| Some((l.parse().ok()?, h.parse().ok()?)))
                .ok_or_else(|| anyhow!("--map {m}: expected LAYER:HEAD, e.g. 2:0"))
        })
        .collect::<Result<Vec<_>>>()?;
    let run = a.common.device.open(&a.checkpoint)?;
    let o = AnalyzeOptions {
        sequences: a.sequences,
        len: a.len,
        eps: a.eps,
        k_max: a.k_max,
        maps,
        map_text: a.map_text,
        bar_mean: a.bar_mean,
        bar_std: a.bar_std,
        bar_min_queries: a.bar_min_queries,
        bands: a.bands,
        dest: a.common.destination(),
        seed: a.common.seed,
        text: a.text,
    };
    let report = inspect::analyze(&run, &o, &mut |m| eprintln!("{m}"))?;
    let dir = o.dest.dir(&run);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report, &dir);
    }
    Ok(())
}

/// The terminal summary: Sink_k^ε per probe kind, then activations and q·k geometry per
/// layer, then the attention bars.
fn print(r: &AnalysisReport, dir: &std::path::Path) {
    let p = &r.probe;
    println!(
        "{}_k^eps (%), {} sequences × {} tokens (BOS: {}){}",
        r.metric,
        p.sequences,
        p.len,
        p.bos,
        p.text.as_ref().map_or(String::new(), |t| format!(
            "; natural probes from {} ({} tokens)",
            t.display(),
            p.text_tokens.unwrap_or(0)
        ))
    );
    for (kind, label) in [
        ("natural", "natural"),
        (
            "as_trained",
            "natural, with the training data's token changes (as trained)",
        ),
        ("random", "random"),
        ("repeated", "repeated"),
    ] {
        let Some(k) = r.kinds.get(kind) else {
            continue; // as_trained: only for runs trained with token changes
        };
        println!("\n{label}:");
        print!("{:>6}", "eps");
        for i in 1..=p.k_max {
            print!("{:>7}", format!("k={i}"));
        }
        println!();
        for e in &p.eps {
            print!("{:>6}", eps_name(*e));
            for r in k.sink_rate.get(&eps_name(*e)).into_iter().flatten() {
                print!("{r:>7.1}");
            }
            println!();
        }
        if !k.slot_rate.is_empty() {
            let parts: Vec<String> = k
                .slot_rate
                .iter()
                .map(|(e, r)| format!("eps {e}: {r:.1}"))
                .collect();
            println!("slot Sink1* (%): {}", parts.join("  "));
        }
        println!(
            "F-Attn {:.3} (uniform causal attention: {:.3}) | M-Act {:.2}",
            k.f_attn, p.f_attn_uniform, k.m_act
        );
    }
    if let Some(nat) = r.kinds.get("natural") {
        let head = eps_name(HEADLINE_EPS);
        print!("\n{}_1^eps (%) by layer | natural:", r.metric);
        for e in &p.eps {
            print!(" {:>5}", eps_name(*e));
        }
        println!(" | random {head} | repeated {head}");
        for l in 0..nat.norm_ratio.len() {
            print!("{l:>5}{:>19}", "");
            for e in &p.eps {
                let v = nat.sink1_by_layer.get(&eps_name(*e)).map_or(0.0, |v| v[l]);
                print!(" {v:>5.1}");
            }
            let at = |kind: &str| {
                r.kinds
                    .get(kind)
                    .and_then(|k| k.sink1_by_layer.get(&head))
                    .map_or("-".to_string(), |v| format!("{:.1}", v[l]))
            };
            println!(" | {:>10} | {:>12}", at("random"), at("repeated"));
        }
    }
    println!(
        "\nlayer | ‖h1‖/‖h_rest‖ | top1 |h| | median |h| | massive | cos(q,k1) vs rest | ‖q‖‖k1‖ vs rest"
    );
    for (a, heads) in r.activations.iter().zip(&r.qk) {
        let m = |f: &dyn Fn(&QkHead) -> f64| {
            heads.iter().map(f).sum::<f64>() / heads.len().max(1) as f64
        };
        println!(
            "{:>5} | {:>13.2} | {:>8.2} | {:>10.3} | {:>7.1} | {:>6.3} vs {:>6.3} | {:>6.2} vs {:>6.2}",
            a.layer,
            a.norm_ratio,
            a.top3[0],
            a.median_abs,
            a.massive_count,
            m(&|h| h.cos_first),
            m(&|h| h.cos_rest),
            m(&|h| h.norm_first),
            m(&|h| h.norm_rest)
        );
    }
    let v = &r.valley;
    println!(
        "\nlayer | {}_1 (%) | entropy S/ln min(T,d) | kurtosis | max |h| | attn-out kurtosis | attn-out max | secondary sinks: heads (%), per head",
        r.metric
    );
    for l in 0..v.sink1.len() {
        println!(
            "{l:>5} | {:>8.1} | {:>21.3} | {:>8.2} | {:>7.2} | {:>17.2} | {:>12.2} | {:>6.1}, {:.3}",
            v.sink1[l],
            v.entropy_norm[l],
            v.kurtosis[l],
            v.max_abs[l],
            v.attn_out_kurtosis[l],
            v.attn_out_max_abs[l],
            v.secondary_heads[l],
            v.secondary_count[l]
        );
    }
    let positions: Vec<String> = v
        .secondary_positions
        .iter()
        .map(|(k, s)| format!("{k} ({s:.1}%)"))
        .collect();
    println!(
        "lowest entropy at layer {}, highest {}_1 at layer {}; Spearman ρ(Sink_1, entropy) over \
         layers {}; secondary sinks most often at positions {}",
        v.entropy_min_layer,
        r.metric,
        v.sink1_max_layer,
        v.spearman.map_or("-".to_string(), |x| format!("{x:.2}")),
        if positions.is_empty() {
            "-".to_string()
        } else {
            positions.join(", ")
        }
    );
    let b = &r.bars;
    println!(
        "\nattention bars (mean > {}, std < {}): {} found; dark ratio of bar tokens {}",
        b.thresholds.mean_gt,
        b.thresholds.std_lt,
        b.total,
        b.dark_ratio_bars
            .map_or("-".to_string(), |x| format!("{x:.3}"))
    );
    println!("results: {}", dir.display());
}
