//! A small, self-contained TensorBoard event-file writer.
//!
//! Depends only on `std`, [`crc32c`] (record checksums) and [`png`] (image summaries). It
//! replaces the `tensorboard-rs` crate, which panics on text/hparams summaries, swaps width and
//! height of non-square images and overwrites a second writer opened in the same second.
//!
//! # The file format
//!
//! A TensorBoard log directory holds one or more files whose names contain `tfevents`; this
//! writer names them `events.out.tfevents.<unix_seconds>.<hostname>.<pid>.<n>`, where `n` is a
//! process-wide counter, and opens them with `create_new`, so an existing file is never
//! truncated (on a name clash it retries with the next `n`). TensorBoard reads every such file
//! in the directory (in file-name order) and merges their contents.
//!
//! Each file is a sequence of *TFRecords*:
//!
//! ```text
//! u64 LE   length of data (N)
//! u32 LE   masked_crc32c(the 8 length bytes)
//! N bytes  data: one serialized `tensorflow.Event` protobuf message
//! u32 LE   masked_crc32c(data)
//! ```
//!
//! The checksum is CRC-32C (Castagnoli polynomial, as in iSCSI/ext4), "masked" as
//! `mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8` (a rotate right by 15 bits plus a
//! constant, with wrapping 32-bit arithmetic). TensorFlow masks CRCs because computing the CRC
//! of a string that itself contains embedded CRCs is problematic; see [`masked_crc32c`].
//!
//! The first record must be an `Event` carrying only `wall_time` and
//! `file_version = "brain.Event:2"`. The version matters: with version 2, TensorBoard's Python
//! loader only discards ("purges") data when it sees a second `SessionLog.START` event (see
//! [`EventWriter::add_session_start`]); without it, it would purge on any step that goes
//! backwards.
//!
//! # The protobuf messages
//!
//! Messages are encoded by hand, in field-number order and omitting proto3 default values, so
//! the bytes equal what the reference protobuf implementation produces. The subset of
//! `tensorflow/core/util/event.proto`, `summary.proto`, `tensor.proto`, `tensor_shape.proto`
//! and `histogram.proto` used here:
//!
//! ```text
//! Event            { double wall_time = 1; int64 step = 2; string file_version = 3;
//!                    Summary summary = 5; SessionLog session_log = 7; }
//! SessionLog       { enum SessionStatus status = 1; }            // START = 1
//! Summary          { repeated Value value = 1; }
//! Summary.Value    { string tag = 1; oneof { float simple_value = 2; Image image = 4;
//!                    HistogramProto histo = 5; TensorProto tensor = 8; }
//!                    SummaryMetadata metadata = 9; }
//! Summary.Image    { int32 height = 1; int32 width = 2; int32 colorspace = 3;
//!                    bytes encoded_image_string = 4; }          // colorspace 1 gray, 3 RGB
//! HistogramProto   { double min = 1; double max = 2; double num = 3; double sum = 4;
//!                    double sum_squares = 5; repeated double bucket_limit = 6 [packed];
//!                    repeated double bucket = 7 [packed]; }
//! TensorProto      { DataType dtype = 1; TensorShapeProto tensor_shape = 2;
//!                    repeated bytes string_val = 8; }          // DT_STRING = 7
//! SummaryMetadata  { PluginData plugin_data = 1; DataClass data_class = 4; }
//! PluginData       { string plugin_name = 1; bytes content = 2; }
//! ```
//!
//! Scalars, images and histograms use the "legacy" value kinds (`simple_value`, `image`,
//! `histo`) that every TensorBoard version reads and converts for its plugins. Text has no
//! legacy kind: it is a rank-0 `DT_STRING` tensor tagged with plugin `"text"` and
//! `DATA_CLASS_TENSOR`, exactly as `tf.summary.text` writes it (the text plugin renders it as
//! Markdown).
//!
//! Scalars are stored as `float` (f32) by the format: values passed as `f64` lose precision.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The `file_version` written in the first record of every event file.
pub const FILE_VERSION: &str = "brain.Event:2";

/// Number of equal-width buckets used by [`EventWriter::add_histogram`] (the default of
/// `tf.summary.histogram` in TensorFlow 2).
pub const DEFAULT_HISTOGRAM_BUCKETS: usize = 30;

/// Process-wide counter that makes file names of writers opened in the same second unique.
static FILE_COUNTER: AtomicU64 = AtomicU64::new(0);

// ---------------------------------------------------------------------------------------------
// Checksums and record framing
// ---------------------------------------------------------------------------------------------

/// The constant added by TensorFlow's CRC mask.
const MASK_DELTA: u32 = 0xa282_ead8;

/// TensorFlow's masked CRC-32C of `data`: `rotr(crc32c(data), 15) + 0xa282ead8` (wrapping).
///
/// Written out: `((crc >> 15) | (crc << 17)).wrapping_add(0xa282ead8)`.
pub fn masked_crc32c(data: &[u8]) -> u32 {
    mask_crc(crc32c::crc32c(data))
}

