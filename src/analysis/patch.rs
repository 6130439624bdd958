//! `sinklab patch` (docs/reference.md §11; TransformerLens's `patching.py`): activation
//! patching between clean and corrupted prompts at one site — by head, head × position or
//! layer × position, denoising or noising — with the normalised logit difference (or the
//! loss), and directional addition of a stored direction at a site.

use super::Output;
use super::probes::token_label;
use super::tasks::{PromptPairs, answer_targets, file_pairs, repeat_pairs};
use crate::heads::head_label;
use crate::intervene::patch::{PatchSpec, add_direction, mean_difference, normalise, patch_each};
use crate::intervene::{Metric, Positions, Prepared, Scoring};
use crate::model::{HeadSite, Site};
use crate::plot::{self, Heatmap, LinePlot, Scale, Series};
use crate::run::OpenRun;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where the prompts come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Prompts {
    /// The built-in repeat pairs ([`super::tasks::repeat_pairs`]).
    Repeat { n: usize, sequences: usize },
    /// A JSON Lines file of {clean, corrupt, answer, wrong}.
    File { file: PathBuf },
}

/// How patches are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum By {
    Head,
    HeadPosition,
    LayerPosition,
}

/// Which run is patched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Run the corrupted prompts with a clean activation patched in.
    Denoise,
    /// Run the clean prompts with a corrupted activation patched in.
    Noise,
}

/// A stored direction added at a site.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AddOptions {
    /// A JSON array of numbers, or None for the mean clean − corrupt difference at the site.
    pub file: Option<PathBuf>,
    pub layer: usize,
    pub site: Site,
    pub index: Option<usize>,
    pub scales: Vec<f64>,
}

/// Options of `sinklab patch`.
#[derive(Debug, Clone)]
pub struct PatchOptions {
    pub prompts: Prompts,
    pub site: Site,
    pub by: By,
    pub direction: Direction,
    pub metric: Metric,
    /// Layers of a head × position map (None: all).
    pub layers: Option<Vec<usize>>,
    pub add: Option<AddOptions>,
    pub seed: u64,
    pub dest: super::Destination,
}

/// Directional addition's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Addition {
    #[serde(flatten)]
    pub options: AddOptions,
    /// `<report stem>_direction.json` when the direction is the mean difference, else the file.
    pub direction: String,
    pub norm: f64,
    /// The corrupted prompts' metric at each scale, and normalised (1 = clean).
    pub values: Vec<f64>,
    pub normalised: Vec<f64>,
}

/// What `sinklab patch` found (its report, `patch_….json`: [`super::names::patch`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PatchReport {
    pub run_dir: PathBuf,
    pub checkpoint: PathBuf,
    pub step: u64,
    pub prompts: Prompts,
    pub count: usize,
    pub len: usize,
    pub site: Site,
    pub by: By,
    pub direction: Direction,
    pub metric: Metric,
    /// The metric of the clean and of the corrupted prompts.
    pub clean: f64,
    pub corrupt: f64,
    /// `[row][column]` the normalised metric (1 = clean, 0 = corrupt).
    pub normalised: Vec<Vec<f64>>,
    pub row_labels: Vec<String>,
    pub column_labels: Vec<String>,
    pub addition: Option<Addition>,
    pub seconds: f64,
    pub files: Vec<String>,
}

