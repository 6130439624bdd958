//! Unit tests of the sink metrics on hand-built matrices (the NumPy goldens are
//! tests/suite/metrics_golden.rs).

use super::*;

#[test]
fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
    assert_eq!(median(vec![7.0]), 7.0);
    assert_eq!(median(vec![3.0, 1.0]), 2.0); // not the larger of 2 (bench's 2 rounds)
    assert_eq!(median(vec![5.0, 1.0, 3.0]), 3.0);
    assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
    assert_eq!(median(vec![-1.0, 10.0, 0.5, 0.5]), 0.5);
}

#[test]
fn uniform_causal_attention_gives_the_f_attn_floor() {
    // H_64 / 64 = 4.743890... / 64 (harmonic number by hand to 6 digits)
    assert!((uniform_first_mass(64) - 0.074123).abs() < 5e-7);
    assert_eq!(uniform_first_mass(1), 1.0);
    // A uniform causal (1, 1, T, T) matrix has exactly this F-Attn.
    let t = 9;
    let mut data = vec![0f32; t * t];
    for i in 0..t {
        for j in 0..=i {
            data[i * t + j] = 1.0 / (i + 1) as f32;
        }
    }
    let a = Array::new(vec![1, 1, t, t], data);
    assert!((first_token_mass(&a) - uniform_first_mass(t)).abs() < 1e-7);
}

/// Two heads, T = 3, built by hand.
fn tiny() -> Array {
    #[rustfmt::skip]
    let data = vec![
        // head 0: everything on token 1
        1.0, 0.0, 0.0,
        1.0, 0.0, 0.0,
        1.0, 0.0, 0.0,
        // head 1: attend to self
        1.0, 0.0, 0.0,
        0.0, 1.0, 0.0,
        0.0, 0.0, 1.0,
    ];
    Array::new(vec![1, 2, 3, 3], data)
}

#[test]
fn importance_by_hand() {
    let imp = importance(&tiny());
    assert_eq!(imp[0][0], vec![1.0, 0.0, 0.0]);
    // head 1: key 0 seen by 3 queries, gets 1 of 3; key 1: 1 of 2; key 2: 1 of 1
    assert!((imp[0][1][0] - 1.0 / 3.0).abs() < 1e-12);
    assert!((imp[0][1][1] - 0.5).abs() < 1e-12);
    assert!((imp[0][1][2] - 1.0).abs() < 1e-12);
    let rates = sink_rates(std::slice::from_ref(&imp), 0.3, 3);
    assert_eq!(rates, vec![100.0, 50.0, 50.0]);
    // strict >: α = 0.5 at k=1 is not above 0.5
    let rates = sink_rates(std::slice::from_ref(&imp), 0.5, 3);
    assert_eq!(rates, vec![50.0, 0.0, 50.0]);
    // by head: head 0 has α₁ = 1, head 1 has α₁ = 1/3
    assert_eq!(
        sink1_by_head(std::slice::from_ref(&imp), 0.3),
        vec![vec![100.0, 100.0]]
    );
    assert_eq!(sink1_by_head(&[imp], 0.5), vec![vec![100.0, 0.0]]);
}

#[test]
fn entropy_of_one_hot_and_uniform_rows() {
    assert_eq!(entropy(&tiny()), 0.0);
    let u = Array::new(vec![1, 1, 1, 4], vec![0.25; 4]);
    assert!((entropy(&u) - 4f64.ln()).abs() < 1e-9);
}

#[test]
fn hidden_stats_by_hand() {
    // B=1, T=3, D=2; token 0 is large.
    let h = Array::new(vec![1, 3, 2], vec![300.0, 400.0, 0.0, 1.0, 1.0, 0.0]);
    let s = hidden_stats(&h);
    assert!((s.norm_first - 500.0).abs() < 1e-9);
    assert!((s.norm_rest - 1.0).abs() < 1e-9);
    assert!((s.norm_ratio - 500.0).abs() < 1e-9);
    assert_eq!(s.top3, [400.0, 300.0, 1.0]);
    assert!((s.median_abs - 1.0).abs() < 1e-12);
    // 400 > 100 but 400 < 1000 × median (= 1000): not massive
    assert_eq!(s.massive_count, 0.0);
}

#[test]
fn metric_names_are_stable() {
    let layers = vec![LayerArrays {
        attn: tiny(),
        slot_mass: None,
        gate_mean: None,
        queries: None,
        keys: Array::new(vec![1, 2, 3, 1], vec![3.0, 1.0, 1.0, 4.0, 1.0, 1.0]),
        values: Array::new(vec![1, 2, 3, 1], vec![0.0; 6]),
        hidden: Array::new(vec![1, 3, 2], vec![1.0; 6]),
        attn_out: Array::new(vec![1, 3, 2], vec![0.5; 6]),
    }];
    let r = SinkReport::compute(&layers, &[0.3], 3);
    let names: Vec<String> = r
        .scalars()
        .into_iter()
        .map(|(n, _)| n.to_string())
        .collect();
    assert_eq!(names[0], "sink/rate_eps0.3/pos01");
    assert!(names.contains(&"sink/importance_first/layer00_head01".to_string()));
    assert!(names.contains(&"act/norm_ratio/layer00".to_string()));
    assert!(names.contains(&"kv/key_norm_first/layer00".to_string()));
    for n in [
        "act/kurtosis/layer00",
        "attn_out/max_abs/layer00",
        "sink/secondary_heads/layer00",
        "repr/entropy_norm/layer00",
        "sink/layer_rate_eps0.3/layer00",
    ] {
        assert!(names.contains(&n.to_string()), "{n}");
    }
    assert_eq!(r.key_norms[0], (3.5, 1.0));
    assert_eq!(r.sink1(), Some(100.0));
}