/// Applies TensorFlow's CRC mask to an already computed CRC-32C.
fn mask_crc(crc: u32) -> u32 {
    // `rotate_right(15)` is `(crc >> 15) | (crc << 17)`.
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// Frames `data` as one TFRecord: length (u64 LE), masked CRC of the 8 length bytes (u32 LE),
/// the data, masked CRC of the data (u32 LE).
pub fn tfrecord(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
    out
}

// ---------------------------------------------------------------------------------------------
// Protobuf wire-format encoding
// ---------------------------------------------------------------------------------------------

/// Minimal protobuf wire-format encoder (proto3 semantics: callers skip default values of
/// non-`oneof` scalar fields themselves, see the `*_nonzero` helpers).
mod pb {
    /// Wire type of varint fields (int32, int64, enum, bool).
    pub const VARINT: u8 = 0;
    /// Wire type of fixed 64-bit fields (double, fixed64).
    pub const FIXED64: u8 = 1;
    /// Wire type of length-delimited fields (string, bytes, messages, packed repeated).
    pub const LEN: u8 = 2;
    /// Wire type of fixed 32-bit fields (float, fixed32).
    pub const FIXED32: u8 = 5;

    /// Appends `v` as a base-128 varint (7 bits per byte, least significant group first, high
    /// bit set on every byte but the last). At most 10 bytes.
    pub fn varint(buf: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            buf.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        buf.push(v as u8);
    }

    /// Appends a field key: `(field_number << 3) | wire_type`.
    pub fn key(buf: &mut Vec<u8>, field: u32, wire: u8) {
        varint(buf, (u64::from(field) << 3) | u64::from(wire));
    }

    /// An `int64` field. Negative values take 10 bytes (two's complement, no zigzag).
    pub fn int64(buf: &mut Vec<u8>, field: u32, v: i64) {
        key(buf, field, VARINT);
        varint(buf, v as u64);
    }

    /// An `int32` or enum field. Negative values are sign-extended to 64 bits (10 bytes), as
    /// the protobuf specification requires.
    pub fn int32(buf: &mut Vec<u8>, field: u32, v: i32) {
        int64(buf, field, i64::from(v));
    }

    /// A `double` field: 8 bytes, IEEE 754 little-endian.
    pub fn double(buf: &mut Vec<u8>, field: u32, v: f64) {
        key(buf, field, FIXED64);
        buf.extend_from_slice(&v.to_le_bytes());
    }

    /// A `float` field: 4 bytes, IEEE 754 little-endian.
    pub fn float(buf: &mut Vec<u8>, field: u32, v: f32) {
        key(buf, field, FIXED32);
        buf.extend_from_slice(&v.to_le_bytes());
    }

    /// A length-delimited field (`bytes`, `string` or an embedded message).
    pub fn bytes(buf: &mut Vec<u8>, field: u32, data: &[u8]) {
        key(buf, field, LEN);
        varint(buf, data.len() as u64);
        buf.extend_from_slice(data);
    }

    /// A packed `repeated double` field; nothing is written for an empty slice.
    pub fn packed_doubles(buf: &mut Vec<u8>, field: u32, vals: &[f64]) {
        if vals.is_empty() {
            return;
        }
        key(buf, field, LEN);
        varint(buf, (vals.len() * 8) as u64);
        for v in vals {
            buf.extend_from_slice(&v.to_le_bytes());
        }
    }

    /// An `int64` field, omitted when 0 (proto3 implicit presence).
    pub fn int64_nonzero(buf: &mut Vec<u8>, field: u32, v: i64) {
        if v != 0 {
            int64(buf, field, v);
        }
    }

    /// A `double` field, omitted when +0.0 (proto3 compares the bit pattern, so -0.0 is kept).
    pub fn double_nonzero(buf: &mut Vec<u8>, field: u32, v: f64) {
        if v.to_bits() != 0 {
            double(buf, field, v);
        }
    }

    /// A `string`/`bytes` field, omitted when empty.
    pub fn bytes_nonempty(buf: &mut Vec<u8>, field: u32, data: &[u8]) {
        if !data.is_empty() {
            bytes(buf, field, data);
        }
    }
}

/// `tensorflow.DataType.DT_STRING`.
const DT_STRING: i32 = 7;
/// `tensorboard.DataClass.DATA_CLASS_TENSOR`.
const DATA_CLASS_TENSOR: i32 = 2;
/// `SessionLog.SessionStatus.START`.
const SESSION_START: i32 = 1;

/// The payload of one `Summary.Value`.
enum ValueKind<'a> {
    /// `simple_value` (field 2, float).
    Simple(f32),
    /// `image` (field 4): height, width, colorspace, PNG bytes.
    Image {
        height: i32,
        width: i32,
        colorspace: i32,
        png: Vec<u8>,
    },
    /// `histo` (field 5).
    Histo(Histogram),
    /// `tensor` (field 8) holding one rank-0 DT_STRING, plus text-plugin metadata (field 9).
    Text(&'a str),
}

/// Fields of a `HistogramProto`.
#[derive(Debug, Clone, PartialEq)]
struct Histogram {
    min: f64,
    max: f64,
    num: f64,
    sum: f64,
    sum_squares: f64,
    bucket_limit: Vec<f64>,
    bucket: Vec<f64>,
}

impl Histogram {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(48 + 16 * self.bucket.len());
        pb::double_nonzero(&mut b, 1, self.min);
        pb::double_nonzero(&mut b, 2, self.max);
        pb::double_nonzero(&mut b, 3, self.num);
        pb::double_nonzero(&mut b, 4, self.sum);
        pb::double_nonzero(&mut b, 5, self.sum_squares);
        pb::packed_doubles(&mut b, 6, &self.bucket_limit);
        pb::packed_doubles(&mut b, 7, &self.bucket);
        b
    }
}

