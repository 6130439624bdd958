//! Preparation: a corpus of any size streamed into memory-mapped token shards.
//!
//! 1. The plan: every domain's source files (the embedded corpus, a corpus directory, or
//!    `[data.sources]` files, directories and globs). The cache key hashes each file's path,
//!    size and modification time (not its bytes, so that a cached corpus opens without reading
//!    it), the tokenizer choice, `val_fraction` and `bad_input`.
//! 2. The tokenizer: byte-level, a `tokenizer.json`, or a BPE trained on the training split
//!    (a first pass counts each domain's text bytes, the second feeds the first
//!    (1 − val_fraction) of them) or on a sample (`sample_bytes` or `sample_documents`, split evenly over the
//!    domains, each share from the start of its domain). Documents stream into the trainer,
//!    which keeps only its pre-token counts.
//! 3. Tokenization: per source file, a reader thread decodes documents into batches of
//!    [`BATCH_BYTES`]; the batch is tokenized on every core (rayon) and appended, each document
//!    followed by the end-of-document token, to the file's shard `DOMAIN/NNNNN.u16` (`u32`
//!    when the vocabulary exceeds 65 536), written to a temporary file and renamed when
//!    complete, then its index entry `DOMAIN/NNNNN.json` (source path, size, sha256, documents,
//!    tokens, skipped input). An interrupted preparation resumes at the first shard without
//!    an index entry.
//! 4. The manifest (`manifest.json`, written last and atomically): per domain its shards and
//!    token counts, the last ⌈val_fraction · N⌉ tokens of its stream held out for validation.
//!
//! Memory is bounded by two batches of text in flight plus their ids, the longest document,
//! and (BPE) the trainer's pre-token counts; not by the corpus.

use super::lock::DirLock;
use super::source::{FileRead, SourceFile};
use super::tokens::{Tokens, Width};
use super::{Dataset, Domain, hex};
use crate::config::{BadInput, DataConfig, SourceFormat, TokenizerConfig};
use crate::tokenizer::Tokenizer;
use anyhow::{Context, Result, anyhow, bail};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::sync_channel;

/// Text per tokenization batch (two are in flight: one read, one tokenized).
pub const BATCH_BYTES: usize = 8 << 20;
const MANIFEST_VERSION: u32 = 2;

/// One domain of the plan.
struct PlanDomain {
    name: String,
    files: Vec<SourceFile>,
    text_field: String,
}

/// What will be prepared and under which name.
struct Plan {
    name: String,
    domains: Vec<PlanDomain>,
}

/// `manifest.json` of a prepared corpus.
#[derive(Serialize, Deserialize, Debug)]
pub struct Manifest {
    pub version: u32,
    pub corpus: String,
    pub tokenizer: TokenizerConfig,
    /// sha256 of tokenizer.json.
    pub tokenizer_sha256: String,
    pub vocab_size: usize,
    pub width: Width,
    pub val_fraction: f64,
    pub bad_input: BadInput,
    pub domains: Vec<DomainManifest>,
    /// Wall-clock seconds of the preparation that completed the directory.
    pub seconds: f64,
    /// Shards an interrupted preparation had finished and this one kept (0: one go).
    #[serde(default)]
    pub resumed_shards: usize,
}

#[derive(Serialize, Deserialize, Debug)]
pub struct DomainManifest {
    pub name: String,
    pub tokens: u64,
    pub train_tokens: u64,
    pub val_tokens: u64,
    pub documents: u64,
    pub text_bytes: u64,
    /// Skipped input by kind, summed over the shards.
    pub skipped: BTreeMap<String, u64>,
    pub shards: Vec<Shard>,
}

/// One shard and the source file it was made from (also its index entry `NNNNN.json`).
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Shard {
    /// Relative to the prepared directory.
    pub file: String,
    pub tokens: u64,
    pub source: String,
    pub source_bytes: u64,
    #[serde(flatten)]
    pub read: FileRead,
}

