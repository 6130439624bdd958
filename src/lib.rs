//! sinklab: a Burn-based training framework for studying attention sinks and skipless
//! transformers. README.md gives the tour, docs/ the user guide, CONTRIBUTING.md the layout;
//! docs/reference.md the formulas, definitions and published numbers the code follows.
//!
//! Layers, from the bottom (the order `tests/suite/layout.rs` checks): pure maths and formats
//! (`spa`, `lock`, `rundir`, `checkpoint`, `tensorboard`, `plot`, `tokenizer`, `progress`,
//! `parallel`, `tags`), the schema (`config`), sink metrics (`metrics`) and head scores (`heads`), devices
//! and data (`backend`, `memory`, `data`),
//! optimisation (`optim`), the model (`model`), band maths (`dark`), evaluation and probes
//! (`eval`), interventions (`intervene`), decoding (`generate`), the run directory (`recorder`, `run`), MPI ranks
//! (`dist`), the training loop (`train`), pretrained checkpoints in and out (`interop`), analyses (`analysis`), sweeps
//! (`sweep`, `report`), benchmarks (`bench`) and the command line (`commands`). A module only
//! uses modules below it.

pub mod analysis;
pub mod backend;
pub mod bench;
pub mod checkpoint;
pub mod commands;
pub mod config;
pub mod dark;
pub mod data;
pub mod dist;
pub mod eval;
pub mod generate;
pub mod heads;
pub mod interop;
pub mod intervene;
pub mod kernels;
pub mod lock;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod optim;
pub mod parallel;
pub mod plot;
pub mod progress;
pub mod recorder;
pub mod report;
pub mod run;
pub mod rundir;
pub mod spa;
pub mod sweep;
pub mod tags;
pub mod tensorboard;
pub mod tokenizer;
pub mod train;