/// Encodes one `Summary.Value` message.
fn encode_value(tag: &str, kind: &ValueKind<'_>) -> Vec<u8> {
    let mut v = Vec::new();
    pb::bytes_nonempty(&mut v, 1, tag.as_bytes());
    match kind {
        // Inside a oneof, a zero value is still written (presence is explicit).
        ValueKind::Simple(x) => pb::float(&mut v, 2, *x),
        ValueKind::Image {
            height,
            width,
            colorspace,
            png,
        } => {
            let mut img = Vec::with_capacity(png.len() + 16);
            pb::int32(&mut img, 1, *height);
            pb::int32(&mut img, 2, *width);
            pb::int32(&mut img, 3, *colorspace);
            pb::bytes_nonempty(&mut img, 4, png);
            pb::bytes(&mut v, 4, &img);
        }
        ValueKind::Histo(h) => pb::bytes(&mut v, 5, &h.encode()),
        ValueKind::Text(text) => {
            let mut tensor = Vec::with_capacity(text.len() + 16);
            pb::int32(&mut tensor, 1, DT_STRING);
            pb::bytes(&mut tensor, 2, &[]); // empty TensorShapeProto: rank 0 (a scalar)
            pb::bytes(&mut tensor, 8, text.as_bytes()); // string_val, even when empty
            pb::bytes(&mut v, 8, &tensor);

            let mut plugin_data = Vec::new();
            pb::bytes(&mut plugin_data, 1, b"text"); // plugin_name; content is empty
            let mut metadata = Vec::new();
            pb::bytes(&mut metadata, 1, &plugin_data);
            pb::int32(&mut metadata, 4, DATA_CLASS_TENSOR);
            pb::bytes(&mut v, 9, &metadata);
        }
    }
    v
}

/// Encodes an `Event` whose `summary` holds the given (already encoded) values.
fn encode_summary_event(wall_time: f64, step: i64, values: &[Vec<u8>]) -> Vec<u8> {
    let mut summary = Vec::with_capacity(values.iter().map(|v| v.len() + 6).sum());
    for v in values {
        pb::bytes(&mut summary, 1, v);
    }
    let mut e = Vec::with_capacity(summary.len() + 24);
    pb::double_nonzero(&mut e, 1, wall_time);
    pb::int64_nonzero(&mut e, 2, step);
    pb::bytes(&mut e, 5, &summary);
    e
}

/// Encodes the first `Event` of a file: `wall_time` and `file_version` only.
fn encode_file_version_event(wall_time: f64) -> Vec<u8> {
    let mut e = Vec::new();
    pb::double_nonzero(&mut e, 1, wall_time);
    pb::bytes(&mut e, 3, FILE_VERSION.as_bytes());
    e
}

/// Encodes an `Event` with `session_log { status: START }`.
fn encode_session_start_event(wall_time: f64, step: i64) -> Vec<u8> {
    let mut log = Vec::new();
    pb::int32(&mut log, 1, SESSION_START);
    let mut e = Vec::new();
    pb::double_nonzero(&mut e, 1, wall_time);
    pb::int64_nonzero(&mut e, 2, step);
    pb::bytes(&mut e, 7, &log);
    e
}

// ---------------------------------------------------------------------------------------------
// Images and histograms
// ---------------------------------------------------------------------------------------------

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Encodes 8-bit pixels (row-major, `height` rows of `width` pixels of `channels` bytes) as PNG.
fn encode_png(width: usize, height: usize, channels: usize, pixels: &[u8]) -> io::Result<Vec<u8>> {
    if width == 0 || height == 0 {
        return Err(invalid(format!(
            "image must not be empty (width {width}, height {height})"
        )));
    }
    if width > i32::MAX as usize || height > i32::MAX as usize {
        return Err(invalid(format!("image too large ({width}x{height})")));
    }
    let expected = width
        .checked_mul(height)
        .and_then(|n| n.checked_mul(channels))
        .ok_or_else(|| invalid(format!("image too large ({width}x{height})")))?;
    if pixels.len() != expected {
        return Err(invalid(format!(
            "image of width {width} and height {height} with {channels} channel(s) needs {expected} bytes, got {}",
            pixels.len()
        )));
    }
    let color = match channels {
        1 => png::ColorType::Grayscale,
        3 => png::ColorType::Rgb,
        _ => unreachable!("only gray and RGB images are written"),
    };
    let mut out = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut out, width as u32, height as u32);
        encoder.set_color(color);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header()?;
        writer.write_image_data(pixels)?;
        writer.finish()?;
    }
    Ok(out)
}