/// Every problem with the configured corpus on this machine, each as (TOML path, message): a
/// corpus directory's manifest and domain files, every `data.sources` pattern matching at
/// least one readable file of a known format (nothing is read).
pub fn check(cfg: &DataConfig) -> Vec<(String, String)> {
    survey(cfg).1
}

/// The plan, or an error listing every problem [`check`] finds.
fn plan(cfg: &DataConfig) -> Result<Plan> {
    let (plan, problems) = survey(cfg);
    if problems.is_empty() {
        return Ok(plan);
    }
    let lines: Vec<String> = problems
        .iter()
        .map(|(path, m)| format!("`{path}`: {m}"))
        .collect();
    bail!("{}", lines.join("\n"))
}

/// The plan and every problem found while making it (the plan lacks the files with problems).
fn survey(cfg: &DataConfig) -> (Plan, Vec<(String, String)>) {
    let mut problems = Vec::new();
    if !cfg.sources.is_empty() {
        let mut domains = Vec::new();
        for (name, s) in &cfg.sources {
            let mut files = Vec::new();
            for (i, pat) in s.files.iter().enumerate() {
                let at = format!("data.sources.{name}.files[{i}]");
                match expand(pat, s.format) {
                    Err(e) => problems.push((at, format!("{pat:?}: {e:#}"))),
                    Ok(found) if found.is_empty() => {
                        problems.push((at, format!("{pat:?} matches no file")))
                    }
                    Ok(found) => {
                        for p in found {
                            match SourceFile::open(&p, s.format) {
                                Ok(f) => files.push(f),
                                Err(e) => problems.push((at.clone(), format!("{pat:?}: {e:#}"))),
                            }
                        }
                    }
                }
            }
            domains.push(PlanDomain {
                name: name.clone(),
                files,
                text_field: s.text_field.clone(),
            });
        }
        let plan = Plan {
            name: "sources".into(),
            domains,
        };
        return (plan, problems);
    }
    if cfg.corpus == "embedded" {
        let manifest: CorpusManifest = serde_json::from_str(super::EMBEDDED_MANIFEST)
            .expect("embedded manifest is valid JSON");
        let domains = super::EMBEDDED
            .iter()
            .map(|(d, t)| {
                assert!(manifest.domains.contains_key(*d), "{d} in the manifest");
                PlanDomain {
                    name: d.to_string(),
                    files: vec![SourceFile::embedded(d, t)],
                    text_field: String::new(),
                }
            })
            .collect();
        let plan = Plan {
            name: "embedded".into(),
            domains,
        };
        return (plan, problems);
    }
    let dir = PathBuf::from(&cfg.corpus);
    let mpath = dir.join("manifest.json");
    let manifest = std::fs::read_to_string(&mpath)
        .map_err(|e| {
            format!(
                "{:?}: cannot read {} ({e}); expected \"embedded\", a corpus directory built by \
                 `python3 scripts/build_corpus.py`, or files under [data.sources.NAME]",
                cfg.corpus,
                mpath.display()
            )
        })
        .and_then(|text| {
            serde_json::from_str::<CorpusManifest>(&text)
                .map_err(|e| format!("{}: not a sinklab corpus manifest: {e}", mpath.display()))
        });
    let mut plan = Plan {
        name: String::new(),
        domains: Vec::new(),
    };
    match manifest {
        Err(m) => problems.push(("data.corpus".into(), m)),
        Ok(manifest) => {
            for (name, d) in &manifest.domains {
                match SourceFile::open(&dir.join(&d.file), SourceFormat::Text) {
                    Ok(f) => plan.domains.push(PlanDomain {
                        name: name.clone(),
                        files: vec![f],
                        text_field: String::new(),
                    }),
                    Err(e) => problems.push((
                        "data.corpus".into(),
                        format!("{:?}: domain {name}: {e:#}", cfg.corpus),
                    )),
                }
            }
            plan.name = manifest.name;
        }
    }
    (plan, problems)
}

