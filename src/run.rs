//! The run directory: what a run writes, where, and how it is opened again.
//!
//! ```text
//! runs/NAME/resolved.toml      the full resolved experiment (written before step 0)
//! runs/NAME/provenance.json    git revision, features, device, seed, argv, versions
//! runs/NAME/tokenizer.json     the tokenizer (loads in Python's `tokenizers`)
//! runs/NAME/metrics.jsonl      one JSON object per record: {"step", "time", "scalars": {...}}
//! runs/NAME/tb/                TensorBoard event files
//! runs/NAME/summary.json       the final summary of a finished (or stopped) run
//! runs/NAME/checkpoints/step_NNNNNNNN/{model.safetensors, optim.safetensors, state.json}
//! ```
//!
//! Checkpoints are written atomically ([`crate::checkpoint`]); a checkpoint resumes only the run
//! whose configuration digest it carries.

use crate::backend::{self, Provenance};
use crate::checkpoint::{self, HostTensor};
use crate::config::{self, DeviceKind, Experiment};
use crate::data;
use crate::lock;
use crate::model::Lm;
use crate::optim::{self, Optimizer};
use crate::rundir::{self, RunDir};
use anyhow::{Context, Result, anyhow, bail};
use burn::tensor::Device;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// `state.json` inside a checkpoint.
#[derive(Debug, Serialize, Deserialize)]
pub struct CheckpointState {
    /// Optimizer steps completed; the data position is a pure function of it.
    pub step: u64,
    pub adam_t: u64,
    pub seed: u64,
    pub config_digest: String,
    pub vocab_size: usize,
    /// The f16 loss scale at this step (`train.precision = "f16"` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<optim::LossScale>,
    /// The run's first step's loss, so that a resumed run's `summary.json` keeps it
    /// (checkpoints written before this field have none: the resumed segment's first loss is
    /// used then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_loss: Option<f64>,
}

/// Read a checkpoint's `state.json`.
pub fn read_state(ckpt: &Path) -> Result<CheckpointState> {
    let path = ckpt.join("state.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{}: not a valid checkpoint state", path.display()))
}

/// Load a checkpoint's `model.safetensors` into `model` (every parameter must be there, with its
/// shape).
pub fn load_weights(model: Lm, ckpt: &Path) -> Result<Lm> {
    let mut weights = checkpoint::SafetensorsReader::open(&ckpt.join("model.safetensors"))?;
    optim::import_params_from(model, &mut weights).map_err(|e| anyhow!("{}: {e}", ckpt.display()))
}

/// sha256 of the resolved config text: a checkpoint only resumes the run it belongs to.
pub fn config_digest(exp: &Experiment) -> String {
    use sha2::{Digest, Sha256};
    data::hex(&Sha256::digest(exp.to_toml().as_bytes()))
}

/// `(run directory, checkpoint directory)` for a checkpoint directory or a run directory (whose
/// newest checkpoint is taken).
pub fn locate_checkpoint(path: &Path) -> Result<(PathBuf, PathBuf)> {
    if path.join("state.json").exists() {
        let run_dir = path.parent().and_then(Path::parent).ok_or_else(|| {
            anyhow!(
                "{}: checkpoint is not inside a run directory",
                path.display()
            )
        })?;
        Ok((run_dir.to_path_buf(), path.to_path_buf()))
    } else {
        let (_, c) = checkpoint::list_checkpoints(path)
            .pop()
            .ok_or_else(|| no_checkpoint(path))?;
        Ok((path.to_path_buf(), c))
    }
}

