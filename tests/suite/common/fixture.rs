//! Reading the golden fixtures written by the NumPy references (`tests/fixtures/*.json`):
//! arrays are `{"shape": [...], "data": [...]}`, token ids and masks are nested rows.

use serde_json::Value;
use sinklab::checkpoint::HostTensor;

pub fn shape(v: &Value) -> Vec<usize> {
    v["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

pub fn floats(v: &Value) -> Vec<f64> {
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// An array as a host tensor (values cast to f32).
pub fn host(v: &Value) -> HostTensor {
    HostTensor {
        shape: shape(v),
        data: floats(v).into_iter().map(|x| x as f32).collect(),
    }
}

/// Rows of integers, flattened, with their `[rows, cols]` shape.
pub fn int_rows(v: &Value) -> (Vec<i64>, [usize; 2]) {
    let rows = v.as_array().unwrap();
    let data: Vec<i64> = rows
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()))
        .collect();
    let cols = data.len() / rows.len();
    (data, [rows.len(), cols])
}

/// Rows of numbers, flattened, as f32.
pub fn float_rows(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
        })
        .collect()
}

/// `|got − want| ≤ atol + rtol·|want|` elementwise, naming the first element that is not.
pub fn assert_close(got: &[f32], want: &[f64], rtol: f64, atol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = *g as f64;
        assert!(
            (g - w).abs() <= atol + rtol * w.abs(),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}