/// A corpus directory's `manifest.json` (`datasets/README.md`).
#[derive(Deserialize)]
struct CorpusManifest {
    name: String,
    domains: BTreeMap<String, CorpusDomain>,
}

#[derive(Deserialize)]
struct CorpusDomain {
    file: String,
}

/// The files a `data.sources` entry names: a glob's matches or a directory's files
/// (recursively, those whose extension names a format unless `format` is set), in name order;
/// a plain path as it is.
fn expand(pat: &str, format: SourceFormat) -> Result<Vec<PathBuf>> {
    if pat.contains(['*', '?', '[']) {
        let mut v: Vec<PathBuf> = glob::glob(pat)
            .map_err(|e| anyhow!("not a valid glob: {e}"))?
            .collect::<Result<_, _>>()?;
        v.retain(|p| p.is_file());
        v.sort();
        return Ok(v);
    }
    let p = PathBuf::from(pat);
    if p.is_dir() {
        let mut v = Vec::new();
        let mut stack = vec![p];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
                let path = e?.path();
                if path.is_dir() {
                    stack.push(path);
                } else if format != SourceFormat::Auto
                    || SourceFile::open(&path, SourceFormat::Auto).is_ok()
                {
                    v.push(path);
                }
            }
        }
        v.sort();
        return Ok(v);
    }
    if !p.is_file() {
        bail!("no such file or directory");
    }
    Ok(vec![p])
}

/// The cache directory's key: everything that determines the shards.
fn key(cfg: &DataConfig, plan: &Plan) -> Result<String> {
    let tok_key = match &cfg.tokenizer {
        TokenizerConfig::File { path, bos, eot } => {
            let sha = crate::checkpoint::file_sha256(path).context("data.tokenizer.path")?;
            format!("file {sha} {bos:?} {eot:?}")
        }
        other => format!("{other:?}"),
    };
    let mut h = Sha256::new();
    h.update(format!(
        "v{MANIFEST_VERSION}|{tok_key}|{}|{:?}|",
        cfg.val_fraction, cfg.bad_input
    ));
    for d in &plan.domains {
        h.update(format!("domain {} {:?}|", d.name, d.text_field));
        for f in &d.files {
            match &f.origin {
                super::source::Origin::Embedded(_, t) => h.update(Sha256::digest(t.as_bytes())),
                super::source::Origin::File(_) => h.update(format!(
                    "{} {} {} {:?} {:?}|",
                    f.name(),
                    f.size,
                    f.mtime_ns,
                    f.format,
                    f.compression
                )),
            }
        }
    }
    Ok(hex(&h.finalize())[..16].to_string())
}

impl Dataset {
    /// Tokenize and split the configured corpus into shards under
    /// `data.cache_dir/NAME-KEY/`, or open them when they exist (start-up maps the shards and
    /// reads nothing else).
    pub fn prepare(cfg: &DataConfig, log: &mut dyn FnMut(&str)) -> Result<Self> {
        if let Some(task) = &cfg.synthetic {
            return super::synthetic::dataset(cfg, task, log);
        }
        let plan = plan(cfg)?;
        let dir = cfg
            .cache_dir
            .join(format!("{}-{}", plan.name, key(cfg, &plan)?));
        if dir.join("manifest.json").exists() {
            log(&format!("data: using prepared shards {}", dir.display()));
        } else {
            // Runs of a sweep may prepare the same corpus at once: one builds, the others wait
            // for its lock and then open the result (`super::lock`). A failed build removes
            // what it created; an interrupted one (killed) leaves its shards to resume from.
            let lock = DirLock::take(&dir)?;
            if dir.join("manifest.json").exists() {
                log(&format!(
                    "data: using shards another process prepared {}",
                    dir.display()
                ));
            } else {
                let before = lock.entries()?;
                if let Err(e) = build(cfg, &plan, &dir, log) {
                    return Err(match lock.undo(&before) {
                        Ok(()) => e,
                        Err(u) => anyhow!(
                            "{e:#}\n(removing what the failed preparation created in {} failed \
                             too: {u:#})",
                            dir.display()
                        ),
                    });
                }
            }
        }
        Self::open(&dir, &cfg.tokenizer)
    }

