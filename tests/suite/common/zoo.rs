//! The model-zoo cases of `tests/fixtures/zoo_golden.json` (scripts/reference.py): each
//! variant's configuration and the reference's weights, as a sinklab model.

use burn::tensor::Device;
use serde_json::Value;
use sinklab::checkpoint::HostTensor;
use sinklab::config::{self, Experiment};
use sinklab::model::Lm;
use sinklab::optim;
use std::collections::BTreeMap;

/// A case's weights by parameter name.
pub fn weights(case: &Value) -> BTreeMap<String, HostTensor> {
    case["weights"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), super::fixture::host(v)))
        .collect()
}

/// A complete experiment around a case's model: batch and probe sizes that validate.
pub fn experiment(case: &Value) -> Experiment {
    let name = case["name"].as_str().unwrap();
    let toml = case["model_toml"].as_str().unwrap();
    let table: toml::Table = toml::from_str(toml).unwrap_or_else(|e| panic!("{name}: {e}"));
    let ctx = table["model"]["ctx"].as_integer().unwrap();
    let text = format!(
        "{toml}\n[train]\nbatch_tokens = {}\nmicro_batch = 1\n[metrics]\nprobe_len = {ctx}\nk_max = 2\n",
        ctx
    );
    config::from_str(name, &text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The case's model with the given weights (the reference's, or changed copies of them).
pub fn model_with(
    case: &Value,
    weights: &BTreeMap<String, HostTensor>,
    dev: &Device,
) -> (Lm, Experiment) {
    let name = case["name"].as_str().unwrap();
    let exp = experiment(case);
    let vocab = case["vocab"].as_u64().unwrap() as usize;
    let m = optim::import_params(Lm::new(&exp.model, vocab, 0, dev), weights)
        .unwrap_or_else(|e| panic!("{name}: the reference's parameter set differs: {e}"));
    (m, exp)
}

/// The case's model with the reference's weights.
pub fn model(case: &Value, dev: &Device) -> (Lm, Experiment) {
    model_with(case, &weights(case), dev)
}

/// [`model`] with `model.attention.kernel` set (the fused kernel where it covers the model).
pub fn model_kernel(
    case: &Value,
    kernel: sinklab::config::AttentionKernel,
    dev: &Device,
) -> (Lm, Experiment) {
    let name = case["name"].as_str().unwrap();
    let mut exp = experiment(case);
    exp.model.attention.kernel = kernel;
    let vocab = case["vocab"].as_u64().unwrap() as usize;
    let m = optim::import_params(Lm::new(&exp.model, vocab, 0, dev), &weights(case))
        .unwrap_or_else(|e| panic!("{name}: the reference's parameter set differs: {e}"));
    (m, exp)
}