/// Why `path` has no checkpoint to open: a run directory that has not reached its first
/// checkpoint (training, or stopped before one) is told apart from a path that is not a run.
fn no_checkpoint(path: &Path) -> anyhow::Error {
    if RunDir(path).resolved().exists() {
        let every = std::fs::read_to_string(RunDir(path).resolved())
            .ok()
            .and_then(|t| config::from_str(rundir::RESOLVED, &t).ok())
            .map(|e| format!(" (train.checkpoint_every = {})", e.train.checkpoint_every))
            .unwrap_or_default();
        anyhow!(
            "{}: this run has no checkpoint yet{every}: it is still training towards its first \
             one, or it stopped before one (its `sinklab train ... --resume` continues it)",
            path.display()
        )
    } else {
        anyhow!(
            "{}: no checkpoint found: expected a run directory (with resolved.toml and \
             checkpoints/) or one of its checkpoints/step_N",
            path.display()
        )
    }
}

/// Load a model from a checkpoint directory (or the newest checkpoint of a run directory).
pub fn load_checkpoint(
    path: &Path,
    device: &Device,
) -> Result<(Experiment, Lm, PathBuf, CheckpointState)> {
    let (run_dir, ckpt) = locate_checkpoint(path)?;
    let resolved = RunDir(&run_dir).resolved();
    let text = std::fs::read_to_string(&resolved)
        .with_context(|| format!("reading {}", resolved.display()))?;
    let exp = config::from_str(&resolved.display().to_string(), &text)?;
    let state = read_state(&ckpt)?;
    // A skeleton (no random draws): every parameter comes from the checkpoint.
    let model = load_weights(Lm::skeleton(&exp.model, state.vocab_size, device), &ckpt)?;
    Ok((exp, model, run_dir, state))
}

/// A trained run opened for analysis: its config, model, data and device.
pub struct OpenRun {
    pub exp: Experiment,
    pub model: Lm,
    pub run_dir: PathBuf,
    pub checkpoint: PathBuf,
    pub state: CheckpointState,
    pub data: data::Dataset,
    pub device: Device,
}

/// Open a run directory (newest checkpoint) or checkpoint directory on `device` (default: the
/// run's own device), and prepare its data. A relative data cache directory is relative to
/// where training ran; from elsewhere the shards are rebuilt (deterministically) next to the
/// run instead.
pub fn open_run(
    path: &Path,
    device: Option<DeviceKind>,
    log: &mut dyn FnMut(&str),
) -> Result<OpenRun> {
    let (run_dir0, ckpt) = locate_checkpoint(path)?;
    let resolved = RunDir(&run_dir0).resolved();
    let text = std::fs::read_to_string(&resolved).with_context(|| {
        format!(
            "{}: no resolved.toml (not a sinklab run directory)",
            run_dir0.display()
        )
    })?;
    let exp0 = config::from_str(&resolved.display().to_string(), &text)?;
    let device = backend::device(device.unwrap_or(exp0.run.device))?;
    let (exp, model, run_dir, state) = load_checkpoint(&ckpt, &device)?;
    let mut d = exp.data.clone();
    if !d.cache_dir.is_absolute() && !d.cache_dir.exists() {
        d.cache_dir = run_dir.join("_cache");
    }
    // A tokenizer file given relative to where the run was made: the run directory's copy
    // serves when opened from elsewhere.
    if let config::TokenizerConfig::File { path, .. } = &mut d.tokenizer
        && !path.exists()
        && RunDir(&run_dir).tokenizer().exists()
    {
        *path = RunDir(&run_dir).tokenizer();
    }
    let data = match prepared_data(&run_dir, &d)? {
        Some(data) => data,
        None => data::Dataset::prepare(&d, log)?,
    };
    Ok(OpenRun {
        exp,
        model,
        run_dir,
        checkpoint: ckpt,
        state,
        data,
        device,
    })
}

/// `data.json` of a run: where its prepared corpus lives (absolute), so that the analysis
/// commands open the shards from any directory without re-reading the sources.
#[derive(Serialize, Deserialize)]
struct PreparedRef {
    prepared: PathBuf,
    manifest_sha256: String,
}

