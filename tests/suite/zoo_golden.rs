//! Every model-zoo variant against the independent NumPy reference
//! (`~/.cache/sinklab-venv/bin/python scripts/reference.py` → tests/fixtures/zoo_golden.json):
//! logits, loss, the probe path's attention weights (slot columns included) and the gradient of
//! every trainable parameter (central finite differences of the float64 reference).

use burn::tensor::{Device, Int, Tensor, TensorData};
use serde_json::Value;
use sinklab::config::AttentionKernel;
use sinklab::model::{Lm, masked_nll};
use sinklab::optim::GradAccumulator;
use std::collections::BTreeSet;

use crate::common;
use common::fixture::{assert_close as check, float_rows, floats, int_rows as ints, shape};

fn golden() -> Value {
    common::golden("zoo_golden.json")
}

fn model(case: &Value, dev: &Device) -> (Lm, sinklab::config::Experiment) {
    common::zoo::model(case, dev)
}

#[test]
fn every_variant_matches_the_numpy_reference() {
    let g = golden();
    let cases = g["cases"].as_array().unwrap();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let dev = common::device();
    let ad = dev.clone().autodiff();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let (tok, tshape) = ints(&case["tokens"]);
        let (tgt, _) = ints(&case["targets"]);
        let mask = float_rows(&case["mask"]);
        let denom: f64 = mask.iter().map(|&x| x as f64).sum();

        // Forward, loss and gradients on the autodiff device, by the explicit path and by the
        // fused attention kernel (where it covers the variant; the explicit path otherwise).
        for kernel in [AttentionKernel::Manual, AttentionKernel::Fused] {
            let name = &format!("{name} ({kernel:?})");
            let (m, _) = common::zoo::model_kernel(case, kernel, &ad);
            let x = Tensor::<2, Int>::from_data(TensorData::new(tok.clone(), tshape), &ad);
            let y = Tensor::<2, Int>::from_data(TensorData::new(tgt.clone(), tshape), &ad);
            let mk = Tensor::<2>::from_data(TensorData::new(mask.clone(), tshape), &ad);
            let logits = m.forward(x);
            let got = logits.clone().into_data().try_to_vec::<f32>().unwrap();
            check(
                &got,
                &floats(&case["logits"]),
                1e-4,
                1e-4,
                &format!("{name}: logits"),
            );
            let loss = masked_nll(logits, y, mk, denom);
            let l = loss.clone().into_scalar::<f32>() as f64;
            let want = case["loss"].as_f64().unwrap();
            assert!(
                (l - want).abs() <= 1e-5 * want.abs() + 1e-6,
                "{name}: loss {l} vs {want}"
            );
            let mut acc = GradAccumulator::default();
            acc.add(&m, &loss.backward());
            let trainable: BTreeSet<String> = case["trainable"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap().to_string())
                .collect();
            let ours: BTreeSet<String> = acc.grads.keys().cloned().collect();
            assert_eq!(ours, trainable, "{name}: parameters with gradients");
            for (k, gt) in &acc.grads {
                let want = floats(&case["grads"][k]);
                let scale = want.iter().fold(0f64, |m, x| m.max(x.abs()));
                let got = gt.to_data().try_to_vec::<f32>().unwrap();
                check(
                    &got,
                    &want,
                    2e-3,
                    1e-3 * scale + 1e-6,
                    &format!("{name}: d loss / d {k}"),
                );
            }
        }

        // The probe path's attention weights of one layer, slot columns included.
        let (m, _) = model(case, &dev);
        let x = Tensor::<2, Int>::from_data(TensorData::new(tok, tshape), &dev);
        let (_, layers) = m.forward_probe(x);
        let layer = case["probe"]["layer"].as_u64().unwrap() as usize;
        let a = layers[layer].attn.clone().unwrap();
        assert_eq!(
            a.dims().to_vec(),
            shape(&case["probe"]["attn"]),
            "{name}: probe shape"
        );
        check(
            &a.into_data().try_to_vec::<f32>().unwrap(),
            &floats(&case["probe"]["attn"]),
            1e-4,
            1e-5,
            &format!("{name}: probe attention"),
        );
    }
}