/// Builds a histogram of the finite entries of `values` with `n_buckets` equal-width buckets
/// spanning `[min, max]`.
///
/// Bucket `i` covers `[edge_i, edge_{i+1})` (the last one also includes `max`);
/// `bucket_limit[i]` is its right edge, so the last limit equals `max`. This matches how
/// TensorBoard reads a `HistogramProto`: bucket lefts are `[min] + bucket_limit[..-1]` and
/// bucket rights are `bucket_limit[..-1] + [max]`. All buckets are kept, empty ones included.
/// NaN and ±inf are left out (and not counted in `num`). With no finite value the histogram
/// has `num = 0` and a single empty bucket at 0; with `min == max` it has one bucket holding
/// everything.
fn build_histogram(values: &[f64], n_buckets: usize) -> Histogram {
    let n_buckets = n_buckets.max(1);
    let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
    let (mut num, mut sum, mut sum_squares) = (0usize, 0.0f64, 0.0f64);
    for &v in values.iter().filter(|v| v.is_finite()) {
        min = min.min(v);
        max = max.max(v);
        num += 1;
        sum += v;
        sum_squares += v * v;
    }
    if num == 0 {
        return Histogram {
            min: 0.0,
            max: 0.0,
            num: 0.0,
            sum: 0.0,
            sum_squares: 0.0,
            bucket_limit: vec![0.0],
            bucket: vec![0.0],
        };
    }
    if min == max {
        return Histogram {
            min,
            max,
            num: num as f64,
            sum,
            sum_squares,
            bucket_limit: vec![max],
            bucket: vec![num as f64],
        };
    }
    // Convex combination: no overflow even when max - min exceeds f64::MAX.
    let edge = |i: usize| -> f64 {
        if i == 0 {
            min
        } else if i >= n_buckets {
            max
        } else {
            let t = i as f64 / n_buckets as f64;
            min * (1.0 - t) + max * t
        }
    };
    let half_span = max * 0.5 - min * 0.5;
    let mut counts = vec![0.0f64; n_buckets];
    for &v in values.iter().filter(|v| v.is_finite()) {
        let guess = ((v * 0.5 - min * 0.5) / half_span * n_buckets as f64) as usize;
        let mut i = guess.min(n_buckets - 1);
        // Make the index agree exactly with the edges reported in `bucket_limit`.
        while i > 0 && v < edge(i) {
            i -= 1;
        }
        while i + 1 < n_buckets && v >= edge(i + 1) {
            i += 1;
        }
        counts[i] += 1.0;
    }
    Histogram {
        min,
        max,
        num: num as f64,
        sum,
        sum_squares,
        bucket_limit: (1..=n_buckets).map(edge).collect(),
        bucket: counts,
    }
}

/// Nine samples of matplotlib's *viridis* colormap at `t = 0, 1/8, ..., 1`.
const VIRIDIS: [[u8; 3]; 9] = [
    [0x44, 0x01, 0x54],
    [0x47, 0x2d, 0x7b],
    [0x3b, 0x52, 0x8b],
    [0x2c, 0x72, 0x8e],
    [0x21, 0x91, 0x8c],
    [0x28, 0xae, 0x80],
    [0x5e, 0xc9, 0x62],
    [0xad, 0xdc, 0x30],
    [0xfd, 0xe7, 0x25],
];

/// Colour used by [`heatmap_rgb`] for NaN entries (magenta: not part of viridis).
pub const HEATMAP_NAN_RGB: [u8; 3] = [255, 0, 255];

/// Maps `t` in `[0, 1]` (clamped) to an approximate viridis colour by linear interpolation in
/// a 9-entry lookup table.
pub fn viridis(t: f64) -> [u8; 3] {
    let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
    let x = t * (VIRIDIS.len() - 1) as f64;
    let i = (x.floor() as usize).min(VIRIDIS.len() - 2);
    let f = x - i as f64;
    let (a, b) = (VIRIDIS[i], VIRIDIS[i + 1]);
    std::array::from_fn(|c| (f64::from(a[c]) * (1.0 - f) + f64::from(b[c]) * f).round() as u8)
}

/// Renders a `rows × cols` matrix (row-major `values`) as an RGB image with `cell × cell`
/// pixels per entry, coloured with an approximate viridis colormap (dark purple at `vmin`,
/// yellow at `vmax`; values outside are clamped, NaN is [`HEATMAP_NAN_RGB`]).
///
/// Returns `(width, height, pixels)` with `width = cols * cell`, `height = rows * cell` and
/// `pixels` row-major RGB (`width * height * 3` bytes), ready for
/// [`EventWriter::add_image_rgb`]. Entry `(r, c)` appears `r` cells down and `c` cells right
/// of the top-left corner. If `vmax <= vmin` (or either is not finite) every finite value
/// above `vmin` maps to the top colour and the rest to the bottom one. A `cell` of 0 counts
/// as 1.
///
/// # Panics
/// If `values.len() < rows * cols`.
pub fn heatmap_rgb(
    values: &[f64],
    rows: usize,
    cols: usize,
    cell: usize,
    vmin: f64,
    vmax: f64,
) -> (usize, usize, Vec<u8>) {
    assert!(
        values.len() >= rows * cols,
        "heatmap_rgb: {} values for a {rows}x{cols} matrix",
        values.len()
    );
    let cell = cell.max(1);
    let (width, height) = (cols * cell, rows * cell);
    let span = vmax - vmin;
    let colour = |v: f64| -> [u8; 3] {
        if v.is_nan() {
            HEATMAP_NAN_RGB
        } else if span > 0.0 && span.is_finite() {
            viridis((v - vmin) / span)
        } else {
            viridis(if v > vmin { 1.0 } else { 0.0 })
        }
    };
    let mut pixels = Vec::with_capacity(width * height * 3);
    for r in 0..rows {
        let row: Vec<[u8; 3]> = values[r * cols..(r + 1) * cols]
            .iter()
            .map(|&v| colour(v))
            .collect();
        let mut line = Vec::with_capacity(width * 3);
        for rgb in &row {
            for _ in 0..cell {
                line.extend_from_slice(rgb);
            }
        }
        for _ in 0..cell {
            pixels.extend_from_slice(&line);
        }
    }
    (width, height, pixels)
}