impl serde::Serialize for Site {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Site {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Everything `sinklab patch` needs before a model pass, every refusal made: the report's
/// name claimed, the prompt pairs (answers as the loss targets), the layers patched and a
/// `--add FILE` direction read.
pub struct PatchPlan {
    pub claim: super::Claim,
    pub pairs: PromptPairs,
    pub layers: Vec<usize>,
    /// `--add FILE`: the direction and the file's name.
    pub direction: Option<(Vec<f32>, String)>,
}

/// A patching result before it is written: the report and the mean-difference direction that
/// `--add mean-diff` computed (written beside the report).
pub struct Patched {
    pub report: PatchReport,
    pub mean_direction: Option<Vec<f32>>,
}

/// Run `sinklab patch`: [`plan`] (every refusal), [`compute`] (the typed report, no files),
/// [`render`] (the map, the addition curve, the direction and the report).
pub fn patch(run: &OpenRun, o: &PatchOptions, log: &mut dyn FnMut(&str)) -> Result<PatchReport> {
    let clock = std::time::Instant::now();
    let plan = plan(run, o)?;
    let mut done = compute(run, o, &plan, log)?;
    done.report.seconds = clock.elapsed().as_secs_f64();
    render(run, o, plan.claim, done)
}

/// The options checked against the run and the prompts built: every refusal of `patch` that
/// needs no model pass.
pub fn plan(run: &OpenRun, o: &PatchOptions) -> Result<PatchPlan> {
    let claim = o.dest.claim(run, super::names::patch(o))?;
    let cfg = &run.exp.model;
    let mut pairs: PromptPairs = match &o.prompts {
        Prompts::Repeat { n, sequences } => repeat_pairs(run, *n, *sequences, o.seed)?,
        Prompts::File { file } => file_pairs(run, file)?,
    };
    let len = pairs.clean.len;
    if len > cfg.ctx {
        bail!("the prompts are {len} tokens; model.ctx = {}", cfg.ctx);
    }
    // The loss metric reads the clean answer at the last position of both runs.
    answer_targets(&mut pairs.clean, &pairs.answers);
    answer_targets(&mut pairs.corrupt, &pairs.answers);
    if o.by != By::LayerPosition && matches!(o.site, Site::Stream(_)) {
        bail!(
            "{} is a residual-stream site: patch it --by layer-position",
            o.site
        );
    }
    if o.by == By::LayerPosition && matches!(o.site, Site::Head(_)) {
        bail!(
            "{} is a per-head site: patch it --by head or head-position",
            o.site
        );
    }
    if o.site == Site::Head(HeadSite::Gate)
        && cfg.attention.gate == (crate::config::GateConfig::None {})
    {
        bail!("gate: the model has no output gate");
    }
    let layers: Vec<usize> = o
        .layers
        .clone()
        .unwrap_or_else(|| (0..cfg.n_layers).collect());
    if let Some(&bad) = layers.iter().find(|&&l| l >= cfg.n_layers) {
        bail!("--layers {bad}: the model has layers 0..{}", cfg.n_layers);
    }
    // --add's place, checked before the model runs (add_direction checks it again)
    if let Some(a) = &o.add {
        if a.layer >= cfg.n_layers {
            bail!("--at {}: the model has layers 0..{}", a.layer, cfg.n_layers);
        }
        crate::intervene::patch::check_direction_place(a.site, a.index)?;
    }
    let direction = match o.add.as_ref().and_then(|a| a.file.as_ref()) {
        None => None,
        Some(f) => {
            let text = std::fs::read_to_string(f)
                .with_context(|| format!("reading --add {}", f.display()))?;
            let u: Vec<f32> = serde_json::from_str(&text).with_context(|| {
                format!("--add {}: expected a JSON array of numbers", f.display())
            })?;
            Some((u, f.display().to_string()))
        }
    };
    Ok(PatchPlan {
        claim,
        pairs,
        layers,
        direction,
    })
}

/// The patches of a plan, normalised by the clean − corrupted gap (refused when that gap is
/// within noise); writes nothing.
pub fn compute(
    run: &OpenRun,
    o: &PatchOptions,
    plan: &PatchPlan,
    log: &mut dyn FnMut(&str),
) -> Result<Patched> {
    let cfg = &run.exp.model;
    let (pairs, layers) = (&plan.pairs, &plan.layers);
    let (count, len) = (pairs.clean.batch, pairs.clean.len);
    let scoring = |b: &crate::data::Batch| Scoring {
        metric: o.metric,
        weights: Positions::Last.weights(b),
        answers: Some(pairs.answers.clone()),
    };
    let mut sites = vec![o.site];
    if let Some(a) = &o.add {
        sites.push(a.site);
    }
    let clean = Prepared::new(
        &run.model,
        &pairs.clean,
        &sites,
        scoring(&pairs.clean),
        &run.device,
    )?;
    let corrupt = Prepared::new(
        &run.model,
        &pairs.corrupt,
        &sites,
        scoring(&pairs.corrupt),
        &run.device,
    )?;
    let (m_clean, m_corr) = (clean.metric(), corrupt.metric());
    log(&format!(
        "{} of {len} tokens: metric {m_clean:.4} clean, {m_corr:.4} corrupted",
        crate::progress::count(count, "prompt pair", None)
    ));
    if let Err(why) =
        crate::intervene::patch::gap_beyond_noise(&clean.per_sequence(), &corrupt.per_sequence())
    {
        bail!(
            "{why}; choose prompts whose answers differ between the clean and corrupted runs \
             (a --prompts file, or more --sequences)"
        );
    }
    let (target, source) = match o.direction {
        Direction::Denoise => (&corrupt, &clean),
        Direction::Noise => (&clean, &corrupt),
    };
    let n_index = match o.site {
        Site::Head(HeadSite::K | HeadSite::V) => cfg.kv_heads(),
        Site::Head(_) => cfg.n_heads,
        Site::Stream(_) => 1,
    };
    let tokens = &pairs.clean.inputs[..len];
    let pos_labels: Vec<String> = (0..len)
        .map(|p| format!("{p} {}", token_label(&run.data, tokens[p])))
        .collect();
    let Grid {
        specs,
        row_labels,
        column_labels,
        cols,
    } = grid(o, layers, n_index, pos_labels);
    let bar = crate::progress::Progress::new(specs.len() as u64, "patches");
    let values = patch_each(target, source, &specs, &mut |k| bar.inc(k as u64))?;
    bar.finish();
    let normalised: Vec<Vec<f64>> = values
        .chunks(cols)
        .map(|r| r.iter().map(|&v| normalise(v, m_corr, m_clean)).collect())
        .collect();
    let mut mean_direction = None;
    let addition = match &o.add {
        None => None,
        Some(a) => {
            let (u, name) = match &plan.direction {
                Some((u, file)) => (u.clone(), file.clone()),
                None => {
                    let u = mean_difference(&clean, &corrupt, a.layer, a.site, a.index, None)?;
                    mean_direction = Some(u.clone());
                    (
                        u,
                        format!(
                            "{} (mean clean − corrupted at the last position)",
                            direction_file(&plan.claim)
                        ),
                    )
                }
            };
            let v = add_direction(
                &corrupt,
                a.layer,
                a.site,
                a.index,
                Some(len - 1),
                &u,
                &a.scales,
            )?;
            let norm = u.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
            Some(Addition {
                options: a.clone(),
                direction: name,
                norm,
                normalised: v.iter().map(|&x| normalise(x, m_corr, m_clean)).collect(),
                values: v,
            })
        }
    };
    let report = PatchReport {
        run_dir: run.run_dir.clone(),
        checkpoint: run.checkpoint.clone(),
        step: run.state.step,
        prompts: o.prompts.clone(),
        count,
        len,
        site: o.site,
        by: o.by,
        direction: o.direction,
        metric: o.metric,
        clean: m_clean,
        corrupt: m_corr,
        normalised,
        row_labels,
        column_labels,
        addition,
        seconds: 0.0,
        files: Vec::new(),
    };
    Ok(Patched {
        report,
        mean_direction,
    })
}

/// What `patch` patches: one spec per cell of the map, row by row, and the map's labels.
struct Grid {
    specs: Vec<PatchSpec>,
    row_labels: Vec<String>,
    column_labels: Vec<String>,
    cols: usize,
}

/// The cells of `--by`: (layer, head or group) for head, (layer, position) for layer-position,
/// (layer.head, position) for head-position.
fn grid(o: &PatchOptions, layers: &[usize], n_index: usize, pos_labels: Vec<String>) -> Grid {
    let len = pos_labels.len();
    let (specs, row_labels, column_labels, cols) = match o.by {
        By::Head => {
            let specs = layers
                .iter()
                .flat_map(|&layer| {
                    (0..n_index).map(move |i| PatchSpec {
                        layer,
                        site: o.site,
                        index: Some(i),
                        position: None,
                    })
                })
                .collect();
            let cols = (0..n_index).map(|i| i.to_string()).collect();
            (
                specs,
                layers.iter().map(|l| l.to_string()).collect(),
                cols,
                n_index,
            )
        }
        By::LayerPosition => {
            let specs = layers
                .iter()
                .flat_map(|&layer| {
                    (0..len).map(move |p| PatchSpec {
                        layer,
                        site: o.site,
                        index: None,
                        position: Some(p),
                    })
                })
                .collect();
            (
                specs,
                layers.iter().map(|l| l.to_string()).collect(),
                pos_labels,
                len,
            )
        }
        By::HeadPosition => {
            let mut specs = Vec::new();
            let mut rows = Vec::new();
            for &layer in layers {
                for i in 0..n_index {
                    rows.push(head_label(layer, i));
                    specs.extend((0..len).map(|p| PatchSpec {
                        layer,
                        site: o.site,
                        index: Some(i),
                        position: Some(p),
                    }));
                }
            }
            (specs, rows, pos_labels, len)
        }
    };
    Grid {
        specs,
        row_labels,
        column_labels,
        cols,
    }
}

/// `<stem>_direction.json`: where `--add mean-diff` writes its direction.
fn direction_file(claim: &super::Claim) -> String {
    format!("{}_direction.json", claim.stem)
}

/// The direction (`--add mean-diff`), the map, the addition curve and the report, under the
/// plan's claimed name.
pub fn render(
    run: &OpenRun,
    o: &PatchOptions,
    claim: super::Claim,
    done: Patched,
) -> Result<PatchReport> {
    let cfg = &run.exp.model;
    let Patched {
        mut report,
        mean_direction,
    } = done;
    let mut out = Output::new(claim, run)?;
    if let Some(u) = &mean_direction {
        let name = direction_file(&out.claim);
        out.json(&name, u)?;
    }
    let n_index = match o.site {
        Site::Head(HeadSite::K | HeadSite::V) => cfg.kv_heads(),
        Site::Head(_) => cfg.n_heads,
        Site::Stream(_) => 1,
    };
    let (normalised, row_labels, column_labels, addition) = (
        &report.normalised,
        &report.row_labels,
        &report.column_labels,
        &report.addition,
    );
    let what = format!(
        "{} {} {}, {}",
        match o.direction {
            Direction::Denoise => "denoising",
            Direction::Noise => "noising",
        },
        o.site,
        match o.by {
            By::Head => "by head",
            By::HeadPosition => "by head × position",
            By::LayerPosition => "by layer × position",
        },
        match o.metric {
            Metric::LogitDiff => "normalised logit difference",
            _ => "normalised loss",
        }
    );
    let png = plot::heatmap(&Heatmap {
        title: &what,
        x_label: match o.by {
            By::Head if n_index < cfg.n_heads => "key/value group",
            By::Head => "head",
            _ => "position (clean token)",
        },
        y_label: match o.by {
            By::HeadPosition => "head",
            _ => "layer",
        },
        rows: normalised,
        x_ticks: Some(column_labels),
        y_ticks: Some(row_labels),
        range: None,
        annotate: true,
        colours: crate::plot::Colours::Diverging,
    })?;
    let name = out.claim.figure("map");
    out.png(&name, "patch/map", png)?;
    if let Some(a) = addition {
        let series = vec![Series {
            name: format!("{} of layer {}", a.options.site, a.options.layer),
            points: a
                .options
                .scales
                .iter()
                .copied()
                .zip(a.normalised.iter().copied())
                .collect(),
            err: None,
        }];
        let png = plot::lines(&LinePlot {
            title: "directional addition on the corrupted prompts (1 = clean, 0 = corrupted)",
            x_label: "scale α of the added direction",
            y_label: "normalised metric",
            series: &series,
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            hlines: &[("clean".to_string(), 1.0), ("corrupted".to_string(), 0.0)],
            vlines: &[],
            markers: true,
        })?;
        let name = out.claim.figure("addition");
        out.png(&name, "patch/addition", png)?;
    }
    report.files = out.files.clone();
    report.files.push(out.claim.report());
    out.report(&report)?;
    Ok(report)
}
