//! Evaluation and probing, shared by training and the analysis commands: device tensors of a
//! batch, the masked validation loss (optionally under a residual-stream filter), and the probe
//! pass that copies every layer's attention, keys, values and hidden states to the host for
//! the pure metric maths of [`crate::metrics`]; [`heads`] the head scores' probe pass.

pub mod heads;
mod restart;

pub use restart::RestartAt;

use crate::config::Experiment;
use crate::data::Batch;
use crate::metrics::{Array, LayerArrays, LayerSummary, Proxy, SinkReport, split_attention};
use crate::model::{self, Lm};
use crate::parallel::Workers;
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

/// The most logits (B × T × V elements, 16 MiB in f32) an evaluation forms at once; a larger
/// block is split by positions ([`Lm::nll`]).
pub const MAX_EVAL_LOGITS: usize = 1 << 22;

/// [`eval_loss`] with a residual-stream filter applied (dark-signal experiments).
pub fn eval_loss_filtered(
    model: &Lm,
    batch: &Batch,
    chunk: usize,
    device: &Device,
    filter: Option<&model::StreamFilter>,
) -> f64 {
    eval_loss_with(model, batch, chunk, device, filter, &mut |_| {})
}

/// [`eval_loss_filtered`] calling `done(k)` after every chunk of k sequences (progress).
pub fn eval_loss_with(
    model: &Lm,
    batch: &Batch,
    chunk: usize,
    device: &Device,
    filter: Option<&model::StreamFilter>,
    done: &mut dyn FnMut(usize),
) -> f64 {
    let model = model.valid();
    let denom: f64 = batch.loss_mask.iter().map(|&m| m as f64).sum();
    let workers = inference_workers(device, batch.batch);
    // Chunks of at most `chunk` sequences, at least one per worker; each wave of chunks runs
    // on the workers concurrently and adds to the total in chunk order.
    let chunk = chunk.min(batch.batch.div_ceil(workers.len())).max(1);
    let ranges: Vec<(usize, usize)> = (0..batch.batch)
        .step_by(chunk)
        .map(|from| (from, (from + chunk).min(batch.batch)))
        .collect();
    let mut total = 0.0;
    for wave in ranges.chunks(workers.len()) {
        let parts = workers.map(wave.len(), |i| {
            let (from, to) = wave[i];
            let (x, y, m) = batch_tensors(&slice_batch(batch, from, to), device);
            model.nll(x, y, m, denom, filter, MAX_EVAL_LOGITS)
        });
        for (nll, &(from, to)) in parts.into_iter().zip(wave) {
            total += nll;
            done(to - from);
        }
    }
    total
}

/// Workers for `jobs` independent inference jobs (chunks of sequences) on `device`: one
/// single-threaded worker per core on the CPU, as for training (each worker runs every op of its
/// chunk without the threads meeting at each op, which measured faster than splitting each op
/// over both cores: experiments/results/bench/README.md, "*Inference on one worker per core*"); a
/// single worker elsewhere. A chunk's result does not depend on the number of workers.
pub fn inference_workers(device: &Device, jobs: usize) -> Workers {
    Workers::for_device(crate::backend::is_cpu(&device.clone().inner()), jobs)
}

/// Run the probe set through the probe path and compute every sink metric.
pub fn probe_metrics(
    model: &Lm,
    probe: &Batch,
    chunk: usize,
    exp: &Experiment,
    device: &Device,
) -> SinkReport {
    probe_metrics_with(model, probe, chunk, exp, device, &mut |_| {})
}

/// [`probe_metrics`] calling `layer_done(l)` once block `l` has been probed (progress).
pub fn probe_metrics_with(
    model: &Lm,
    probe: &Batch,
    chunk: usize,
    exp: &Experiment,
    device: &Device,
    layer_done: &mut dyn FnMut(usize),
) -> SinkReport {
    let proxy = Proxy::for_normaliser(&exp.model.attention.normaliser);
    let groups = crate::data::query_groups(&exp.data, &probe.inputs);
    let groups = groups.as_ref().map(|(g, n)| (g.as_slice(), *n));
    let spec = ProbeSpec::new(probe, chunk, proxy, device);
    let layers = summaries(model, spec, groups, layer_done);
    SinkReport::from_summaries(&layers, &exp.metrics.eps, exp.metrics.k_max)
}

/// How a probe pass runs, the one argument of the probe chain ([`summaries`],
/// [`probe_report`], [`probe_layers`], [`probe_each`]): the batch in chunks of `chunk`
/// sequences on `device`, attention read through `proxy`, an optional residual-stream filter,
/// and what it records beyond what the sink metrics read.
#[derive(Clone, Copy)]
pub struct ProbeSpec<'a> {
    pub batch: &'a Batch,
    pub chunk: usize,
    pub proxy: Proxy,
    pub device: &'a Device,
    pub filter: Option<&'a model::StreamFilter>,
    pub record: Record,
}

