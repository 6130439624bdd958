//! sinklab's integration tests, one binary (one link of Burn instead of one per file). Each
//! module is one area; `common` holds the shared helpers.

mod common;

mod analysis;
mod cli;
mod data_prepare;
mod decoding;
mod docs_commands;
mod eval_cli;
mod gpt2_reference;
mod heads;
mod hooks;
mod interop;
mod interventions;
mod layout;
mod memory;
mod metrics_golden;
mod model_golden;
mod mpi;
mod one_writer;
mod precision;
mod reliability;
mod reproductions;
mod results_provenance;
mod skipless;
mod slurm;
mod sweep;
mod synthetic;
mod tensorboard_roundtrip;
mod tokenizer_python;
mod train_e2e;
mod zoo_golden;
mod zoo_identities;
mod zoo_remedies;
mod zoo_train;
