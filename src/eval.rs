//! Evaluation and probing, shared by training and the analysis commands: device tensors of a
//! batch, the masked validation loss (optionally under a residual-stream filter), and the probe
//! pass that copies every layer's attention, keys, values and hidden states to the host for
//! the pure metric maths of [`crate::metrics`].

use crate::config::Experiment;
use crate::data::Batch;
use crate::metrics::{Array, LayerArrays, Proxy, SinkReport, split_attention};
use crate::model::{self, Lm};
use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};

/// Token ids and loss mask of a batch as device tensors.
pub fn batch_tensors(b: &Batch, device: &Device) -> (Tensor<2, Int>, Tensor<2, Int>, Tensor<2>) {
    let shape = [b.batch, b.len];
    let x: Vec<i64> = b.inputs.iter().map(|&t| t as i64).collect();
    let y: Vec<i64> = b.targets.iter().map(|&t| t as i64).collect();
    (
        Tensor::from_data(TensorData::new(x, shape), device),
        Tensor::from_data(TensorData::new(y, shape), device),
        Tensor::from_data(TensorData::new(b.loss_mask.clone(), shape), device),
    )
}

/// Sequences `from..to` of a batch.
pub fn slice_batch(b: &Batch, from: usize, to: usize) -> Batch {
    let l = b.len;
    Batch {
        batch: to - from,
        len: l,
        inputs: b.inputs[from * l..to * l].to_vec(),
        targets: b.targets[from * l..to * l].to_vec(),
        loss_mask: b.loss_mask[from * l..to * l].to_vec(),
        domains: b.domains[from..to].to_vec(),
    }
}

/// Mean next-token loss of a fixed batch, without gradients, in chunks of `chunk` sequences.
pub fn eval_loss(model: &Lm, batch: &Batch, chunk: usize, device: &Device) -> f64 {
    eval_loss_filtered(model, batch, chunk, device, None)
}

/// [`eval_loss`] with a residual-stream filter applied (dark-signal experiments).
pub fn eval_loss_filtered(
    model: &Lm,
    batch: &Batch,
    chunk: usize,
    device: &Device,
    filter: Option<&model::StreamFilter>,
) -> f64 {
    let model = model.valid();
    let denom: f64 = batch.loss_mask.iter().map(|&m| m as f64).sum();
    let mut total = 0.0;
    let mut from = 0;
    while from < batch.batch {
        let to = (from + chunk).min(batch.batch);
        let (x, y, m) = batch_tensors(&slice_batch(batch, from, to), device);
        let logits = match filter {
            Some(f) => model.forward_filtered(x, f),
            None => model.forward(x),
        };
        let loss = model::masked_nll(logits, y, m, denom);
        total += loss.into_scalar::<f32>() as f64;
        from = to;
    }
    total
}

fn concat_arrays(parts: Vec<Array>) -> Array {
    let mut shape = parts[0].shape.clone();
    shape[0] = parts.iter().map(|p| p.shape[0]).sum();
    let data = parts.into_iter().flat_map(|p| p.data).collect();
    Array::new(shape, data)
}

/// Run the probe set through the probe path and compute every sink metric.
pub fn probe_metrics(
    model: &Lm,
    probe: &Batch,
    chunk: usize,
    exp: &Experiment,
    device: &Device,
) -> SinkReport {
    let proxy = Proxy::for_normaliser(&exp.model.attention.normaliser);
    let layers = probe_layers(model, probe, chunk, proxy, device, None, false);
    let groups = crate::data::query_groups(&exp.data, &probe.inputs);
    let groups = groups.as_ref().map(|(g, n)| (g.as_slice(), *n));
    SinkReport::compute_split(&layers, &exp.metrics.eps, exp.metrics.k_max, groups)
}

/// Host copies of every layer's probe tensors for a batch (attention through `proxy`, split
/// into real-token attention and slot mass), with an optional residual-stream filter; queries
/// only when `queries` is set.
pub fn probe_layers(
    model: &Lm,
    probe: &Batch,
    chunk: usize,
    proxy: Proxy,
    device: &Device,
    filter: Option<&model::StreamFilter>,
    queries: bool,
) -> Vec<LayerArrays> {
    let model = model.valid();
    let n_layers = model.blocks.len();
    #[derive(Default)]
    struct Acc {
        attn: Vec<Array>,
        mass: Vec<Array>,
        queries: Vec<Array>,
        keys: Vec<Array>,
        values: Vec<Array>,
        hidden: Vec<Array>,
        gate: (f64, usize),
    }
    let mut per_layer: Vec<Acc> = (0..n_layers).map(|_| Acc::default()).collect();
    let mut has_slots = proxy == Proxy::ImplicitSlot;
    let mut from = 0;
    while from < probe.batch {
        let to = (from + chunk).min(probe.batch);
        let (x, _, _) = batch_tensors(&slice_batch(probe, from, to), device);
        let (_, layers) = model.forward_probe_filtered(x, filter);
        for (acc, p) in per_layer.iter_mut().zip(layers) {
            let w = to_array(p.attn.expect("the probe path records attention weights"));
            has_slots |= p.slot_cols + p.sink_tokens > 0;
            let (attn, mass) = split_attention(&w, p.slot_cols, p.sink_tokens, proxy);
            acc.attn.push(attn);
            acc.mass.push(mass);
            if queries {
                acc.queries.push(to_array(p.queries.expect("queries")));
            }
            acc.keys.push(to_array(p.keys.expect("keys")));
            acc.values.push(to_array(p.values.expect("values")));
            acc.hidden.push(to_array(p.hidden.expect("hidden")));
            if let Some(g) = p.gate {
                let g = to_array(g);
                acc.gate.0 += g.data.iter().map(|&x| x as f64).sum::<f64>();
                acc.gate.1 += g.data.len();
            }
        }
        from = to;
    }
    per_layer
        .into_iter()
        .map(|acc| LayerArrays {
            attn: concat_arrays(acc.attn),
            slot_mass: has_slots.then(|| concat_arrays(acc.mass)),
            queries: queries.then(|| concat_arrays(acc.queries)),
            keys: concat_arrays(acc.keys),
            values: concat_arrays(acc.values),
            hidden: concat_arrays(acc.hidden),
            gate_mean: (acc.gate.1 > 0).then(|| acc.gate.0 / acc.gate.1 as f64),
        })
        .collect()
}

/// A device tensor's host copy.
pub fn to_array<const D: usize>(t: Tensor<D>) -> Array {
    let shape = t.dims().to_vec();
    Array::new(
        shape,
        t.into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .expect("f32"),
    )
}

/// The real-token representations entering block 0 and leaving every block (L + 1 arrays
/// (B, T, d)) for a batch, in chunks of `chunk` sequences.
pub fn hidden_inputs(model: &Lm, batch: &Batch, chunk: usize, device: &Device) -> Vec<Array> {
    let model = model.valid();
    let mut parts: Vec<Vec<Array>> = Vec::new();
    let mut from = 0;
    while from < batch.batch {
        let to = (from + chunk).min(batch.batch);
        let (x, _, _) = batch_tensors(&slice_batch(batch, from, to), device);
        parts.push(model.hidden_states(x).into_iter().map(to_array).collect());
        from = to;
    }
    (0..parts[0].len())
        .map(|l| concat_arrays(parts.iter().map(|p| p[l].clone()).collect()))
        .collect()
}