/// Record in `run_dir/data.json` which prepared corpus the run trains on (prepared corpora
/// only; generated tasks are rebuilt from the configuration).
pub fn record_prepared_data(run_dir: &Path, data: &data::Dataset) -> Result<()> {
    let manifest = data.dir.join("manifest.json");
    if !manifest.exists() {
        return Ok(()); // a generated task: no manifest
    }
    let r = PreparedRef {
        prepared: std::path::absolute(&data.dir)?,
        manifest_sha256: checkpoint::file_sha256(&manifest)?,
    };
    checkpoint::write_atomic(
        &RunDir(run_dir).data(),
        serde_json::to_string_pretty(&r)?.as_bytes(),
    )
}

/// The prepared corpus `run_dir/data.json` names, opened, when it is still there unchanged;
/// `None` otherwise (the caller prepares it again from the configuration).
fn prepared_data(run_dir: &Path, d: &config::DataConfig) -> Result<Option<data::Dataset>> {
    let Ok(text) = std::fs::read_to_string(RunDir(run_dir).data()) else {
        return Ok(None);
    };
    let r: PreparedRef = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a data reference", RunDir(run_dir).data().display()))?;
    match checkpoint::file_sha256(&r.prepared.join("manifest.json")) {
        Ok(sha) if sha == r.manifest_sha256 => {}
        _ => return Ok(None), // gone or changed: prepared again from the configuration
    }
    data::Dataset::open(&r.prepared, &d.tokenizer).map(Some)
}

/// Where a run starts: the directory is locked and prepared (resolved.toml and provenance
/// written), and the checkpoint to resume from, if any.
pub struct Start {
    pub run_dir: PathBuf,
    /// The run directory's exclusive lock, held while the run trains ([`crate::lock`]); `None`
    /// on the MPI ranks other than rank 0, which write nothing ([`Start::follower`]).
    pub lock: Option<lock::DirLock>,
    /// Whether this start created the run directory.
    pub created_dir: bool,
    /// sha256 of the run's `resolved.toml` as it was before this start (when resuming): the
    /// digest its checkpoints carry, even if today's sinklab writes the same configuration
    /// with more (defaulted) keys.
    pub previous_digest: Option<String>,
    /// (step, checkpoint directory) of the newest good checkpoint when resuming.
    pub resume_from: Option<(u64, PathBuf)>,
    /// Things to tell the user: checkpoints passed over (corrupt files, unreadable state), an
    /// earlier start's files replaced.
    pub warnings: Vec<String>,
    /// What `provenance.json` holds (`None` on the ranks other than rank 0).
    pub provenance: Option<Provenance>,
}

impl Start {
    pub fn resumed_step(&self) -> Option<u64> {
        self.resume_from.as_ref().map(|(s, _)| *s)
    }

    /// The start of an MPI rank other than rank 0: the run directory rank 0 locked and
    /// prepared, and the checkpoint it chose, without a lock or anything written.
    pub fn follower(
        run_dir: PathBuf,
        previous_digest: Option<String>,
        resume_from: Option<(u64, PathBuf)>,
    ) -> Start {
        Start {
            run_dir,
            lock: None,
            created_dir: false,
            previous_digest,
            resume_from,
            warnings: Vec::new(),
            provenance: None,
        }
    }
}

/// The files and directories a start writes into a run directory before its first checkpoint
/// (besides `checkpoints/` and TensorBoard's `events.out.tfevents.*`): sinklab's to replace
/// when that start never reached a checkpoint.
const START_FILES: [&str; 6] = rundir::START_FILES;

/// What a directory a run is about to use holds.
#[derive(Debug, PartialEq)]
pub enum DirState {
    /// Nothing (or only a released lock file).
    Empty,
    /// The files of a start that never reached a checkpoint (it failed, or was killed): the
    /// next start replaces them.
    Stub,
    /// A run with at least one checkpoint.
    Run,
    /// Entries sinklab did not write (named): never touched.
    Foreign(Vec<String>),
}

