//! Encoding for the event-file writer: TFRecord framing with masked CRC-32C, the hand-written
//! protobuf messages, histograms and PNG images.

use super::FILE_VERSION;
use std::io;

// ---------------------------------------------------------------------------------------------
// Checksums and record framing
// ---------------------------------------------------------------------------------------------

/// The constant added by TensorFlow's CRC mask.
pub(super) const MASK_DELTA: u32 = 0xa282_ead8;

/// TensorFlow's masked CRC-32C of `data`: `rotr(crc32c(data), 15) + 0xa282ead8` (wrapping).
///
/// Written out: `((crc >> 15) | (crc << 17)).wrapping_add(0xa282ead8)`.
pub fn masked_crc32c(data: &[u8]) -> u32 {
    mask_crc(crc32c::crc32c(data))
}

/// Applies TensorFlow's CRC mask to an already computed CRC-32C.
pub(super) fn mask_crc(crc: u32) -> u32 {
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
pub(super) mod pb {
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

/// `tensorflow.DataType.DT_FLOAT`.
pub(super) const DT_FLOAT: i32 = 1;
/// `tensorflow.DataType.DT_STRING`.
pub(super) const DT_STRING: i32 = 7;
/// `tensorboard.DataClass.DATA_CLASS_TENSOR`.
pub(super) const DATA_CLASS_TENSOR: i32 = 2;
/// `SessionLog.SessionStatus.START`.
pub(super) const SESSION_START: i32 = 1;

/// The payload of one `Summary.Value`.
pub(super) enum ValueKind<'a> {
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
    /// Plugin data only: `tensor` = TensorBoard's `NULL_TENSOR` (an empty DT_FLOAT of shape
    /// [0]) and `metadata.plugin_data` = (plugin name, content).
    Plugin(&'a str, &'a [u8]),
    /// `tensor` = a rank-0 DT_STRING holding the bytes, with plugin (name) metadata and no
    /// content (Custom Scalars' layout).
    StringTensor(&'a str, &'a [u8]),
    /// `tensor` (field 8) holding one rank-0 DT_STRING, plus text-plugin metadata (field 9).
    Text(&'a str),
}

/// Fields of a `HistogramProto`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Histogram {
    pub(super) min: f64,
    pub(super) max: f64,
    pub(super) num: f64,
    pub(super) sum: f64,
    pub(super) sum_squares: f64,
    pub(super) bucket_limit: Vec<f64>,
    pub(super) bucket: Vec<f64>,
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
pub(super) fn encode_value(tag: &str, kind: &ValueKind<'_>) -> Vec<u8> {
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
        ValueKind::Plugin(name, content) => {
            let mut dim = Vec::new();
            pb::bytes(&mut dim, 2, &[]); // one Dim of size 0 (the default, omitted)
            let mut tensor = Vec::new();
            pb::int32(&mut tensor, 1, DT_FLOAT);
            pb::bytes(&mut tensor, 2, &dim);
            pb::bytes(&mut v, 8, &tensor);
            let mut plugin_data = Vec::new();
            pb::bytes(&mut plugin_data, 1, name.as_bytes());
            pb::bytes_nonempty(&mut plugin_data, 2, content);
            let mut metadata = Vec::new();
            pb::bytes(&mut metadata, 1, &plugin_data);
            pb::bytes(&mut v, 9, &metadata);
        }
        ValueKind::StringTensor(name, bytes) => {
            let mut tensor = Vec::with_capacity(bytes.len() + 16);
            pb::int32(&mut tensor, 1, DT_STRING);
            pb::bytes(&mut tensor, 2, &[]);
            pb::bytes(&mut tensor, 8, bytes);
            pb::bytes(&mut v, 8, &tensor);
            let mut plugin_data = Vec::new();
            pb::bytes(&mut plugin_data, 1, name.as_bytes());
            let mut metadata = Vec::new();
            pb::bytes(&mut metadata, 1, &plugin_data);
            pb::bytes(&mut v, 9, &metadata);
        }
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
pub(super) fn encode_summary_event(wall_time: f64, step: i64, values: &[Vec<u8>]) -> Vec<u8> {
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
pub(super) fn encode_file_version_event(wall_time: f64) -> Vec<u8> {
    let mut e = Vec::new();
    pb::double_nonzero(&mut e, 1, wall_time);
    pb::bytes(&mut e, 3, FILE_VERSION.as_bytes());
    e
}

/// Encodes an `Event` with `session_log { status: START }`.
pub(super) fn encode_session_start_event(wall_time: f64, step: i64) -> Vec<u8> {
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

pub(super) fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Encodes 8-bit pixels (row-major, `height` rows of `width` pixels of `channels` bytes) as PNG.
pub(super) fn encode_png(
    width: usize,
    height: usize,
    channels: usize,
    pixels: &[u8],
) -> io::Result<Vec<u8>> {
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
pub(super) fn build_histogram(values: &[f64], n_buckets: usize) -> Histogram {
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
