//! Sink metrics against the independent NumPy reference
//! (`python3 scripts/reference_metrics.py` → tests/fixtures/metrics_golden.json).

use crate::common;
use serde_json::Value;
use sinklab::metrics::{Array, LayerArrays, Proxy, SinkReport, eps_name, split_attention};

fn golden() -> Value {
    common::golden("metrics_golden.json")
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

/// Relative and absolute tolerance of the current case: 1e-9 where the inputs are the
/// fixture's float32 values, 2e-6 where sinklab first splits raw weights into float32 arrays.
static TOL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn close(got: f64, want: f64, what: &str) {
    let tol = f64::from_bits(TOL.load(std::sync::atomic::Ordering::Relaxed));
    assert!(
        (got - want).abs() <= tol + tol * want.abs(),
        "{what}: got {got}, want {want}"
    );
}

fn set_tol(t: f64) {
    TOL.store(t.to_bits(), std::sync::atomic::Ordering::Relaxed);
}

fn proxy(name: &str) -> Proxy {
    match name {
        "weights" => Proxy::Weights,
        "implicit_slot" => Proxy::ImplicitSlot,
        "non_negative" => Proxy::NonNegative,
        "signed" => Proxy::Signed,
        other => panic!("unknown proxy {other}"),
    }
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
    assert!(cases.len() >= 9);
    let raw = cases.iter().filter(|c| c.get("raw_attn").is_some()).count();
    assert!(raw >= 5, "slot-aware cases: {raw}");
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let e = &case["expected"];
        // Raw weights with slot and sink-token columns are split first (docs/reference.md §4 proxies).
        let (attn, slot_mass) = if case.get("raw_attn").is_some() {
            set_tol(2e-6);
            let slot_cols = case["slot_cols"].as_u64().unwrap() as usize;
            let sinks = case["sink_tokens"].as_u64().unwrap() as usize;
            let p = proxy(case["proxy"].as_str().unwrap());
            let (a, m): (Vec<Array>, Vec<Array>) = per_layer(&case["raw_attn"])
                .iter()
                .map(|w| split_attention(w, slot_cols, sinks, p))
                .unzip();
            for (l, (a, m)) in a.iter().zip(&m).enumerate() {
                let wa = &per_layer(&e["split_attn"])[l];
                let wm = &per_layer(&e["slot_mass"])[l];
                assert_eq!(a.shape, wa.shape, "{name}: split shape");
                assert_eq!(m.shape, wm.shape, "{name}: slot mass shape");
                for (i, (x, y)) in a.data.iter().zip(&wa.data).enumerate() {
                    close(
                        *x as f64,
                        *y as f64,
                        &format!("{name}: split_attn {l} [{i}]"),
                    );
                }
                for (i, (x, y)) in m.data.iter().zip(&wm.data).enumerate() {
                    close(
                        *x as f64,
                        *y as f64,
                        &format!("{name}: slot_mass {l} [{i}]"),
                    );
                }
            }
            (a, Some(m))
        } else {
            set_tol(1e-9);
            (per_layer(&case["attn"]), None)
        };
        let gate_mean: Vec<Option<f64>> = match case.get("gate") {
            Some(g) => per_layer(g)
                .iter()
                .map(|a| Some(a.data.iter().map(|&x| x as f64).sum::<f64>() / a.data.len() as f64))
                .collect(),
            None => vec![None; attn.len()],
        };
        let hidden = per_layer(&case["hidden"]);
        let attn_out = per_layer(&case["attn_out"]);
        let keys = per_layer(&case["keys"]);
        let values = per_layer(&case["values"]);
        let t = attn[0].shape[2];
        let layers: Vec<LayerArrays> = (0..attn.len())
            .map(|l| LayerArrays {
                queries: None,
                attn: attn[l].clone(),
                slot_mass: slot_mass.as_ref().map(|m| m[l].clone()),
                gate_mean: gate_mean[l],
                keys: keys[l].clone(),
                values: values[l].clone(),
                hidden: hidden[l].clone(),
                attn_out: attn_out[l].clone(),
            })
            .collect();
        let groups: Vec<usize> = e["query_groups"]["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect();
        let n_groups = e["query_groups"]["n_groups"].as_u64().unwrap() as usize;
        let r = SinkReport::compute_split(&layers, &eps, t.min(10), Some((&groups, n_groups)));
        // Guo et al.'s value drain and attention to token 1 by query group (dormant, triggers)
        for (l, heads) in e["value_drain"].as_array().unwrap().iter().enumerate() {
            for (h, want) in list(heads).iter().enumerate() {
                close(
                    r.value_drain[l][h],
                    *want,
                    &format!("{name}: value drain {l}/{h}"),
                );
            }
        }
        let split = r.first_by_query.as_ref().expect("split requested");
        for (l, heads) in e["first_by_query"].as_array().unwrap().iter().enumerate() {
            for (h, by_group) in heads.as_array().unwrap().iter().enumerate() {
                for (g, want) in by_group.as_array().unwrap().iter().enumerate() {
                    let got = split[l][h][g];
                    match want.as_f64() {
                        Some(w) => close(got, w, &format!("{name}: first_by_query {l}/{h}/{g}")),
                        None => assert!(got.is_nan(), "{name}: empty group must be NaN"),
                    }
                }
            }
        }
        for (l, want) in list(&e["first_token_mass"]).iter().enumerate() {
            close(
                r.first_mass[l],
                *want,
                &format!("{name}: first_token_mass {l}"),
            );
        }
        close(
            r.f_attn(),
            e["f_attn"].as_f64().unwrap(),
            &format!("{name}: f_attn"),
        );
        close(
            r.m_act(),
            e["m_act"].as_f64().unwrap(),
            &format!("{name}: m_act"),
        );
        if slot_mass.is_some() {
            for &ep in &eps {
                let want = e["slot_rate"][eps_name(ep)].as_f64().unwrap();
                close(
                    r.slot_rate[&eps_name(ep)],
                    want,
                    &format!("{name}: slot_rate {ep}"),
                );
            }
            for (l, want) in list(&e["slot_mass_layer"]).iter().enumerate() {
                close(
                    r.slot_mass[l].unwrap(),
                    *want,
                    &format!("{name}: slot_mass_layer {l}"),
                );
            }
        } else {
            assert!(r.slot_rate.is_empty(), "{name}: slot rates without slots");
        }
        if let Some(want) = e.get("gate_mean") {
            for (l, want) in list(want).iter().enumerate() {
                close(
                    r.gate_mean[l].unwrap(),
                    *want,
                    &format!("{name}: gate_mean {l}"),
                );
            }
        }
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
        // Bondarenko et al.'s outliers, secondary sinks, the matrix entropy and Sink₁ per layer
        let sink1_layer = r.sink1_by_layer().expect("ε = 0.3 in the grid");
        for l in 0..attn.len() {
            let at = |key: &str| list(&e[key])[l];
            close(
                r.outliers[l].kurtosis,
                at("kurtosis"),
                &format!("{name}: kurtosis {l}"),
            );
            let a = &r.attn_out[l];
            close(
                a.kurtosis,
                at("attn_out_kurtosis"),
                &format!("{name}: attn_out kurtosis {l}"),
            );
            close(
                a.max_abs,
                at("attn_out_max_abs"),
                &format!("{name}: attn_out max {l}"),
            );
            let ent = &r.repr_entropy[l];
            close(
                ent.nats,
                at("repr_entropy"),
                &format!("{name}: repr entropy {l}"),
            );
            close(
                ent.normalised,
                at("repr_entropy_norm"),
                &format!("{name}: entropy norm {l}"),
            );
            close(
                sink1_layer[l],
                at("sink1_layer"),
                &format!("{name}: Sink₁ of layer {l}"),
            );
            let (got, want) = (&r.secondary[l], &e["secondary"][l]);
            close(
                got.heads,
                want["heads"].as_f64().unwrap(),
                &format!("{name}: secondary heads {l}"),
            );
            close(
                got.count,
                want["count"].as_f64().unwrap(),
                &format!("{name}: secondary count {l}"),
            );
            let by = list(&want["by_position"]);
            assert_eq!(got.by_position.len(), by.len(), "{name}: positions");
            for (k, (x, y)) in got.by_position.iter().zip(&by).enumerate() {
                close(*x, *y, &format!("{name}: secondary at {k}, layer {l}"));
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
