//! sinklab: a Burn-based training framework for studying attention sinks and skipless
//! transformers. See README.md for the tour and `../shared/REFERENCE.md` for the formulas.
//!
//! Layout: `config` (strict experiment schema), `data` (corpora, tokenization, sampler),
//! `tokenizer`, `model` (the LM, attention by hand), `optim` (AdamW, schedules, clipping),
//! `metrics` (pure sink-metric maths), `signal` (U-SPA / E-SPA
//! construction, token-kernel statistics), `train` (the loop), `checkpoint` (atomic files,
//! safetensors), `tensorboard` (event-file writer), `backend` (devices, provenance), `bench`.

pub mod analyze;
pub mod attention;
pub mod backend;
pub mod bench;
pub mod checkpoint;
pub mod config;
pub mod dark;
pub mod data;
pub mod generate;
pub mod metrics;
pub mod model;
pub mod optim;
pub mod parallel;
pub mod plot;
pub mod report;
pub mod signal;
pub mod sweep;
pub mod tensorboard;
pub mod tokenizer;
pub mod train;