impl<'a> ProbeSpec<'a> {
    /// No filter; the sink metrics' records only.
    pub fn new(batch: &'a Batch, chunk: usize, proxy: Proxy, device: &'a Device) -> Self {
        Self {
            batch,
            chunk,
            proxy,
            device,
            filter: None,
            record: Record::default(),
        }
    }

    /// With the residual-stream filter `filter`.
    pub fn filtered(self, filter: Option<&'a model::StreamFilter>) -> Self {
        Self { filter, ..self }
    }

    /// Recording the queries too (`LayerArrays::queries`).
    pub fn with_queries(self, queries: bool) -> Self {
        Self {
            record: Record {
                queries,
                ..self.record
            },
            ..self
        }
    }
}

/// Every layer's [`LayerSummary`] of a probe batch ([`probe_each`]), calling `layer_done(l)`
/// once block `l` has been reduced.
pub fn summaries(
    model: &Lm,
    spec: ProbeSpec,
    groups: Option<(&[usize], usize)>,
    layer_done: &mut dyn FnMut(usize),
) -> Vec<LayerSummary> {
    let mut layers = Vec::new();
    probe_each(model, spec, &mut |l, _, la| {
        layers.push(LayerSummary::of(&la, groups));
        layer_done(l);
    });
    layers
}

/// The sink report of a probe batch, reduced layer by layer ([`probe_each`]): peak memory is
/// one layer's probe tensors, not the model's.
pub fn probe_report(
    model: &Lm,
    spec: ProbeSpec,
    (eps, k_max): (&[f64], usize),
    groups: Option<(&[usize], usize)>,
) -> SinkReport {
    let layers = summaries(model, spec, groups, &mut |_| {});
    SinkReport::from_summaries(&layers, eps, k_max)
}

/// Host copies of every layer's probe tensors for a batch (attention through `spec.proxy`,
/// split into real-token attention and slot mass). Holds every layer at once: for small models
/// and tests; the analysis commands stream with [`probe_each`].
pub fn probe_layers(model: &Lm, spec: ProbeSpec) -> Vec<LayerArrays> {
    let mut out = Vec::new();
    probe_each(model, spec, &mut |_, _, la| out.push(la));
    out
}

/// The probe pass one layer at a time: `f(l, input, arrays)` gets block `l`'s real-token input
/// (B, T, d) and the host copies of its probe tensors for the whole batch (sequences in
/// chunks of `spec.chunk`), for l = 0, 1, … in order, before block `l + 1` runs
/// ([`Lm::probe_by_layer`]). Slot mass is `None` unless the model has slots or sink tokens (or
/// the normaliser has an implicit slot).
pub fn probe_each(model: &Lm, spec: ProbeSpec, f: &mut dyn FnMut(usize, Array, LayerArrays)) {
    probe_pass(model, spec, &mut |l, x, a, _| f(l, x, a));
}

/// What the probe pass records beyond what the sink metrics read.
#[derive(Debug, Clone, Copy, Default)]
pub struct Record {
    pub queries: bool,
    /// Each head's mixed value z (B, H, T, d_h), the head scores' AHON.
    pub z: bool,
}

/// [`probe_each`] that also hands over z (B, H, T, d_h) when `spec.record.z`.
pub(crate) fn probe_pass(
    model: &Lm,
    spec: ProbeSpec,
    f: &mut dyn FnMut(usize, Array, LayerArrays, Option<Array>),
) {
    let model = model.valid();
    let streams = probe_chunks(spec.batch, spec.chunk, spec.device)
        .into_iter()
        .map(|x| model.embed(x))
        .collect();
    probe_pass_from(&model, streams, 0, spec.proxy, spec.filter, spec.record, f)
}

/// A probe batch's token ids in chunks of `chunk` sequences.
fn probe_chunks(probe: &Batch, chunk: usize, device: &Device) -> Vec<Tensor<2, Int>> {
    let chunk = chunk.max(1);
    (0..probe.batch)
        .step_by(chunk)
        .map(|from| {
            let to = (from + chunk).min(probe.batch);
            batch_tensors(&slice_batch(probe, from, to), device).0
        })
        .collect()
}