    /// Open a prepared directory: read its manifest and tokenizer, map its shards.
    pub fn open(dir: &Path, tokenizer: &TokenizerConfig) -> Result<Self> {
        let m = read_manifest(dir)?;
        let tokenizer = prepared_tokenizer(&dir.join("tokenizer.json"), tokenizer)?;
        let mut domains = Vec::new();
        for d in &m.domains {
            let mut parts = Vec::new();
            for s in &d.shards {
                parts.push(Tokens::map(&dir.join(&s.file), m.width, s.tokens as usize)?);
            }
            let all = Tokens::concat(&parts.iter().collect::<Vec<_>>());
            let ntrain = d.train_tokens as usize;
            domains.push(Domain {
                name: d.name.clone(),
                train: all.range(0, ntrain),
                val: all.range(ntrain, all.len()),
                record: None,
            });
        }
        Ok(Self {
            tokenizer,
            domains,
            dir: dir.to_path_buf(),
        })
    }
}

/// A prepared directory's `tokenizer.json`, with the configured begin/end token names for a
/// pretrained tokenizer file.
fn prepared_tokenizer(path: &Path, cfg: &TokenizerConfig) -> Result<Tokenizer> {
    match cfg {
        TokenizerConfig::File { bos, eot, .. } => Tokenizer::load_named(path, bos, eot),
        _ => Tokenizer::load(path),
    }
}

/// The manifest of a prepared directory.
pub fn read_manifest(dir: &Path) -> Result<Manifest> {
    let p = dir.join("manifest.json");
    let m: Manifest = serde_json::from_str(
        &std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?,
    )
    .with_context(|| format!("{}: not a prepared-corpus manifest", p.display()))?;
    if m.version != MANIFEST_VERSION {
        bail!(
            "{}: manifest version {}, this sinklab reads {MANIFEST_VERSION}; delete the directory \
             to rebuild it",
            p.display(),
            m.version
        );
    }
    Ok(m)
}

/// Stops a document stream early (not an error).
#[derive(Debug)]
struct Stop;
impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stop")
    }
}
impl std::error::Error for Stop {}

fn stopped(r: Result<FileRead>) -> Result<()> {
    match r {
        Err(e) if e.is::<Stop>() => Ok(()),
        other => other.map(|_| ()),
    }
}