// ---------------------------------------------------------------------------------------------
// The writer
// ---------------------------------------------------------------------------------------------

/// Best-effort host name for file names, restricted to `[A-Za-z0-9._-]`.
fn hostname() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_default();
    let clean: String = raw
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.is_empty() {
        "localhost".to_string()
    } else {
        clean
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Writes one TensorBoard event file.
///
/// Every `add_*` call appends one `Event` record to a buffered file; call [`flush`] to make
/// the data visible to a running TensorBoard (the writer also flushes when dropped, ignoring
/// errors). Tags are free-form; `/` groups them into sections in the UI.
///
/// Steps are `i64`. Write each tag's steps in strictly increasing order (across all files
/// of the directory, which TensorBoard reads in file-name order): TensorBoard's default data
/// server takes a step that is not above the tag's previous one for a restart and drops the
/// earlier points with step `>=` it, while the Python loader keeps both; see
/// [`add_session_start`](Self::add_session_start).
///
/// [`flush`]: EventWriter::flush
pub struct EventWriter {
    out: BufWriter<File>,
    path: PathBuf,
}

impl EventWriter {
    /// Creates `dir` (and its parents) if needed and opens a new event file in it, named
    /// `events.out.tfevents.<unix_seconds>.<hostname>.<pid>.<n>`. The file is opened with
    /// `create_new`: an existing file is never overwritten; on a clash the next `n` is tried.
    /// Writes the `file_version` record (`brain.Event:2`) first.
    pub fn create(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let wall_time = now();
        let host = hostname();
        let pid = std::process::id();
        let mut attempts = 0;
        let (file, path) = loop {
            let n = FILE_COUNTER.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!(
                "events.out.tfevents.{}.{host}.{pid}.{n}",
                wall_time.floor() as u64
            ));
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(f) => break (f, path),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < 10_000 => {
                    attempts += 1;
                }
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("creating event file {}: {e}", path.display()),
                    ));
                }
            }
        };
        let mut writer = Self {
            out: BufWriter::new(file),
            path,
        };
        writer.write_event(&encode_file_version_event(wall_time))?;
        writer.flush()?;
        Ok(writer)
    }

    /// The path of the event file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write_event(&mut self, event: &[u8]) -> io::Result<()> {
        self.out.write_all(&tfrecord(event))
    }

    fn write_values(&mut self, step: i64, values: &[Vec<u8>]) -> io::Result<()> {
        self.write_event(&encode_summary_event(now(), step, values))
    }

    /// Writes one scalar (stored as f32, as the format requires).
    pub fn add_scalar(&mut self, tag: &str, value: f64, step: i64) -> io::Result<()> {
        self.write_values(step, &[encode_value(tag, &ValueKind::Simple(value as f32))])
    }

    /// Writes several scalars for the same step in one `Event` (stored as f32).
    pub fn add_scalars(&mut self, step: i64, values: &[(String, f64)]) -> io::Result<()> {
        if values.is_empty() {
            return Ok(());
        }
        let encoded: Vec<Vec<u8>> = values
            .iter()
            .map(|(tag, v)| encode_value(tag, &ValueKind::Simple(*v as f32)))
            .collect();
        self.write_values(step, &encoded)
    }

    fn add_image(
        &mut self,
        tag: &str,
        step: i64,
        width: usize,
        height: usize,
        channels: usize,
        pixels: &[u8],
    ) -> io::Result<()> {
        let png = encode_png(width, height, channels, pixels)?;
        let kind = ValueKind::Image {
            height: height as i32,
            width: width as i32,
            colorspace: channels as i32, // 1 = grayscale, 3 = RGB
            png,
        };
        self.write_values(step, &[encode_value(tag, &kind)])
    }

    /// Writes an already-encoded RGB PNG of `width × height` pixels (e.g. a plot).
    pub fn add_png(
        &mut self,
        tag: &str,
        step: i64,
        width: usize,
        height: usize,
        png: Vec<u8>,
    ) -> io::Result<()> {
        let kind = ValueKind::Image {
            height: height as i32,
            width: width as i32,
            colorspace: 3,
            png,
        };
        self.write_values(step, &[encode_value(tag, &kind)])
    }

    /// Writes an 8-bit grayscale image as PNG. `pixels` is row-major: `height` rows (top to
    /// bottom) of `width` bytes each (`pixels.len() == width * height`).
    pub fn add_image_gray(
        &mut self,
        tag: &str,
        step: i64,
        width: usize,
        height: usize,
        pixels: &[u8],
    ) -> io::Result<()> {
        self.add_image(tag, step, width, height, 1, pixels)
    }

    /// Writes an 8-bit RGB image as PNG. `pixels` is row-major: `height` rows (top to bottom)
    /// of `width` pixels of 3 bytes (R, G, B) each (`pixels.len() == width * height * 3`).
    pub fn add_image_rgb(
        &mut self,
        tag: &str,
        step: i64,
        width: usize,
        height: usize,
        pixels: &[u8],
    ) -> io::Result<()> {
        self.add_image(tag, step, width, height, 3, pixels)
    }

    /// Writes a histogram of the finite entries of `values` with
    /// [`DEFAULT_HISTOGRAM_BUCKETS`] (30) equal-width buckets between their min and max.
    /// NaN and ±inf are ignored. (TensorBoard re-bins histograms for display, so the bucket
    /// scheme only limits resolution.)
    pub fn add_histogram(&mut self, tag: &str, step: i64, values: &[f64]) -> io::Result<()> {
        self.add_histogram_with_buckets(tag, step, values, DEFAULT_HISTOGRAM_BUCKETS)
    }

    /// Like [`add_histogram`](Self::add_histogram) with `n_buckets` equal-width buckets
    /// (0 counts as 1).
    pub fn add_histogram_with_buckets(
        &mut self,
        tag: &str,
        step: i64,
        values: &[f64],
        n_buckets: usize,
    ) -> io::Result<()> {
        let h = build_histogram(values, n_buckets);
        self.write_values(step, &[encode_value(tag, &ValueKind::Histo(h))])
    }

    /// Writes a text summary (shown by TensorBoard's Text tab, rendered as Markdown).
    pub fn add_text(&mut self, tag: &str, step: i64, text: &str) -> io::Result<()> {
        self.write_values(step, &[encode_value(tag, &ValueKind::Text(text))])
    }

    /// Writes `SessionLog { status: START }` at `step`, for resuming a run in a directory
    /// that already holds its events.
    ///
    /// TensorBoard has two loaders, which handle a restart differently:
    /// * the Python loader (`--load_fast=false`, and `EventAccumulator`) ignores the *first*
    ///   START it reads in a run; every later START discards the points of *all* tags with
    ///   step `>= step` read so far. So call this at the start of every session, including
    ///   the first (at its first step, usually 0), and at the resumed step on a resume.
    /// * the Rust data server (`--load_fast=auto`, the default where it is installed) ignores
    ///   session logs; instead, per tag, a point whose step is not above the previous one
    ///   discards the earlier points with step `>= ` its step. A resumed run that re-writes
    ///   steps gets the same result.
    ///
    /// Do not call it in a writer that shares a directory with a writer still running (say,
    /// an evaluation job): the Python loader would discard that writer's later points.
    pub fn add_session_start(&mut self, step: i64) -> io::Result<()> {
        self.write_event(&encode_session_start_event(now(), step))
    }

    /// Flushes buffered records to the file.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        let _ = self.out.flush();
    }
}

