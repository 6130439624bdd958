//! Tests of the event-file writer (byte layouts, CRCs, and files the real readers load).

use super::encode::*;
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
            let crc = u32::from_le_bytes(bytes[pos + 12 + len..pos + 16 + len].try_into().unwrap());
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