fn build(cfg: &DataConfig, plan: &Plan, dir: &Path, log: &mut dyn FnMut(&str)) -> Result<()> {
    let t0 = std::time::Instant::now();
    remove_temporaries(dir)?;
    let tpath = dir.join("tokenizer.json");
    let tokenizer = if tpath.exists() {
        log("data: resuming an interrupted preparation (tokenizer and finished shards kept)");
        prepared_tokenizer(&tpath, &cfg.tokenizer)?
    } else {
        let (t, fed) = make_tokenizer(cfg, plan, log)?;
        log(&format!(
            "data: tokenizer ready in {:.1} s",
            t0.elapsed().as_secs_f64()
        ));
        // the sample's size per domain, for the check below (also after a resume)
        crate::checkpoint::write_atomic(
            &dir.join("tokenizer_sample.json"),
            serde_json::to_string(&fed)?.as_bytes(),
        )?;
        let tmp = dir.join(".tokenizer.json.tmp");
        t.save(&tmp)?;
        std::fs::rename(&tmp, &tpath)?;
        t
    };
    let width = Width::for_vocab(tokenizer.vocab_size());
    let total: u64 = plan
        .domains
        .iter()
        .flat_map(|d| &d.files)
        .map(|f| f.size)
        .sum();
    let bar = crate::progress::bytes_bar(total, "tokenizing");
    let (mut domains, mut resumed_shards) = (Vec::new(), 0);
    for d in &plan.domains {
        std::fs::create_dir_all(dir.join(&d.name))?;
        let mut shards = Vec::new();
        for (i, f) in d.files.iter().enumerate() {
            let file = format!("{}/{i:05}.{}", d.name, width.ext());
            let index = dir.join(format!("{}/{i:05}.json", d.name));
            if let Some(s) = finished_shard(dir, &index, &file, f, width) {
                bar.inc(f.size);
                resumed_shards += 1;
                shards.push(s);
                continue;
            }
            let s = tokenize_file(cfg, d, f, &tokenizer, width, &dir.join(&file), &bar)?;
            let s = Shard { file, ..s };
            for (kind, n) in &s.read.skipped {
                log(&format!("data: {}: skipped {n} × {kind}", s.source));
            }
            crate::checkpoint::write_atomic(&index, serde_json::to_string_pretty(&s)?.as_bytes())?;
            shards.push(s);
        }
        domains.push(domain_manifest(d, shards, cfg.val_fraction));
    }
    bar.finish_and_clear();
    // A tokenizer sample must come from the training split: each domain's sampled bytes
    // within the first (1 − val_fraction) of its text.
    let fed: Vec<u64> = std::fs::read_to_string(dir.join("tokenizer_sample.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let key = match cfg.tokenizer {
        TokenizerConfig::Bpe {
            sample_bytes: Some(s),
            ..
        } => Some(format!("sample_bytes = {s}")),
        TokenizerConfig::Bpe {
            sample_documents: Some(n),
            ..
        } => Some(format!("sample_documents = {n}")),
        _ => None,
    };
    if let Some(key) = key {
        for (d, &took) in domains.iter().zip(&fed) {
            let train_bytes = d.text_bytes as f64 * (1.0 - cfg.val_fraction);
            if took as f64 > train_bytes {
                bail!(
                    "data.tokenizer.{key}: domain {}'s share ({took} bytes of text) reaches past \
                     its training split (≈ {train_bytes:.0} of {} bytes), so the tokenizer would \
                     see validation text; lower the sample",
                    d.name,
                    d.text_bytes
                );
            }
        }
    }
    for d in &domains {
        log(&format!(
            "data: domain {}: {} train / {} val tokens ({}, {})",
            d.name,
            d.train_tokens,
            d.val_tokens,
            crate::progress::count(d.documents, "document", None),
            crate::progress::count(d.shards.len(), "file", None)
        ));
    }
    let manifest = Manifest {
        version: MANIFEST_VERSION,
        corpus: plan.name.clone(),
        tokenizer: cfg.tokenizer.clone(),
        tokenizer_sha256: crate::checkpoint::file_sha256(&tpath)?,
        vocab_size: tokenizer.vocab_size(),
        width,
        val_fraction: cfg.val_fraction,
        bad_input: cfg.bad_input,
        domains,
        seconds: t0.elapsed().as_secs_f64(),
        resumed_shards,
    };
    crate::checkpoint::write_atomic(
        &dir.join("manifest.json"),
        serde_json::to_string_pretty(&manifest)?.as_bytes(),
    )
}

/// Temporary files a killed preparation left (`.NAME.tmpPID`), removed before resuming.
fn remove_temporaries(dir: &Path) -> Result<()> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().to_string();
            if e.file_type()?.is_dir() {
                stack.push(e.path());
            } else if name.starts_with('.') && name.contains(".tmp") {
                std::fs::remove_file(e.path())?;
            }
        }
    }
    Ok(())
}

/// A shard an earlier (interrupted) preparation finished: its index entry names this source
/// with the same size and the shard file holds the recorded number of ids.
fn finished_shard(dir: &Path, index: &Path, file: &str, f: &SourceFile, w: Width) -> Option<Shard> {
    let s: Shard = serde_json::from_str(&std::fs::read_to_string(index).ok()?).ok()?;
    let len = std::fs::metadata(dir.join(file)).ok()?.len();
    (s.file == file
        && s.source == f.name()
        && s.source_bytes == f.size
        && len == s.tokens * w.bytes() as u64)
        .then_some(s)
}

