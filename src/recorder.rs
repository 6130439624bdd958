//! The writers of a training run: every scalar goes to TensorBoard and `metrics.jsonl`
//! together, plus the per-head sink map image and histogram and text cards.

use crate::checkpoint;
use crate::heads::{LayerHeads, Score};
use crate::metrics::{Proxy, SinkReport};
use crate::plot::{self, Heatmap};
use crate::rundir::RunDir;
use crate::tags::{self, Record, Tag};
use crate::tensorboard::{EventWriter, plugins};
use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

/// The Custom Scalars dashboard of a run: the curves a sink study compares on one chart each,
/// each chart's tags selected by their family ([`Tag::family`]).
fn layout() -> Vec<u8> {
    use crate::tags::{HeadMetric as H, LayerMetric as L, Scalar as S};
    let fam = |tags: &[Tag]| -> Vec<String> {
        tags.iter()
            .map(|t| Tag::family_regex(&t.family()))
            .collect()
    };
    let headline = crate::metrics::eps_name(crate::metrics::HEADLINE_EPS);
    let score = |s: Score| fam(&[s.tag(0, 0)]);
    plugins::layout(&[
        (
            "sinks",
            vec![
                ("Sink₁ at every ε", vec![tags::sink_rate_every_eps_regex(1)]),
                (
                    "Sink_k at the headline ε, k = 1..k_max",
                    fam(&[Tag::sink1(&headline)]),
                ),
                (
                    "attention to token 1, by layer (f_attn_uniform: the floor of uniform attention)",
                    fam(&[
                        Tag::Layer(L::FirstTokenMass, 0),
                        S::FAttn.into(),
                        S::FAttnUniform.into(),
                    ]),
                ),
                (
                    "value drain ‖v₁‖ / mean ‖v_t‖, by head",
                    fam(&[Tag::Head(H::ValueDrain, 0, 0)]),
                ),
                (
                    "massive activations: ‖h₁‖ / mean ‖h_t‖, by layer",
                    fam(&[Tag::Layer(L::NormRatio, 0)]),
                ),
            ],
        ),
        (
            "heads",
            vec![
                (
                    "previous-token score, by head (repeat probe)",
                    score(Score::Previous),
                ),
                (
                    "induction score, by head (repeat probe)",
                    score(Score::Induction),
                ),
                (
                    "first-token importance α₁, by head (repeat probe)",
                    score(Score::Alpha1),
                ),
                (
                    "AHON-LN: ‖z_h‖ / the layer's mean, by head (repeat probe)",
                    score(Score::AhonLn),
                ),
            ],
        ),
        (
            "loss",
            vec![
                (
                    "training and validation loss",
                    fam(&[
                        S::TrainLoss.into(),
                        S::ValLoss.into(),
                        S::ValLossUnchanged.into(),
                    ]),
                ),
                (
                    "synthetic task: copy vs bigram loss",
                    fam(&[S::BbLossCopy.into(), S::BbLossBigram.into()]),
                ),
                (
                    "repeat task: repeated vs fresh targets",
                    fam(&[S::RepeatLossRepeated.into(), S::RepeatLossFresh.into()]),
                ),
                (
                    "synthetic task: attention to BOS, dormant vs active queries",
                    vec![tags::bb_attn_first_regex()],
                ),
            ],
        ),
    ])
}

/// The first-token importance α₁ of every head, `rows[layer][head]`, as a heat map: layers
/// down, heads across, viridis over 0..1 with a colour bar, each value written in its cell.
/// `sinklab analyze` draws `importance_first.png` with it.
pub fn importance_map(rows: &[Vec<f64>], title: &str) -> Result<Vec<u8>> {
    head_map(rows, title, Some((0.0, 1.0)))
}

/// The heat map of one score, `rows[layer][head]`, in the layout of `importance_first.png`.
pub fn score_map(rows: &[Vec<f64>], s: Score, what: &str) -> Result<Vec<u8>> {
    head_map(rows, &format!("{} ({what})", s.title()), s.range())
}

/// A (layer × head) heat map: layers down, heads across, each value written in its cell.
pub fn head_map(rows: &[Vec<f64>], title: &str, range: Option<(f64, f64)>) -> Result<Vec<u8>> {
    plot::heatmap(&Heatmap {
        title,
        x_label: "head",
        y_label: "layer",
        rows,
        x_ticks: None,
        y_ticks: None,
        range,
        annotate: true,
        colours: crate::plot::Colours::Sequential,
    })
}

/// The training run's TensorBoard image `sink/importance_first_map`: [`importance_map`] of
/// the probe set's α₁ (α₁* for a normaliser read through its proxy). The title carries no
/// step (TensorBoard shows it), so every step's image has the same size.
pub fn sink_map_png(rows: &[Vec<f64>], proxy: Proxy) -> Result<Vec<u8>> {
    let star = if proxy == Proxy::Weights { "" } else { "*" };
    importance_map(
        rows,
        &format!("first-token importance α₁{star} (probe set)"),
    )
}

/// Whether `dir` holds TensorBoard event files (directly).
pub fn has_event_files(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("events.out.tfevents.")
        })
}

