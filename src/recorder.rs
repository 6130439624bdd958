//! The writers of a training run: every scalar goes to TensorBoard and `metrics.jsonl`
//! together, plus the per-head sink map image and histogram and text cards.

use crate::checkpoint;
use crate::metrics::SinkReport;
use crate::tensorboard::{EventWriter, heatmap_rgb};
use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

/// Writes scalars to TensorBoard and `metrics.jsonl` together.
pub struct Recorder {
    tb: EventWriter,
    jsonl: std::fs::File,
    start: Instant,
}

impl Recorder {
    pub fn open(run_dir: &Path, resume_step: Option<u64>) -> Result<Self> {
        let path = run_dir.join("metrics.jsonl");
        // On resume, drop records written after the checkpoint (they will be written again).
        if let Some(step) = resume_step
            && path.exists()
        {
            let kept: String = std::fs::read_to_string(&path)?
                .lines()
                .filter(|l| {
                    serde_json::from_str::<serde_json::Value>(l)
                        .ok()
                        .and_then(|v| v["step"].as_u64())
                        .is_some_and(|s| s <= step)
                })
                .map(|l| format!("{l}\n"))
                .collect();
            checkpoint::write_atomic(&path, kept.as_bytes())?;
        }
        let jsonl = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        let mut tb = EventWriter::create(&run_dir.join("tb"))
            .with_context(|| format!("creating TensorBoard writer in {}", run_dir.display()))?;
        // A session start at the resume step makes TensorBoard's Python loader drop any points
        // a killed run wrote after its last checkpoint.
        tb.add_session_start(resume_step.unwrap_or(0) as i64)?;
        Ok(Self {
            tb,
            jsonl,
            start: Instant::now(),
        })
    }

    pub fn scalars(&mut self, step: u64, values: &[(String, f64)]) -> Result<()> {
        self.tb.add_scalars(step as i64, values)?;
        let map: serde_json::Map<String, serde_json::Value> = values
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::json!(v)))
            .collect();
        let line = serde_json::json!({
            "step": step,
            "time": self.start.elapsed().as_secs_f64(),
            "scalars": map,
        });
        writeln!(self.jsonl, "{line}")?;
        Ok(())
    }

    pub fn sink_map(&mut self, step: u64, report: &SinkReport) -> Result<()> {
        let rows = report.importance_first.len();
        let cols = report.importance_first.first().map_or(0, Vec::len);
        let values: Vec<f64> = report.importance_first.iter().flatten().copied().collect();
        let (w, h, px) = heatmap_rgb(&values, rows, cols, 16, 0.0, 1.0);
        self.tb
            .add_image_rgb("sink/importance_first_map", step as i64, w, h, &px)?;
        self.tb
            .add_histogram("sink/importance_first_hist", step as i64, &values)?;
        Ok(())
    }

    pub fn text(&mut self, tag: &str, text: &str) -> Result<()> {
        self.tb.add_text(tag, 0, text)?;
        Ok(())
    }

    pub fn flush(&mut self) -> Result<()> {
        self.tb.flush()?;
        self.jsonl.flush()?;
        Ok(())
    }
}
