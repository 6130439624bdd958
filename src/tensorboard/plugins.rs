//! Plugin data for TensorBoard's HParams and Custom Scalars dashboards.
//!
//! **HParams** ( (`tensorboard/plugins/hparams/{plugin_data,api}.proto`),
//! encoded by hand like the rest of the event format. A sweep writes one `Experiment` (its
//! axes as hyper-parameters, the metrics to show) at its root and one `SessionStartInfo` /
//! `SessionEndInfo` pair per run; the metrics are ordinary scalars of the run. The subset used:
//!
//! ```text
//! HParamsPluginData { int32 version = 1; oneof { Experiment experiment = 2;
//!                     SessionStartInfo session_start_info = 3; SessionEndInfo session_end_info = 4; } }
//! Experiment        { repeated HParamInfo hparam_infos = 4; repeated MetricInfo metric_infos = 5; }
//! HParamInfo        { string name = 1; DataType type = 4; ListValue domain_discrete = 5; }
//!                   // DATA_TYPE_STRING = 1, DATA_TYPE_BOOL = 2, DATA_TYPE_FLOAT64 = 3
//! MetricInfo        { MetricName name = 1; string display_name = 3; }
//! MetricName        { string group = 1; string tag = 2; }
//! SessionStartInfo  { map<string, google.protobuf.Value> hparams = 1; string group_name = 4;
//!                     double start_time_secs = 5; }
//! SessionEndInfo    { Status status = 1; double end_time_secs = 2; }   // STATUS_SUCCESS = 1,
//!                   // STATUS_FAILURE = 2, STATUS_RUNNING = 3
//! google.protobuf.Value     { oneof { double number_value = 2; string string_value = 3;
//!                             bool bool_value = 4; } }
//! google.protobuf.ListValue { repeated Value values = 1; }
//! ```
//!
//! Each message travels as `Summary.Value { tag, tensor = NULL_TENSOR, metadata { plugin_data
//! { plugin_name = "hparams", content } } }` under the tags `_hparams_/experiment`,
//! `_hparams_/session_start_info` and `_hparams_/session_end_info`, as TensorBoard's own
//! `hparams` summary API writes them.
//!
//! **Custom Scalars** (`tensorboard/plugins/custom_scalar/layout.proto`): a `Layout` that
//! groups tags (regular expressions) into charts, written as a rank-0 DT_STRING tensor under
//! the tag `custom_scalars__config__` with plugin `custom_scalars`:
//!
//! ```text
//! Layout   { int32 version = 1; repeated Category category = 2; }
//! Category { string title = 1; repeated Chart chart = 2; }
//! Chart    { string title = 1; MultilineChartContent multiline = 2; }
//! MultilineChartContent { repeated string tag = 1; }                // regular expressions
//! ```

use super::encode::pb;

pub const EXPERIMENT_TAG: &str = "_hparams_/experiment";
pub const SESSION_START_TAG: &str = "_hparams_/session_start_info";
pub const SESSION_END_TAG: &str = "_hparams_/session_end_info";

/// One hyper-parameter value.
#[derive(Debug, Clone, PartialEq)]
pub enum HValue {
    Number(f64),
    Text(String),
    Bool(bool),
}

impl HValue {
    /// `google.protobuf.Value` (a oneof: zero values are still written).
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        match self {
            HValue::Number(x) => pb::double(&mut v, 2, *x),
            HValue::Text(s) => pb::bytes(&mut v, 3, s.as_bytes()),
            HValue::Bool(b) => pb::int32(&mut v, 4, i32::from(*b)),
        }
        v
    }

    /// `DataType` of the value.
    fn data_type(&self) -> i32 {
        match self {
            HValue::Text(_) => 1,
            HValue::Bool(_) => 2,
            HValue::Number(_) => 3,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Status {
    Success = 1,
    Failure = 2,
    Running = 3,
}

fn plugin_data(field: u32, message: &[u8]) -> Vec<u8> {
    let mut c = Vec::new();
    // version = 0 is the proto3 default: omitted
    pb::bytes(&mut c, field, message);
    c
}

/// `HParamsPluginData { experiment }`: every hyper-parameter with its type and the values it
/// takes (one type per name: the first value's), and the metric tags.
pub fn experiment(hparams: &[(String, Vec<HValue>)], metrics: &[(String, String)]) -> Vec<u8> {
    let mut e = Vec::new();
    for (name, values) in hparams {
        let mut info = Vec::new();
        pb::bytes(&mut info, 1, name.as_bytes());
        if let Some(first) = values.first() {
            pb::int32(&mut info, 4, first.data_type());
            let mut list = Vec::new();
            for v in values {
                pb::bytes(&mut list, 1, &v.encode());
            }
            pb::bytes(&mut info, 5, &list);
        }
        pb::bytes(&mut e, 4, &info);
    }
    for (tag, display) in metrics {
        let mut name = Vec::new();
        pb::bytes(&mut name, 2, tag.as_bytes()); // group "" (the session's own run)
        let mut info = Vec::new();
        pb::bytes(&mut info, 1, &name);
        pb::bytes_nonempty(&mut info, 3, display.as_bytes());
        pb::bytes(&mut e, 5, &info);
    }
    plugin_data(2, &e)
}

/// `HParamsPluginData { session_start_info }`.
pub fn session_start(hparams: &[(String, HValue)], group: &str, start_secs: f64) -> Vec<u8> {
    let mut s = Vec::new();
    for (name, value) in hparams {
        let mut entry = Vec::new();
        pb::bytes(&mut entry, 1, name.as_bytes());
        pb::bytes(&mut entry, 2, &value.encode());
        pb::bytes(&mut s, 1, &entry);
    }
    pb::bytes_nonempty(&mut s, 4, group.as_bytes());
    pb::double_nonzero(&mut s, 5, start_secs);
    plugin_data(3, &s)
}

/// `HParamsPluginData { session_end_info }`.
pub fn session_end(status: Status, end_secs: f64) -> Vec<u8> {
    let mut s = Vec::new();
    pb::int32(&mut s, 1, status as i32);
    pb::double_nonzero(&mut s, 2, end_secs);
    plugin_data(4, &s)
}

pub const LAYOUT_TAG: &str = "custom_scalars__config__";

/// A chart: its title and the regular expressions of its tags.
pub type Chart<'a> = (&'a str, Vec<String>);

/// A Custom Scalars `Layout`: categories (title, charts).
pub fn layout(categories: &[(&str, Vec<Chart<'_>>)]) -> Vec<u8> {
    let mut l = Vec::new();
    for (title, charts) in categories {
        let mut c = Vec::new();
        pb::bytes(&mut c, 1, title.as_bytes());
        for (chart_title, tags) in charts {
            let mut multiline = Vec::new();
            for t in tags {
                pb::bytes(&mut multiline, 1, t.as_bytes());
            }
            let mut chart = Vec::new();
            pb::bytes(&mut chart, 1, chart_title.as_bytes());
            pb::bytes(&mut chart, 2, &multiline);
            pb::bytes(&mut c, 2, &chart);
        }
        pb::bytes(&mut l, 2, &c);
    }
    l
}
