//! Sink metrics against the independent NumPy reference
//! (`python3 scripts/reference_metrics.py` → tests/fixtures/metrics_golden.json).

use serde_json::Value;
use sinklab::metrics::{Array, LayerArrays, SinkReport, eps_name};

fn golden() -> Value {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/metrics_golden.json"
    );
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Split an `[L, ...]` array into L arrays.
fn per_layer(v: &Value) -> Vec<Array> {
    let shape: Vec<usize> = v["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect();
    let data: Vec<f32> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    let l = shape[0];
    let n = data.len() / l;
    (0..l)
        .map(|i| Array::new(shape[1..].to_vec(), data[i * n..(i + 1) * n].to_vec()))
        .collect()
}

fn close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 1e-9 + 1e-9 * want.abs(),
        "{what}: got {got}, want {want}"
    );
}

fn list(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[test]
fn every_metric_matches_numpy_on_every_case() {
    let g = golden();
    let eps: Vec<f64> = list(&g["eps"]);
    let cases = g["cases"].as_array().unwrap();
    assert!(cases.len() >= 3);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let attn = per_layer(&case["attn"]);
        let hidden = per_layer(&case["hidden"]);
        let keys = per_layer(&case["keys"]);
        let values = per_layer(&case["values"]);
        let t = attn[0].shape[2];
        let layers: Vec<LayerArrays> = (0..attn.len())
            .map(|l| LayerArrays {
                attn: attn[l].clone(),
                slot_mass: None,
                gate_mean: None,
                keys: keys[l].clone(),
                values: values[l].clone(),
                hidden: hidden[l].clone(),
            })
            .collect();
        let r = SinkReport::compute(&layers, &eps, t.min(10));
        let e = &case["expected"];
        for &ep in &eps {
            let want = list(&e["sink_rate"][eps_name(ep)]);
            let got = &r.sink_rate[&eps_name(ep)];
            assert_eq!(got.len(), want.len(), "{name} eps {ep}");
            for (k, (a, b)) in got.iter().zip(&want).enumerate() {
                close(*a, *b, &format!("{name}: sink_rate eps {ep} k {k}"));
            }
        }
        for (l, heads) in e["importance_first"].as_array().unwrap().iter().enumerate() {
            for (h, w) in list(heads).iter().enumerate() {
                close(
                    r.importance_first[l][h],
                    *w,
                    &format!("{name}: importance_first {l} {h}"),
                );
            }
        }
        for (l, st) in r.hidden.iter().enumerate() {
            close(
                r.entropy[l],
                list(&e["entropy"])[l],
                &format!("{name}: entropy {l}"),
            );
            close(
                st.norm_first,
                list(&e["norm_first"])[l],
                &format!("{name}: norm_first {l}"),
            );
            close(
                st.norm_rest,
                list(&e["norm_rest"])[l],
                &format!("{name}: norm_rest {l}"),
            );
            close(
                st.norm_ratio,
                list(&e["norm_ratio"])[l],
                &format!("{name}: norm_ratio {l}"),
            );
            close(
                st.median_abs,
                list(&e["median_abs"])[l],
                &format!("{name}: median {l}"),
            );
            close(
                st.massive_count,
                list(&e["massive_count"])[l],
                &format!("{name}: massive {l}"),
            );
            let top = list(&e["top3"][l]);
            for (i, (got, want)) in st.top3.iter().zip(&top).enumerate() {
                close(*got, *want, &format!("{name}: top3 {l} {i}"));
            }
            close(
                r.key_norms[l].0,
                list(&e["key_norm_first"])[l],
                &format!("{name}: key first {l}"),
            );
            close(
                r.key_norms[l].1,
                list(&e["key_norm_rest"])[l],
                &format!("{name}: key rest {l}"),
            );
            close(
                r.value_norms[l].0,
                list(&e["value_norm_first"])[l],
                &format!("{name}: value first {l}"),
            );
            close(
                r.value_norms[l].1,
                list(&e["value_norm_rest"])[l],
                &format!("{name}: value rest {l}"),
            );
        }
    }
}