/// Classify `dir` (see [`DirState`]). A stub is recognised by its `resolved.toml` (a start's
/// first file after the lock): without it, even sinklab-named files are someone else's.
pub fn dir_state(dir: &Path) -> DirState {
    if !checkpoint::list_checkpoints(dir).is_empty() {
        return DirState::Run;
    }
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != lock::LOCK_FILE)
        .collect();
    names.sort();
    if names.is_empty() {
        return DirState::Empty;
    }
    let marked = RunDir(dir).resolved().is_file();
    let ours = |n: &String| {
        START_FILES.contains(&n.as_str())
            || is_start_temporary(n)
            || n.starts_with("events.out.tfevents.")
            || (n == rundir::CHECKPOINTS && checkpoints_only_temporaries(dir))
    };
    let foreign: Vec<String> = names
        .iter()
        .filter(|n| !marked || !ours(n))
        .cloned()
        .collect();
    if foreign.is_empty() {
        DirState::Stub
    } else {
        DirState::Foreign(foreign)
    }
}

/// The temporary of an atomic write of one of [`START_FILES`] (`.resolved.toml.tmpPID`) that a
/// kill interrupted.
fn is_start_temporary(name: &str) -> bool {
    START_FILES.iter().any(|f| {
        name.strip_prefix('.')
            .and_then(|r| r.strip_prefix(f))
            .and_then(|r| r.strip_prefix(".tmp"))
            .is_some_and(|pid| pid.chars().all(|c| c.is_ascii_digit()))
    })
}

/// `dir/checkpoints` holds nothing but checkpoint temporaries of a killed write.
fn checkpoints_only_temporaries(dir: &Path) -> bool {
    std::fs::read_dir(RunDir(dir).checkpoints()).is_ok_and(|rd| {
        rd.flatten()
            .all(|e| e.file_name().to_string_lossy().starts_with(".tmp_step_"))
    })
}

/// Remove a stub's files (see [`DirState::Stub`]); nothing else is touched.
pub fn clear_stub(dir: &Path) {
    for f in START_FILES {
        std::fs::remove_file(dir.join(f)).ok();
    }
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if is_start_temporary(&e.file_name().to_string_lossy()) {
            std::fs::remove_file(e.path()).ok();
        }
    }
    crate::recorder::remove_event_files(dir);
    checkpoint::remove_stale_temporaries(dir);
    std::fs::remove_dir(RunDir(dir).checkpoints()).ok();
}