/// Delete the TensorBoard event files directly in `dir` (an earlier attempt of a run that is
/// starting afresh); nothing else is touched.
pub fn remove_event_files(dir: &Path) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with("events.out.tfevents.")
            && entry.file_type().is_ok_and(|t| t.is_file())
        {
            std::fs::remove_file(entry.path()).ok();
        }
    }
}

/// Writes scalars to TensorBoard and `metrics.jsonl` together; [`Recorder::disabled`] writes
/// nothing (the MPI ranks other than rank 0, the one writer).
pub struct Recorder {
    open: Option<Writers>,
}

struct Writers {
    tb: EventWriter,
    jsonl: std::fs::File,
    jsonl_path: std::path::PathBuf,
    start: Instant,
}

impl Recorder {
    /// A recorder that writes nothing.
    pub fn disabled() -> Self {
        Self { open: None }
    }

    pub fn open(run_dir: &Path, resume_step: Option<u64>) -> Result<Self> {
        let path = RunDir(run_dir).metrics();
        // On resume, drop records written after the checkpoint (they will be written again).
        if let Some(step) = resume_step
            && path.exists()
        {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let mut kept = String::new();
            for (line, _) in tags::parse_lines(&text, &path)?
                .into_iter()
                .filter(|(_, r)| r.step <= step)
            {
                kept.push_str(line);
                kept.push('\n');
            }
            checkpoint::write_atomic(&path, kept.as_bytes())?;
        }
        let jsonl = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        // Event files live in the run directory itself, so that `tensorboard --logdir runs`
        // lists the run under its own name.
        let mut tb = EventWriter::create(run_dir)
            .with_context(|| format!("creating TensorBoard writer in {}", run_dir.display()))?;
        // A session start just after the resume step makes TensorBoard's Python loader drop the
        // points a killed run wrote after its last checkpoint (steps > resume step, written again
        // now), and keep the checkpoint step's own points, which are not written again.
        tb.add_session_start(resume_step.map_or(0, |s| s + 1) as i64)?;
        tb.add_layout(&layout())?;
        Ok(Self {
            open: Some(Writers {
                tb,
                jsonl,
                jsonl_path: path,
                start: Instant::now(),
            }),
        })
    }

    pub fn scalars(&mut self, step: u64, values: &[(Tag, f64)]) -> Result<()> {
        let Some(w) = &mut self.open else {
            return Ok(());
        };
        w.tb.add_scalars(step as i64, values)
            .with_context(|| format!("writing {}", w.tb.path().display()))?;
        let record = Record {
            step,
            time: w.start.elapsed().as_secs_f64(),
            scalars: values.iter().cloned().collect(),
        };
        let line = serde_json::to_string(&record)?;
        writeln!(w.jsonl, "{line}")
            .with_context(|| format!("writing {}", w.jsonl_path.display()))?;
        Ok(())
    }

    /// The first-token importance of every (layer, head) at `step`: the heat map
    /// [`sink_map_png`] as the image `sink/importance_first_map`, and the values as the
    /// histogram `sink/importance_first_hist`.
    pub fn sink_map(&mut self, step: u64, report: &SinkReport, proxy: Proxy) -> Result<()> {
        let Some(w) = &mut self.open else {
            return Ok(());
        };
        let values: Vec<f64> = report.importance_first.iter().flatten().copied().collect();
        let png = sink_map_png(&report.importance_first, proxy)?;
        let (pw, ph) = plot::png_size(&png)?;
        let at = w.tb.path().display().to_string();
        w.tb.add_png("sink/importance_first_map", step as i64, pw, ph, png)
            .and_then(|_| {
                w.tb.add_histogram("sink/importance_first_hist", step as i64, &values)
            })
            .with_context(|| format!("writing {at}"))?;
        Ok(())
    }

    /// The live head scores' maps at `step` ([`Score::LIVE`]): the heat map [`score_map`] of
    /// each score as the image `heads/{name}_map`.
    pub fn head_maps(&mut self, step: u64, layers: &[LayerHeads]) -> Result<()> {
        let Some(w) = &mut self.open else {
            return Ok(());
        };
        let at = w.tb.path().display().to_string();
        for s in Score::LIVE {
            let rows: Vec<Vec<f64>> = layers
                .iter()
                .map(|l| l.get(s).expect("a probe score").to_vec())
                .collect();
            let png = score_map(&rows, s, "repeat probe")?;
            let (pw, ph) = plot::png_size(&png)?;
            w.tb.add_png(&format!("heads/{}_map", s.name()), step as i64, pw, ph, png)
                .with_context(|| format!("writing {at}"))?;
        }
        Ok(())
    }

    pub fn text(&mut self, tag: &str, text: &str) -> Result<()> {
        if let Some(w) = &mut self.open {
            w.tb.add_text(tag, 0, text)?;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> Result<()> {
        let Some(w) = &mut self.open else {
            return Ok(());
        };
        w.tb.flush()
            .with_context(|| format!("writing {}", w.tb.path().display()))?;
        w.jsonl
            .flush()
            .with_context(|| format!("writing {}", w.jsonl_path.display()))?;
        Ok(())
    }
}