fn domain_manifest(d: &PlanDomain, shards: Vec<Shard>, val_fraction: f64) -> DomainManifest {
    let tokens: u64 = shards.iter().map(|s| s.tokens).sum();
    let val = ((tokens as f64) * val_fraction).ceil() as u64;
    let mut skipped = BTreeMap::new();
    for s in &shards {
        for (k, n) in &s.read.skipped {
            *skipped.entry(k.clone()).or_default() += n;
        }
    }
    DomainManifest {
        name: d.name.clone(),
        tokens,
        train_tokens: tokens - val,
        val_tokens: val,
        documents: shards.iter().map(|s| s.read.documents).sum(),
        text_bytes: shards.iter().map(|s| s.read.text_bytes).sum(),
        skipped,
        shards,
    }
}

/// Tokenize one source file into `shard` (documents read on one thread in batches, each
/// batch tokenized on every core).
fn tokenize_file(
    cfg: &DataConfig,
    d: &PlanDomain,
    f: &SourceFile,
    tokenizer: &Tokenizer,
    width: Width,
    shard: &Path,
    bar: &indicatif::ProgressBar,
) -> Result<Shard> {
    let (tx, rx) = sync_channel::<Vec<String>>(1);
    let mut tokens = 0u64;
    let read = std::thread::scope(|scope| -> Result<FileRead> {
        let reader = scope.spawn(move || {
            let (mut batch, mut bytes) = (Vec::new(), 0usize);
            let r = f.read(&d.text_field, cfg.bad_input, &|n| bar.inc(n), &mut |doc| {
                bytes += doc.len();
                batch.push(doc);
                if bytes >= BATCH_BYTES {
                    bytes = 0;
                    tx.send(std::mem::take(&mut batch))
                        .map_err(|_| anyhow!("tokenizer stopped"))?;
                }
                Ok(())
            });
            if r.is_ok() && !batch.is_empty() {
                tx.send(batch).ok();
            }
            r
        });
        let (mut reader, mut rx) = (Some(reader), Some(rx));
        let mut result = None;
        crate::checkpoint::write_file_atomic(shard, &mut |w| {
            // dropped when this returns, early or not, so that the reader never waits on it
            let rx = rx.take().expect("written once");
            let mut bytes = Vec::new();
            for batch in rx.iter() {
                let ids: Vec<Result<Vec<u32>>> =
                    batch.par_iter().map(|doc| tokenizer.encode(doc)).collect();
                bytes.clear();
                for doc in ids {
                    let doc = doc?;
                    tokens += doc.len() as u64 + 1;
                    for id in doc.into_iter().chain([tokenizer.eot_id]) {
                        width.put(id, &mut bytes);
                    }
                }
                w.write_all(&bytes)?;
            }
            drop(rx);
            let r = reader
                .take()
                .expect("joined once")
                .join()
                .map_err(|_| anyhow!("the reader thread panicked"))?;
            result = Some(r?);
            Ok(())
        })
        .with_context(|| format!("preparing {}", f.name()))?;
        Ok(result.expect("set on success"))
    })?;
    Ok(Shard {
        file: String::new(),
        tokens,
        source: f.name(),
        source_bytes: f.size,
        read,
    })
}

/// How much of a domain's start the BPE trainer reads.
#[derive(Clone, Copy)]
enum Budget {
    Bytes(u64),
    Documents(u64),
}