impl std::fmt::Debug for EventWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventWriter")
            .field("path", &self.path)
            .finish()
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    fn varint_bytes(v: u64) -> Vec<u8> {
        let mut b = Vec::new();
        pb::varint(&mut b, v);
        b
    }

    #[test]
    fn crc32c_known_values() {
        // The standard check value and RFC 3720 (iSCSI) appendix B.4 test vectors.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c::crc32c(b""), 0);
        assert_eq!(crc32c::crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c::crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
        let ascending: Vec<u8> = (0u8..32).collect();
        assert_eq!(crc32c::crc32c(&ascending), 0x46DD_794E);
        let descending: Vec<u8> = (0u8..32).rev().collect();
        assert_eq!(crc32c::crc32c(&descending), 0x113F_DB5C);
    }

    #[test]
    fn crc_mask() {
        assert_eq!(mask_crc(0), 0xa282_ead8);
        // rotr(0xE3069283, 15) = 0x2507C60D; + 0xa282ead8 = 0xC78AB0E5.
        assert_eq!(0xE306_9283u32.rotate_right(15), 0x2507_C60D);
        assert_eq!(masked_crc32c(b"123456789"), 0xC78A_B0E5);
        // Wrapping addition: 0xFFFFFFFF rotates to itself.
        assert_eq!(mask_crc(0xFFFF_FFFF), 0xa282_ead7);
        for crc in [1u32, 0x8000_0000, 0xDEAD_BEEF] {
            assert_eq!(
                mask_crc(crc),
                crc.rotate_right(15).wrapping_add(0xa282_ead8)
            );
        }
    }

    #[test]
    fn tfrecord_framing_known_record() {
        // Expected values computed independently with tensorboard's Python implementation
        // (tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c).
        let rec = tfrecord(b"");
        assert_eq!(rec.len(), 16);
        assert_eq!(&rec[..8], &[0u8; 8]);
        assert_eq!(
            u32::from_le_bytes(rec[8..12].try_into().unwrap()),
            0x0798_0329
        );
        assert_eq!(
            u32::from_le_bytes(rec[12..16].try_into().unwrap()),
            0xa282_ead8
        );

        let rec = tfrecord(b"123456789");
        assert_eq!(rec.len(), 9 + 16);
        assert_eq!(&rec[..8], &[9, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            u32::from_le_bytes(rec[8..12].try_into().unwrap()),
            0x3971_F937
        );
        assert_eq!(&rec[12..21], b"123456789");
        assert_eq!(
            u32::from_le_bytes(rec[21..25].try_into().unwrap()),
            0xC78A_B0E5
        );
    }

    #[test]
    fn varint_edge_cases() {
        assert_eq!(varint_bytes(0), [0x00]);
        assert_eq!(varint_bytes(1), [0x01]);
        assert_eq!(varint_bytes(127), [0x7f]);
        assert_eq!(varint_bytes(128), [0x80, 0x01]);
        assert_eq!(varint_bytes(300), [0xac, 0x02]);
        assert_eq!(varint_bytes(16_383), [0xff, 0x7f]);
        assert_eq!(varint_bytes(16_384), [0x80, 0x80, 0x01]);
        assert_eq!(
            varint_bytes(u32::MAX as u64),
            [0xff, 0xff, 0xff, 0xff, 0x0f]
        );
        assert_eq!(
            varint_bytes(u64::MAX),
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
        // int64 -1 is 10 bytes; int32 -1 is sign-extended to the same 10 bytes.
        let mut b = Vec::new();
        pb::int64(&mut b, 2, -1);
        assert_eq!(
            b,
            [
                0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
            ]
        );
        let mut c = Vec::new();
        pb::int32(&mut c, 2, -1);
        assert_eq!(b, c);
        // Keys: field 1 wire 1 = 0x09; field 16 needs two bytes.
        let mut k = Vec::new();
        pb::key(&mut k, 1, pb::FIXED64);
        pb::key(&mut k, 16, pb::VARINT);
        assert_eq!(k, [0x09, 0x80, 0x01]);
    }

    #[test]
    fn scalar_event_bytes() {
        // Event{wall_time: 1.5, step: 3, summary{value{tag: "a", simple_value: 1.0}}}; the same
        // bytes as Python protobuf's `Event(...).SerializeToString()`.
        let ev = encode_summary_event(1.5, 3, &[encode_value("a", &ValueKind::Simple(1.0))]);
        let expected: Vec<u8> = vec![
            0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, // field 1, fixed64: 1.5
            0x10, 0x03, // field 2, varint: 3
            0x2a, 0x0a, // field 5, 10 bytes: Summary
            0x0a, 0x08, // field 1, 8 bytes: Value
            0x0a, 0x01, b'a', // tag "a"
            0x15, 0x00, 0x00, 0x80, 0x3f, // field 2, fixed32: 1.0f
        ];
        assert_eq!(ev, expected);
        // Step 0 and a zero value: the step is omitted (proto3 default), the value is not (oneof).
        let ev = encode_summary_event(1.5, 0, &[encode_value("a", &ValueKind::Simple(0.0))]);
        assert_eq!(&ev[9..13], &[0x2a, 0x0a, 0x0a, 0x08]);
        assert_eq!(&ev[16..], &[0x15, 0, 0, 0, 0]);
        // File-version event.
        let ev = encode_file_version_event(1.5);
        assert_eq!(&ev[9..11], &[0x1a, 13]);
        assert_eq!(&ev[11..], b"brain.Event:2");
    }

    #[test]
    fn text_value_bytes() {
        let v = encode_value("t", &ValueKind::Text("hi"));
        let expected: Vec<u8> = vec![
            0x0a, 0x01, b't', // tag
            0x42, 0x08, // field 8: TensorProto, 8 bytes
            0x08, 0x07, // dtype DT_STRING
            0x12, 0x00, // empty tensor_shape (rank 0)
            0x42, 0x02, b'h', b'i', // string_val
            0x4a, 0x0a, // field 9: SummaryMetadata, 10 bytes
            0x0a, 0x06, 0x0a, 0x04, b't', b'e', b'x', b't', // plugin_data { plugin_name }
            0x20, 0x02, // data_class DATA_CLASS_TENSOR
        ];
        assert_eq!(v, expected);
    }

    /// Reads (width, height) from a PNG's IHDR chunk.
    fn png_ihdr(png: &[u8]) -> (u32, u32) {
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&png[12..16], b"IHDR");
        let w = u32::from_be_bytes(png[16..20].try_into().unwrap());
        let h = u32::from_be_bytes(png[20..24].try_into().unwrap());
        (w, h)
    }

    #[test]
    fn non_square_image_dimensions() {
        // 3 rows x 5 columns: width 5, height 3.
        let pixels: Vec<u8> = (0..15).map(|i| i as u8 * 10).collect();
        let png = encode_png(5, 3, 1, &pixels).unwrap();
        assert_eq!(png_ihdr(&png), (5, 3));
        let rgb = vec![7u8; 5 * 3 * 3];
        assert_eq!(png_ihdr(&encode_png(5, 3, 3, &rgb).unwrap()), (5, 3));
        // Decoding gives back the rows in order.
        let decoder = png::Decoder::new(std::io::Cursor::new(png));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (5, 3));
        assert_eq!(&buf[..info.buffer_size()], &pixels[..]);
        // The proto says height 3 (field 1), width 5 (field 2).
        let v = encode_value(
            "i",
            &ValueKind::Image {
                height: 3,
                width: 5,
                colorspace: 1,
                png: vec![1],
            },
        );
        assert_eq!(
            &v[3..],
            &[
                0x22, 0x09, 0x08, 0x03, 0x10, 0x05, 0x18, 0x01, 0x22, 0x01, 0x01
            ]
        );
        // Wrong sizes are errors, not panics.
        assert!(encode_png(5, 3, 1, &pixels[..14]).is_err());
        assert!(encode_png(0, 3, 1, &[]).is_err());
    }

    #[test]
    fn histogram_buckets() {
        let h = build_histogram(&[0.0, 1.0, 2.0, 3.0, 4.0, f64::NAN], 4);
        assert_eq!(h.num, 5.0);
        assert_eq!((h.min, h.max, h.sum, h.sum_squares), (0.0, 4.0, 10.0, 30.0));
        assert_eq!(h.bucket_limit, vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(h.bucket, vec![1.0, 1.0, 1.0, 2.0]);
        let h = build_histogram(&[2.5; 3], 30);
        assert_eq!(
            (h.bucket_limit.clone(), h.bucket.clone()),
            (vec![2.5], vec![3.0])
        );
        let h = build_histogram(&[], 30);
        assert_eq!(h.num, 0.0);
        assert_eq!(h.bucket.len(), 1);
        // Extreme range: no overflow, every value counted.
        let h = build_histogram(&[-f64::MAX, 0.0, f64::MAX], 3);
        assert!(h.bucket_limit.iter().all(|l| l.is_finite()));
        assert_eq!(h.bucket.iter().sum::<f64>(), 3.0);
        assert_eq!(h.bucket, vec![1.0, 1.0, 1.0]);
        // Counts always add up, values land in the bucket whose edges contain them.
        let vals: Vec<f64> = (0..1000)
            .map(|i| ((i * 7919) % 1000) as f64 / 37.0 - 3.0)
            .collect();
        let h = build_histogram(&vals, 30);
        assert_eq!(h.bucket.iter().sum::<f64>(), 1000.0);
        assert_eq!(*h.bucket_limit.last().unwrap(), h.max);
    }

    #[test]
    fn heatmap_layout_and_colours() {
        // 2 rows x 3 cols, 2 pixels per cell: 6 wide, 4 high.
        let vals = [0.0, 0.5, 1.0, f64::NAN, 2.0, -1.0];
        let (w, h, px) = heatmap_rgb(&vals, 2, 3, 2, 0.0, 1.0);
        assert_eq!((w, h, px.len()), (6, 4, 6 * 4 * 3));
        let at = |x: usize, y: usize| -> [u8; 3] { px[(y * w + x) * 3..][..3].try_into().unwrap() };
        assert_eq!(at(0, 0), VIRIDIS[0]);
        assert_eq!(at(1, 1), VIRIDIS[0]);
        assert_eq!(at(2, 0), VIRIDIS[4]);
        assert_eq!(at(5, 1), VIRIDIS[8]);
        assert_eq!(at(0, 2), HEATMAP_NAN_RGB);
        assert_eq!(at(3, 3), VIRIDIS[8]); // 2.0 clamps to vmax
        assert_eq!(at(4, 2), VIRIDIS[0]); // -1.0 clamps to vmin
        // Interpolation halfway between two table entries.
        let mid = viridis(1.0 / 16.0);
        for c in 0..3 {
            let expect = (f64::from(VIRIDIS[0][c]) + f64::from(VIRIDIS[1][c])) / 2.0;
            assert!((f64::from(mid[c]) - expect).abs() <= 0.5);
        }
    }

    #[test]
    fn writers_in_same_second_get_distinct_files() {
        let dir = std::env::temp_dir().join(format!("sinklab-tb-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut a = EventWriter::create(&dir).unwrap();
        let mut b = EventWriter::create(&dir).unwrap();
        assert_ne!(a.path(), b.path());
        a.add_scalar("x", 1.0, 1).unwrap();
        b.add_scalar("x", 2.0, 2).unwrap();
        drop(a);
        drop(b);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert_eq!(files.len(), 2);
        for f in &files {
            let bytes = std::fs::read(f).unwrap();
            // Two records: the file-version event and one scalar event.
            let mut pos = 0;
            let mut n = 0;
            while pos < bytes.len() {
                let len = u64::from_le_bytes(bytes[pos..pos + 8].try_into().unwrap()) as usize;
                let len_crc = u32::from_le_bytes(bytes[pos + 8..pos + 12].try_into().unwrap());
                assert_eq!(len_crc, masked_crc32c(&bytes[pos..pos + 8]));
                let data = &bytes[pos + 12..pos + 12 + len];
                let crc =
                    u32::from_le_bytes(bytes[pos + 12 + len..pos + 16 + len].try_into().unwrap());
                assert_eq!(crc, masked_crc32c(data));
                if n == 0 {
                    assert!(data.ends_with(b"brain.Event:2"));
                }
                pos += 16 + len;
                n += 1;
            }
            assert_eq!(n, 2);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