/// [`probe_pass`] from the chunks' streams entering block `from` ([`Lm::stream_at`] of the
/// model in inference mode): `f` sees layers `from..L` only.
pub(crate) fn probe_pass_from(
    model: &Lm,
    streams: Vec<(Tensor<3>, model::Ctx)>,
    from: usize,
    proxy: Proxy,
    filter: Option<&model::StreamFilter>,
    record: Record,
    f: &mut dyn FnMut(usize, Array, LayerArrays, Option<Array>),
) {
    let queries = record.queries;
    let last = streams.len().saturating_sub(1);
    // One layer's host arrays, grown chunk by chunk (each chunk's device tensors are dropped
    // as soon as they are copied).
    #[derive(Default)]
    struct Acc {
        attn: Stack,
        mass: Stack,
        queries: Stack,
        keys: Stack,
        values: Stack,
        hidden: Stack,
        attn_out: Stack,
        input: Stack,
        z: Stack,
        has_slots: bool,
        gate: (f64, usize),
    }
    let mut acc = Acc::default();
    model.probe_by_layer_from(streams, from, filter, record.z, &mut |l, c, input, p| {
        let w = to_array(p.attn.expect("the probe path records attention weights"));
        acc.has_slots |= proxy == Proxy::ImplicitSlot || p.slot_cols + p.sink_tokens > 0;
        let (a, m) = split_attention(&w, p.slot_cols, p.sink_tokens, proxy);
        drop(w);
        acc.attn.push(a);
        acc.mass.push(m);
        if queries {
            acc.queries.push(to_array(p.queries.expect("queries")));
        }
        if let Some(z) = p.z {
            acc.z.push(to_array(z));
        }
        acc.keys.push(to_array(p.keys.expect("keys")));
        acc.values.push(to_array(p.values.expect("values")));
        acc.hidden.push(to_array(p.hidden.expect("hidden")));
        acc.attn_out.push(to_array(p.attn_out.expect("attn_out")));
        acc.input.push(to_array(input));
        if let Some(g) = p.gate {
            let g = to_array(g);
            acc.gate.0 += g.data.iter().map(|&x| x as f64).sum::<f64>();
            acc.gate.1 += g.data.len();
        }
        if c == last {
            let a = std::mem::take(&mut acc);
            let arrays = LayerArrays {
                attn: a.attn.array(),
                slot_mass: a.has_slots.then(|| a.mass.array()),
                queries: queries.then(|| a.queries.array()),
                keys: a.keys.array(),
                values: a.values.array(),
                hidden: a.hidden.array(),
                attn_out: a.attn_out.array(),
                gate_mean: (a.gate.1 > 0).then(|| a.gate.0 / a.gate.1 as f64),
            };
            let z = record.z.then(|| a.z.array());
            f(l, a.input.array(), arrays, z);
        }
    });
}

/// Arrays stacked along their first axis as they arrive.
#[derive(Default)]
struct Stack {
    shape: Vec<usize>,
    data: Vec<f32>,
}

impl Stack {
    fn push(&mut self, a: Array) {
        if self.shape.is_empty() {
            self.shape = a.shape;
            self.data = a.data;
        } else {
            self.shape[0] += a.shape[0];
            self.data.extend_from_slice(&a.data);
        }
    }

    fn array(self) -> Array {
        Array::new(self.shape, self.data)
    }
}

/// A weight matrix's values on the host as f64, row-major.
pub fn host_f64(t: Tensor<2>) -> Vec<f64> {
    t.into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .expect("f32")
        .into_iter()
        .map(f64::from)
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
        .map(|l| {
            let mut s = Stack::default();
            parts.iter().for_each(|p| s.push(p[l].clone()));
            s.array()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DeviceKind;

    /// The masked validation loss of 5 sequences is the same on one worker or two and in any
    /// chunking, and equals the masked mean of −log softmax(logits)[target] computed in f64 on
    /// the host from one forward of the whole batch.
    #[test]
    fn eval_loss_does_not_depend_on_workers_or_chunks() {
        let dev = crate::backend::device(DeviceKind::Flex).unwrap();
        let cfg = crate::model::tests::tiny_cfg(); // d 16, 2 layers, ctx 8
        let (vocab, b, t) = (11, 5, 8);
        let model = Lm::new(&cfg, vocab, 3, &dev);
        let id = |i: usize, salt: usize| ((i * 7 + salt * 3 + i / 5) % vocab) as u32;
        let batch = Batch {
            batch: b,
            len: t,
            inputs: (0..b * t).map(|i| id(i, 1)).collect(),
            targets: (0..b * t).map(|i| id(i, 4)).collect(),
            loss_mask: (0..b * t)
                .map(|i| if i % 3 == 0 { 0.0 } else { 1.0 })
                .collect(),
            domains: vec![0; b],
        };
        // reference: logits (B, T, V) of the whole batch, the loss on the host in f64
        let (x, _, _) = batch_tensors(&batch, &dev);
        let logits: Vec<f32> = model.valid().forward(x).into_data().try_into_vec().unwrap();
        let (mut sum, mut denom) = (0.0f64, 0.0f64);
        for (i, row) in logits.chunks(vocab).enumerate() {
            let m = row.iter().fold(f64::MIN, |a, &z| a.max(z as f64));
            let lse = m + row.iter().map(|&z| (z as f64 - m).exp()).sum::<f64>().ln();
            let w = batch.loss_mask[i] as f64;
            sum += w * (lse - row[batch.targets[i] as usize] as f64);
            denom += w;
        }
        let want = sum / denom;
        assert!(
            (1.5..3.5).contains(&want),
            "{want}: near ln 11 at initialisation"
        );
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                assert_eq!(inference_workers(&dev, b).len(), threads);
                for chunk in [1, 2, 5] {
                    let got = eval_loss(&model, &batch, chunk, &dev);
                    assert!(
                        (got - want).abs() <= 1e-6 * want,
                        "{threads} thread(s), chunks of {chunk}: {got} vs {want}"
                    );
                }
            });
        }
    }
}
