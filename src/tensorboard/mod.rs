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

mod encode;
pub mod plugins;
#[cfg(test)]
mod tests;

use encode::*;
pub use encode::{masked_crc32c, tfrecord};
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
    pub fn add_scalars<K: std::fmt::Display>(
        &mut self,
        step: i64,
        values: &[(K, f64)],
    ) -> io::Result<()> {
        if values.is_empty() {
            return Ok(());
        }
        let encoded: Vec<Vec<u8>> = values
            .iter()
            .map(|(tag, v)| encode_value(&tag.to_string(), &ValueKind::Simple(*v as f32)))
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

    /// Writes HParams plugin data ([`plugins`]: an experiment, a session start or end) under
    /// `tag` at step 0.
    pub fn add_hparams(&mut self, tag: &str, content: &[u8]) -> io::Result<()> {
        self.write_values(
            0,
            &[encode_value(tag, &ValueKind::Plugin("hparams", content))],
        )
    }

    /// Writes a Custom Scalars layout ([`plugins::layout`]) at step 0.
    pub fn add_layout(&mut self, layout: &[u8]) -> io::Result<()> {
        let kind = ValueKind::StringTensor("custom_scalars", layout);
        self.write_values(0, &[encode_value(plugins::LAYOUT_TAG, &kind)])
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