/// The configured tokenizer; a BPE is trained on a stream of the corpus's documents. Also
/// returns the text bytes each domain fed the trainer (empty when nothing was trained).
fn make_tokenizer(
    cfg: &DataConfig,
    plan: &Plan,
    log: &mut dyn FnMut(&str),
) -> Result<(Tokenizer, Vec<u64>)> {
    let (vocab_size, sample_bytes, sample_documents) = match &cfg.tokenizer {
        TokenizerConfig::Byte {} => return Ok((Tokenizer::byte()?, vec![])),
        TokenizerConfig::File { path, bos, eot } => {
            return Ok((Tokenizer::load_named(path, bos, eot)?, vec![]));
        }
        TokenizerConfig::Bpe {
            vocab_size,
            sample_bytes,
            sample_documents,
        } => (*vocab_size, *sample_bytes, *sample_documents),
    };
    let domains = plan.domains.len() as u64;
    let sample = sample_bytes.is_some() || sample_documents.is_some();
    // What each domain feeds the trainer, from its start.
    let budgets: Vec<Budget> = match (sample_bytes, sample_documents) {
        (Some(s), _) => {
            log(&format!(
                "data: training byte-level BPE, vocab {vocab_size}, on a sample of {s} bytes"
            ));
            vec![Budget::Bytes(s / domains); plan.domains.len()]
        }
        (None, Some(n)) => {
            log(&format!(
                "data: training byte-level BPE, vocab {vocab_size}, on a sample of {n} documents"
            ));
            vec![Budget::Documents((n / domains).max(1)); plan.domains.len()]
        }
        (None, None) => {
            log(&format!(
                "data: training byte-level BPE, vocab {vocab_size}, on the training split"
            ));
            let mut v = Vec::new();
            for d in &plan.domains {
                let mut total = 0u64;
                for f in &d.files {
                    total += f
                        .read(&d.text_field, cfg.bad_input, &|_| {}, &mut |_| Ok(()))?
                        .text_bytes;
                }
                v.push(Budget::Bytes(
                    ((1.0 - cfg.val_fraction) * total as f64) as u64,
                ));
            }
            v
        }
    };
    let (tx, rx) = sync_channel::<String>(256);
    let (tok, fed) = std::thread::scope(|scope| -> Result<(Tokenizer, Vec<u64>)> {
        let feeder = scope.spawn(move || -> Result<Vec<u64>> {
            let mut fed = Vec::new();
            for (d, &budget) in plan.domains.iter().zip(&budgets) {
                let (mut seen, mut docs, mut taken) = (0u64, 0u64, 0u64);
                let full = |seen: u64, docs: u64| match budget {
                    Budget::Bytes(keep) => seen >= keep,
                    Budget::Documents(n) => docs >= n,
                };
                for f in &d.files {
                    if full(seen, docs) {
                        break;
                    }
                    stopped(f.read(&d.text_field, cfg.bad_input, &|_| {}, &mut |doc| {
                        let start = seen;
                        seen += doc.len() as u64;
                        docs += 1;
                        let doc = match budget {
                            Budget::Bytes(keep) if seen > keep => {
                                let mut cut = (keep - start) as usize;
                                while !doc.is_char_boundary(cut) {
                                    cut -= 1;
                                }
                                doc[..cut].to_string()
                            }
                            _ => doc,
                        };
                        taken += doc.len() as u64;
                        tx.send(doc).map_err(|_| anyhow!("trainer stopped"))?;
                        if full(seen, docs) {
                            Err(Stop.into())
                        } else {
                            Ok(())
                        }
                    }))?;
                }
                fed.push(taken);
            }
            Ok(fed)
        });
        let tok = Tokenizer::train_bpe(vocab_size, rx.into_iter());
        let fed = feeder
            .join()
            .map_err(|_| anyhow!("the reader thread panicked"))??;
        Ok((tok?, fed))
    })?;
    if tok.vocab_size() < vocab_size {
        bail!(
            "data.tokenizer.vocab_size = {vocab_size}: the {} yields only {} ids (every pair seen \
             twice is merged); lower the vocabulary to at most {} or use more text",
            if sample {
                "tokenizer sample"
            } else {
                "training split"
            },
            tok.vocab_size(),
            tok.vocab_size()
        );
    }
    Ok((tok, if sample { fed } else { vec![] }))
}