/// Lock and prepare the run directory of `exp`. A fresh run refuses a directory that already
/// holds a run (a checkpoint) or files sinklab did not write; the files of an earlier start
/// that never reached a checkpoint are replaced, whatever its configuration. `resume` requires
/// the same configuration as the run's `resolved.toml` (read with today's defaults, so that a
/// setting added to sinklab since the run started still matches); with no checkpoint to resume
/// it starts from step 0. `ranks` are the MPI ranks that train the run, for the provenance
/// (empty: one process).
pub fn start(exp: &Experiment, resume: bool, ranks: Vec<backend::RankInfo>) -> Result<Start> {
    let run_dir = exp.run_dir();
    let resolved_path = RunDir(&run_dir).resolved();
    let foreign = |names: Vec<String>| {
        anyhow!(
            "run directory {} holds files sinklab did not write for a run ({}); sinklab will not \
             overwrite or delete them: choose another run.name (e.g. --set run.name=NEW) or \
             run.out_dir",
            run_dir.display(),
            names.join(", ")
        )
    };
    // A directory another process writes is refused with its holder's name; someone else's
    // files are refused before anything (the lock file included) is put beside them.
    if let Some(holder) = lock::holder(&run_dir) {
        return Err(lock::Busy {
            dir: run_dir.clone(),
            holder: Some(holder),
            advice: None,
        }
        .into());
    }
    if let DirState::Foreign(names) = dir_state(&run_dir) {
        return Err(foreign(names));
    }
    let created_dir = !run_dir.exists();
    std::fs::create_dir_all(&run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
    let lock = lock::acquire(&run_dir, "train")?;
    let mut previous_digest = None;
    let mut warnings = Vec::new();
    let resume_from = match dir_state(&run_dir) {
        DirState::Foreign(names) => return Err(foreign(names)),
        DirState::Empty => None,
        DirState::Stub => {
            clear_stub(&run_dir);
            warnings.push(format!(
                "{}: an earlier start never reached a checkpoint; its files are replaced{}",
                run_dir.display(),
                if resume {
                    " (nothing to resume: starting from step 0)"
                } else {
                    ""
                }
            ));
            None
        }
        DirState::Run if !resume => bail!(
            "run directory {} already holds a run; pass --resume to continue it, or choose another \
             run.name (e.g. --set run.name=NEW)",
            run_dir.display()
        ),
        DirState::Run => {
            if resolved_path.exists() {
                check_same_config(exp, &resolved_path)?;
                use sha2::{Digest, Sha256};
                let prev = std::fs::read(&resolved_path)?;
                previous_digest = Some(checkpoint::hex(&Sha256::digest(&prev)));
            }
            Some(newest_good_checkpoint(&run_dir, &mut warnings)?)
        }
    };
    let resumed_step = resume_from.as_ref().map(|(s, _)| *s);
    checkpoint::write_atomic(&resolved_path, exp.to_toml().as_bytes())?;
    let mut provenance = Provenance::collect(exp, resumed_step);
    provenance.world_size = ranks.len().max(1);
    provenance.ranks = ranks;
    let prov_name = match resumed_step {
        None => rundir::PROVENANCE.to_string(),
        Some(s) => format!("provenance.resume_{s:08}.json"),
    };
    checkpoint::write_atomic(
        &run_dir.join(prov_name),
        serde_json::to_string_pretty(&provenance)?.as_bytes(),
    )?;
    Ok(Start {
        run_dir,
        lock: Some(lock),
        created_dir,
        previous_digest,
        resume_from,
        provenance: Some(provenance),
        warnings,
    })
}

/// The newest checkpoint of `run_dir` whose files match their checksums and whose state
/// parses (stale temporaries of a killed write removed first); the ones passed over are
/// reported in `warnings`.
fn newest_good_checkpoint(run_dir: &Path, warnings: &mut Vec<String>) -> Result<(u64, PathBuf)> {
    checkpoint::remove_stale_temporaries(run_dir);
    let before = warnings.len();
    for (step, dir) in checkpoint::list_checkpoints(run_dir).into_iter().rev() {
        match checkpoint::verify_checkpoint(&dir).and_then(|_| read_state(&dir).map(|_| ())) {
            Ok(()) => {
                if warnings.len() > before {
                    warnings.push(format!(
                        "warning: resuming from the newest good checkpoint instead, {}",
                        dir.display()
                    ));
                }
                return Ok((step, dir));
            }
            Err(e) => warnings.push(format!(
                "warning: checkpoint {} cannot be used: {e:#}",
                dir.display()
            )),
        }
    }
    bail!(
        "no usable checkpoint in {}:\n{}",
        run_dir.display(),
        warnings[before..].join("\n")
    )
}

/// Remove what a fresh start that failed before its first checkpoint wrote into its run
/// directory (the start's files, records and event files, checkpoint temporaries), and the
/// directory itself when this start created it and nothing else is left. Called with the lock
/// held; the lock file goes last.
pub fn discard_stub(start: &Start) {
    let dir = &start.run_dir;
    // a rank other than rank 0 holds no lock and wrote nothing
    if start.lock.is_none() || start.resume_from.is_some() || dir_state(dir) != DirState::Stub {
        return;
    }
    clear_stub(dir);
    if start.created_dir {
        std::fs::remove_file(dir.join(lock::LOCK_FILE)).ok();
        std::fs::remove_dir(dir).ok(); // only if empty
    }
}

/// Refuse to resume a run whose `resolved.toml` differs from `exp`, naming every changed key by
/// its TOML path with the old and new values.
pub fn check_same_config(exp: &Experiment, resolved_path: &Path) -> Result<()> {
    let prev = std::fs::read_to_string(resolved_path)?;
    let now = exp.to_toml();
    // The run's configuration as today's sinklab reads it (defaults added since it started).
    let prev_now = toml::from_str::<toml::Table>(&prev)
        .ok()
        .and_then(|t| config::from_table(rundir::RESOLVED, t).ok())
        .map(|e| e.to_toml());
    if prev == now || prev_now.as_deref() == Some(now.as_str()) {
        return Ok(());
    }
    let parse = |t: &str| toml::from_str::<toml::Table>(t).unwrap_or_default();
    let changes = config::diff(&parse(prev_now.as_deref().unwrap_or(&prev)), &parse(&now));
    let dir = resolved_path.parent().unwrap_or(Path::new("."));
    bail!(
        "{}: --resume with a configuration that differs from the run's resolved.toml:\n  {}\n\
         resume with the same file and --set flags, or choose a new run.name (a run is not \
         changed or extended in place: to train on from its weights, start a new run with --set \
         'train.init_from=\"{}\"')",
        dir.display(),
        if changes.is_empty() {
            "(the same keys and values written differently)".to_string()
        } else {
            changes.join("\n  ")
        },
        dir.display(),
    );
}

/// Restore the model and optimizer of a run from its checkpoint `dir`, which must belong to
/// `exp`'s configuration (its digest, or `previous_digest`: that of the run's `resolved.toml`
/// as an earlier sinklab wrote it, already checked equal to `exp` by [`start`]); returns the
/// step it was taken at.
pub fn restore(
    exp: &Experiment,
    previous_digest: Option<&str>,
    dir: &Path,
    model: Lm,
    adam: &mut Optimizer,
    device: &Device,
) -> Result<(Lm, u64)> {
    let state = read_state(dir)?;
    if state.config_digest != config_digest(exp)
        && Some(state.config_digest.as_str()) != previous_digest
    {
        bail!(
            "{}: checkpoint belongs to another configuration",
            dir.display()
        );
    }
    let model = load_weights(model, dir)?;
    adam.import(
        &checkpoint::load_safetensors(&dir.join("optim.safetensors"))?,
        state.adam_t,
        device,
    );
    Ok((model, state.step))
}

/// Where training stands when a checkpoint is written (with the optimizer's own count, what
/// `state.json` records).
pub struct Reached<'a> {
    /// Optimizer steps done.
    pub step: u64,
    pub vocab: usize,
    /// f16's dynamic loss scale, when training at f16.
    pub loss_scale: Option<&'a optim::LossScale>,
    /// The run's first training loss (the summary's, kept across resumes).
    pub first_loss: Option<f64>,
}

