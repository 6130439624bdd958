//! The one forward's named hook points (`src/model/hooks.rs`) on every model-zoo variant of
//! `tests/fixtures/zoo_golden.json`: hooks that only record change nothing, every site has the
//! documented shape, a walk restarted at any layer from its recorded `resid_pre` reproduces
//! the rest of the whole walk bit for bit, and replacing a site by its own recorded value (or
//! adding zero) is the identity.

use burn::tensor::{Int, Tensor, TensorData};
use sinklab::config::{BlockConfig, FfnConfig, GateConfig};
use sinklab::model::{Edit, HeadSite, HookSet, Site, StreamSite};

use crate::common;
use common::fixture::int_rows;

fn values<const D: usize>(x: Tensor<D>) -> Vec<f32> {
    common::tensor_values(x)
}

#[test]
fn recording_every_site_changes_nothing_and_restarts_reproduce_the_walk() {
    let g = common::golden("zoo_golden.json");
    let cases = g["cases"].as_array().unwrap();
    assert!(cases.len() >= 60, "{} cases", cases.len());
    let dev = common::device();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let (m, exp) = common::zoo::model(case, &dev);
        let mc = &exp.model;
        let (tok, shape) = int_rows(&case["tokens"]);
        let x = Tensor::<2, Int>::from_data(TensorData::new(tok, shape), &dev);
        let want = values(m.forward(x.clone()));
        let n = mc.n_layers;
        let mut all = HookSet::new().record(n, Site::Stream(StreamSite::ResidPre));
        for l in 0..n {
            for s in Site::ALL {
                all = all.record(l, s);
            }
        }
        let got = values(m.forward_hooked(x.clone(), &mut all));
        assert_eq!(got, want, "{name}: a recording hook changed the logits");

        // Shapes (B, H, S, d_h) etc., S = sink tokens + T; C = slot columns + S.
        let (b, t) = (shape[0], shape[1]);
        let s = mc.sink_tokens + t;
        let (h, kv, dh, d) = (mc.n_heads, mc.kv_heads(), mc.d_head(), mc.d_model);
        let slots = mc.attention.slot.slot_columns();
        let head = |l: usize, site: HeadSite| all.heads.get(&(l, site)).map(|x| x.dims());
        let stream = |l: usize, site: StreamSite| all.streams.get(&(l, site)).map(|x| x.dims());
        let parallel = matches!(
            mc.block,
            BlockConfig::Parallel { .. } | BlockConfig::SasP { .. }
        );
        let has_mlp = mc.ffn != (FfnConfig::None {});
        for l in 0..n {
            assert_eq!(head(l, HeadSite::Q), Some([b, h, s, dh]), "{name} q");
            assert_eq!(head(l, HeadSite::K), Some([b, kv, s, dh]), "{name} k");
            assert_eq!(head(l, HeadSite::V), Some([b, kv, s, dh]), "{name} v");
            assert_eq!(
                head(l, HeadSite::Pattern),
                Some([b, h, s, slots + s]),
                "{name}"
            );
            assert_eq!(head(l, HeadSite::Z), Some([b, h, s, dh]), "{name} z");
            let gate = match mc.attention.gate {
                GateConfig::None {} => None,
                GateConfig::Headwise {}
                | GateConfig::PerToken { .. }
                | GateConfig::Sparse { .. } => Some([b, h, s, 1]),
                GateConfig::Elementwise {} => Some([b, h, s, dh]),
            };
            assert_eq!(head(l, HeadSite::Gate), gate, "{name} gate");
            for site in [
                StreamSite::ResidPre,
                StreamSite::AttnOut,
                StreamSite::ResidPost,
            ] {
                assert_eq!(stream(l, site), Some([b, s, d]), "{name} {site:?}");
            }
            let mid = (!parallel).then_some([b, s, d]);
            assert_eq!(stream(l, StreamSite::ResidMid), mid, "{name} resid_mid");
            let mlp = has_mlp.then_some([b, s, d]);
            assert_eq!(stream(l, StreamSite::MlpOut), mlp, "{name} mlp_out");
        }
        // The pattern hook is the probe's attention.
        let (_, probes) = m.forward_probe(x.clone());
        for (l, p) in probes.into_iter().enumerate() {
            assert_eq!(
                values(p.attn.unwrap()),
                values(all.heads[&(l, HeadSite::Pattern)].clone()),
                "{name}: layer {l} pattern"
            );
        }

        // A walk restarted at layer l from the recorded resid_pre ends where the whole walk
        // ended, bit for bit.
        let last = values(all.streams[&(n, StreamSite::ResidPre)].clone());
        let (_, ctx) = m.embed(x.clone());
        for l in 0..n {
            let h0 = all.streams[&(l, StreamSite::ResidPre)].clone();
            let end = m.walk(h0, &ctx, l..n, None, None);
            assert_eq!(values(end), last, "{name}: restart at layer {l}");
        }

        // Replacing z by its recorded value at every layer, and adding zero to every
        // resid_pre, is the identity.
        let mut same = HookSet::new();
        for l in 0..n {
            let z = all.heads[&(l, HeadSite::Z)].clone();
            same = same
                .edit_heads(
                    l,
                    HeadSite::Z,
                    Edit::Replace {
                        value: z,
                        mask: None,
                    },
                )
                .edit_stream(
                    l,
                    StreamSite::ResidPre,
                    Edit::Add(Tensor::zeros([1, 1, d], &dev)),
                );
        }
        let got = values(m.forward_hooked(x.clone(), &mut same));
        assert_eq!(got, want, "{name}: replacing z by itself");

        // Replacing layer 0's z by zeros does change the logits (the hook is applied).
        let zero = HookSet::new().edit_heads(
            0,
            HeadSite::Z,
            Edit::Replace {
                value: Tensor::zeros([1, 1, 1, 1], &dev),
                mask: None,
            },
        );
        let mut zero = zero;
        let changed = values(m.forward_hooked(x, &mut zero));
        let diff = changed
            .iter()
            .zip(&want)
            .fold(0f32, |a, (p, q)| a.max((p - q).abs()));
        assert!(diff > 1e-6, "{name}: zeroing layer 0's z changed nothing");
    }
}
