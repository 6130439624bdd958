//! The names of analysis reports and figures, from what each analysis computed: two analyses
//! with different settings never share a name (and one with the same name is refused without
//! `--force`, [`super::Destination::claim`]).
//!
//! ```text
//! ablate_<task>_<units>_<kind>_<metric>[_pos-<positions>]   ablate_repeat_all_zero_loss
//!                                                          ablate_repeat_set-1.3+5.5_mean-from-natural_kl
//! patch_<prompts>_<site>_<by>_<direction>_<metric>[_layers-…][_add-<site>-l<layer>]
//!                                                          patch_repeat_z_head_denoise_logit-diff
//! heads_<probe>[_<measure>]                                heads_repeat, heads_natural-text-book_tl-mul-exclude-first
//! ```
//! A file argument enters by its stem (`--task text book.txt` → `text-book`); a named set by
//! its heads (`set-1.3+5.5`), or by its size and a hash when that is longer than 48 characters.

use super::ablate::{AblateOptions, MeanFrom, Units};
use super::heads::{HeadsOptions, ProbeKind};
use super::patch::{By, Direction, PatchOptions, Prompts};
use super::tasks::Task;
use crate::heads::{Measure, TlMeasure};
use crate::intervene::{AblationKind, Metric, Positions};
use std::path::Path;

/// A file's stem, reduced to letters, digits, `.` and `-`.
fn file_part(p: &Path) -> String {
    p.file_stem()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

fn metric_part(m: Metric) -> &'static str {
    match m {
        Metric::Loss => "loss",
        Metric::Kl => "kl",
        Metric::LogitDiff => "logit-diff",
    }
}

fn task_part(t: &Task) -> String {
    match t {
        Task::Repeat { .. } => "repeat".into(),
        Task::Natural { .. } => "natural".into(),
        Task::Text { file, .. } => format!("text-{}", file_part(file)),
        Task::Bb { .. } => "bb".into(),
        Task::Prompts { file } => format!("prompts-{}", file_part(file)),
    }
}

/// `all`, `kv-all`, or a named set by its units (`set-1.3+5.5`, `set-kv18.2`).
fn units_part(u: &Units) -> String {
    match u {
        Units::AllHeads => "all".into(),
        Units::AllGroups => "kv-all".into(),
        Units::Named { units } => {
            let labels: Vec<String> = units
                .iter()
                .map(|u| u.label().replace("kv ", "kv"))
                .collect();
            let joined = labels.join("+");
            if joined.len() <= 48 {
                format!("set-{joined}")
            } else {
                use sha2::Digest;
                let h = sha2::Sha256::digest(joined.as_bytes());
                let hex: String = h[..4].iter().map(|b| format!("{b:02x}")).collect();
                format!("set-{}units-{hex}", units.len())
            }
        }
    }
}

/// The default reading positions of a task (where the name leaves them out).
fn default_positions(t: &Task) -> Positions {
    match t {
        Task::Repeat { .. } => Positions::SecondHalf,
        Task::Prompts { .. } => Positions::Last,
        Task::Natural { .. } | Task::Text { .. } | Task::Bb { .. } => Positions::All,
    }
}

/// `sinklab ablate`'s report stem.
pub fn ablate(o: &AblateOptions) -> String {
    let kind = match (o.kind, o.mean_from) {
        (AblationKind::Zero, _) => "zero".to_string(),
        (AblationKind::Resample, _) => "resample".to_string(),
        (AblationKind::MoveToFirst, _) => "move-to-first".to_string(),
        (AblationKind::Mean, MeanFrom::Batch) => "mean".to_string(),
        (AblationKind::Mean, MeanFrom::Natural) => "mean-from-natural".to_string(),
        (AblationKind::Mean, MeanFrom::Task) => "mean-from-task".to_string(),
    };
    let mut s = format!(
        "ablate_{}_{}_{kind}_{}",
        task_part(&o.task),
        units_part(&o.units),
        metric_part(o.metric)
    );
    if o.positions != default_positions(&o.task) {
        s.push_str(match o.positions {
            Positions::All => "_pos-all",
            Positions::Last => "_pos-last",
            Positions::SecondHalf => "_pos-second-half",
        });
    }
    s
}

/// `sinklab patch`'s report stem.
pub fn patch(o: &PatchOptions) -> String {
    let prompts = match &o.prompts {
        Prompts::Repeat { .. } => "repeat".to_string(),
        Prompts::File { file } => format!("prompts-{}", file_part(file)),
    };
    let by = match o.by {
        By::Head => "head",
        By::HeadPosition => "head-position",
        By::LayerPosition => "layer-position",
    };
    let direction = match o.direction {
        Direction::Denoise => "denoise",
        Direction::Noise => "noise",
    };
    let mut s = format!(
        "patch_{prompts}_{}_{by}_{direction}_{}",
        o.site,
        metric_part(o.metric)
    );
    if let Some(layers) = &o.layers {
        let l: Vec<String> = layers.iter().map(|l| l.to_string()).collect();
        s.push_str(&format!("_layers-{}", l.join(".")));
    }
    if let Some(a) = &o.add {
        s.push_str(&format!("_add-{}-l{}", a.site, a.layer));
    }
    s
}

/// `sinklab heads`'s report stem.
pub fn heads(o: &HeadsOptions) -> String {
    let probe = match &o.probe {
        ProbeKind::Repeat { .. } => "repeat".to_string(),
        ProbeKind::Natural { text: None, .. } => "natural".to_string(),
        ProbeKind::Natural {
            text: Some(file), ..
        } => format!("natural-{}", file_part(file)),
        ProbeKind::Random { .. } => "random".to_string(),
    };
    match o.measure {
        Measure::Primary => format!("heads_{probe}"),
        Measure::Tl {
            measure,
            exclude_first,
        } => format!(
            "heads_{probe}_tl-{}{}",
            match measure {
                TlMeasure::Mul => "mul",
                TlMeasure::Abs => "abs",
            },
            if exclude_first { "-exclude-first" } else { "" }
        ),
    }
}