/// Write the checkpoint of `at.step` (weights, optimizer state, `state.json`) atomically,
/// keeping the newest `train.keep_checkpoints`.
pub fn save_checkpoint(
    run_dir: &Path,
    exp: &Experiment,
    model: &Lm,
    adam: &Optimizer,
    at: Reached,
) -> Result<()> {
    let Reached {
        step,
        vocab,
        loss_scale,
        first_loss,
    } = at;
    let weights: BTreeMap<String, HostTensor> = optim::export_params(model);
    let mut meta = std::collections::HashMap::new();
    meta.insert("format".to_string(), "sinklab".to_string());
    meta.insert("step".to_string(), step.to_string());
    meta.insert(
        "layout".to_string(),
        "linear weights are [d_in, d_out]".to_string(),
    );
    let state = CheckpointState {
        step,
        adam_t: adam.t,
        seed: exp.run.seed,
        config_digest: config_digest(exp),
        vocab_size: vocab,
        loss_scale: loss_scale.cloned(),
        first_loss,
    };
    checkpoint::commit_checkpoint(
        run_dir,
        step,
        &[
            (
                "model.safetensors",
                checkpoint::FileBody::Tensors(&weights, Some(meta)),
            ),
            (
                "optim.safetensors",
                checkpoint::FileBody::Tensors(&adam.export(), None),
            ),
            (
                "state.json",
                checkpoint::FileBody::Bytes(serde_json::to_vec_pretty(&state)?),
            ),
        ],
        exp.train.keep_checkpoints,
    )?;
    Ok(())
}
