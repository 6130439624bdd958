#!/usr/bin/env python3
"""Check a TensorBoard event directory with TensorBoard's own reader.

Reads LOGDIR with `tensorboard.backend.event_processing.event_accumulator.EventAccumulator`
(every event file in the directory, merged as TensorBoard does, nothing sampled away) and
compares it with an expected JSON file:

    {
      "scalars":    {"tag": [[step, value], ...]},
      "images":     {"tag": [[step, width, height], ...]},   # or [step, width, height, sha256]
      "histograms": {"tag": [[step, num, min, max, sum], ...]},
      "texts":      {"tag": [[step, "text"], ...]},
      "rel_tol": 1e-6,          # optional (default 1e-6); scalars are stored as float32
      "abs_tol": 0.0            # optional (default 0)
    }

Every expected tag must be present with exactly the expected steps (order-insensitive,
duplicates count) and values within tolerance; an image with a fourth element must be exactly
the PNG whose SHA-256 (hex) that is. Tags present but not expected are ignored.
Beyond the comparison it also checks, and fails on:
  * every record of every event file passes the CRC checks of TensorBoard's record reader (the
    accumulator itself silently stops at a corrupt record);
  * each image's PNG header has the width and height its proto claims;
  * each histogram's bucket counts add up to `num`, with one limit per bucket, non-decreasing;
  * each expected tag is registered with the right plugin (scalars, images, histograms, text)
    by `plugin_event_accumulator`, the loader behind TensorBoard's UI.
It warns (without failing) when a tag's steps do not strictly increase in file order: the
TensorBoard data server (`--load_fast`, the default) then drops the earlier points.

Other modes (they can be combined with each other and with EXPECTED):
  --list                     print every tag with its kind, number of points and step range
  --require-tags PREFIX ...  fail unless each PREFIX starts at least one tag

Exit status: 0 when everything matches (one summary line is printed), 1 on any mismatch (a
diff is printed), 2 on usage errors or when the `tensorboard` package is missing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import struct
import sys

try:
    import numpy as np  # noqa: F401  (tensorboard's tensor_util needs it)
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.backend.event_processing import io_wrapper
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    from tensorboard.compat.tensorflow_stub import errors as tb_errors
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow
    from tensorboard.util import tensor_util
except ImportError as exc:  # pragma: no cover - depends on the environment
    print(
        f"check_tensorboard.py: cannot import the tensorboard package ({exc}); "
        "run `bash scripts/setup_python.sh`",
        file=sys.stderr,
    )
    sys.exit(2)

KINDS = ("scalars", "images", "histograms", "texts")
# Plugin that TensorBoard's UI files each kind of expected tag under.
PLUGIN_OF_KIND = {"scalars": "scalars", "images": "images", "histograms": "histograms", "texts": "text"}
SIZE_GUIDANCE = {
    ea.COMPRESSED_HISTOGRAMS: 0,
    ea.IMAGES: 0,
    ea.AUDIO: 0,
    ea.SCALARS: 0,
    ea.HISTOGRAMS: 0,
    ea.TENSORS: 0,
}


def event_files(logdir):
    """Event files directly inside logdir, in the order TensorBoard reads them."""
    return sorted(
        os.path.join(logdir, name)
        for name in os.listdir(logdir)
        if io_wrapper.IsSummaryEventsFile(os.path.join(logdir, name))
    )


def check_records(path):
    """Reads every record with TensorBoard's record reader; returns (count, error or None)."""
    reader = pywrap_tensorflow.PyRecordReader_New(path, 0, None, None)
    n = 0
    while True:
        try:
            reader.GetNext()
        except tb_errors.OutOfRangeError:
            return n, None
        except tb_errors.DataLossError as exc:
            return n, f"record {n} is corrupt or truncated: {exc.message}"
        n += 1


def png_size(data):
    """(width, height) from a PNG's IHDR chunk, or None if data is not a PNG."""
    if len(data) < 24 or data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", data[16:24])


def close(got, want, rel_tol, abs_tol):
    if isinstance(want, float) and math.isnan(want):
        return math.isnan(got)
    return math.isclose(got, want, rel_tol=rel_tol, abs_tol=abs_tol)


def fmt(x):
    return repr(x) if not isinstance(x, float) else f"{x:.9g}"


class Report:
    def __init__(self):
        self.errors = []
        self.warnings = []

    def error(self, msg):
        self.errors.append(msg)

    def warn(self, msg):
        self.warnings.append(msg)


def load(logdir):
    acc = ea.EventAccumulator(logdir, size_guidance=SIZE_GUIDANCE)
    acc.Reload()
    plugin_acc = pea.EventAccumulator(logdir, size_guidance={}, tensor_size_guidance={})
    plugin_acc.Reload()
    return acc, plugin_acc


def actual_points(acc, kind, tag):
    """Loaded points of one tag as a list of (step, payload...) tuples in file order."""
    if kind == "scalars":
        return [(e.step, e.value) for e in acc.Scalars(tag)]
    if kind == "images":
        return [(e.step, e.width, e.height, e.encoded_image_string) for e in acc.Images(tag)]
    if kind == "histograms":
        return [(e.step, e.histogram_value) for e in acc.Histograms(tag)]
    if kind == "texts":
        out = []
        for e in acc.Tensors(tag):
            arr = tensor_util.make_ndarray(e.tensor_proto)
            items = [x.decode("utf-8") if isinstance(x, bytes) else str(x) for x in arr.flatten()]
            out.append((e.step, items[0] if len(items) == 1 else "\n".join(items)))
        return out
    raise ValueError(kind)


def tags_of_kind(acc, kind):
    """Tags of one expected kind; text tags are the tensor tags owned by the text plugin."""
    if kind == "texts":
        try:
            return sorted(acc.PluginTagToContent("text"))
        except KeyError:
            return []
    return sorted(acc.Tags().get(kind, []))


def compare_tag(report, acc, kind, tag, expected, rel_tol, abs_tol):
    name = f"{kind} '{tag}'"
    present = tags_of_kind(acc, kind)
    if tag not in present:
        report.error(f"MISSING {name}: tag not found; {kind} tags present: {sorted(present)}")
        return None
    raw = actual_points(acc, kind, tag)
    steps_in_order = [p[0] for p in raw]
    if any(b <= a for a, b in zip(steps_in_order, steps_in_order[1:])):
        report.warn(
            f"{name}: steps do not strictly increase in file order {steps_in_order[:20]}"
            f"{'...' if len(steps_in_order) > 20 else ''}; TensorBoard's data server (its default "
            "loader) drops earlier points whose step is >= a later, lower step"
        )
    got = sorted(raw, key=lambda p: p[0])
    want = sorted((list(e) for e in expected), key=lambda e: e[0])
    got_steps = [p[0] for p in got]
    want_steps = [int(e[0]) for e in want]
    if got_steps != want_steps:
        missing = sorted(set(want_steps) - set(got_steps))
        extra = sorted(set(got_steps) - set(want_steps))
        report.error(
            f"MISMATCH {name}: steps differ\n    expected {want_steps}\n    got      {got_steps}"
            + (f"\n    missing {missing}" if missing else "")
            + (f"\n    unexpected {extra}" if extra else "")
            + ("\n    (same step sets, different multiplicities)" if not missing and not extra else "")
        )
        return 0
    for g, w in zip(got, want):
        step = g[0]
        where = f"MISMATCH {name} at step {step}"
        if kind == "scalars":
            if not close(g[1], float(w[1]), rel_tol, abs_tol):
                rel = abs(g[1] - w[1]) / max(abs(w[1]), 1e-300)
                report.error(f"{where}: expected {fmt(float(w[1]))}, got {fmt(g[1])} (rel err {rel:.3g} > rel_tol {rel_tol:g})")
        elif kind == "images":
            _, width, height, png = g
            if (width, height) != (int(w[1]), int(w[2])):
                report.error(f"{where}: expected width {w[1]} x height {w[2]}, got width {width} x height {height}")
            size = png_size(png)
            if size is None:
                report.error(f"{where}: encoded image is not a PNG")
            elif size != (width, height):
                report.error(f"{where}: proto says width {width} x height {height} but the PNG header says width {size[0]} x height {size[1]}")
            if len(w) > 3 and hashlib.sha256(png).hexdigest() != w[3]:
                report.error(f"{where}: the PNG's SHA-256 is {hashlib.sha256(png).hexdigest()}, expected {w[3]}")
        elif kind == "histograms":
            h = g[1]
            fields = (("num", h.num), ("min", h.min), ("max", h.max), ("sum", h.sum))
            for (label, value), exp in zip(fields, w[1:]):
                if not close(value, float(exp), rel_tol, abs_tol):
                    report.error(f"{where}: {label} expected {fmt(float(exp))}, got {fmt(value)}")
            limits, counts = list(h.bucket_limit), list(h.bucket)
            if len(limits) != len(counts):
                report.error(f"{where}: {len(limits)} bucket limits for {len(counts)} buckets")
            if any(b < a for a, b in zip(limits, limits[1:])):
                report.error(f"{where}: bucket limits decrease: {limits}")
            if not close(sum(counts), h.num, 1e-9, 1e-9):
                report.error(f"{where}: bucket counts add up to {sum(counts)}, num is {h.num}")
        elif kind == "texts":
            if g[1] != w[1]:
                report.error(f"{where}: expected text {w[1]!r}, got {g[1]!r}")
    return len(got)


def check_plugins(report, plugin_acc, kind, tag):
    plugin = PLUGIN_OF_KIND[kind]
    try:
        registered = plugin_acc.PluginTagToContent(plugin)
    except KeyError:
        registered = {}
    if tag not in registered:
        report.error(
            f"PLUGIN {kind} '{tag}': not registered with TensorBoard's '{plugin}' plugin "
            f"(active plugins: {sorted(plugin_acc.ActivePlugins())})"
        )


def list_tags(acc):
    rows = []
    tags = acc.Tags()
    text_tags = set(tags_of_kind(acc, "texts"))
    for kind, getter in (
        ("scalars", acc.Scalars),
        ("images", acc.Images),
        ("histograms", acc.Histograms),
        ("tensors", acc.Tensors),
    ):
        for tag in sorted(tags.get(kind, [])):
            steps = [e.step for e in getter(tag)]
            label = "texts" if kind == "tensors" and tag in text_tags else kind
            rng = f"steps {min(steps)}..{max(steps)}" if steps else "no points"
            rows.append(f"{label:<10} {tag}  ({len(steps)} points, {rng})")
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logdir", help="directory holding events.out.tfevents.* files")
    ap.add_argument("expected", nargs="?", help="expected JSON file (see module docstring)")
    ap.add_argument("--list", action="store_true", help="print all tags with their point counts")
    ap.add_argument("--require-tags", nargs="+", metavar="PREFIX", default=[],
                    help="fail unless every PREFIX starts at least one tag")
    args = ap.parse_args(argv)
    if not args.expected and not args.list and not args.require_tags:
        ap.error("give an EXPECTED json file, --list, or --require-tags")
    if not os.path.isdir(args.logdir):
        print(f"FAIL: {args.logdir} is not a directory", file=sys.stderr)
        return 1

    report = Report()
    files = event_files(args.logdir)
    if not files:
        print(f"FAIL: no event files (names containing 'tfevents') in {args.logdir}", file=sys.stderr)
        return 1
    n_records = 0
    for path in files:
        n, err = check_records(path)
        n_records += n
        if err:
            report.error(f"CORRUPT {os.path.basename(path)}: {err}")

    acc, plugin_acc = load(args.logdir)

    if args.list:
        print(f"{len(files)} event file(s), {n_records} records in {args.logdir}")
        for row in list_tags(acc):
            print("  " + row)

    if args.require_tags:
        all_tags = set(tags_of_kind(acc, "texts"))
        for kind in ("scalars", "images", "histograms", "tensors", "audio"):
            all_tags.update(acc.Tags().get(kind, []))
        for prefix in args.require_tags:
            if not any(t.startswith(prefix) for t in all_tags):
                report.error(f"MISSING: no tag starts with '{prefix}'; tags: {sorted(all_tags)}")

    counts = {}
    if args.expected:
        with open(args.expected, encoding="utf-8") as f:
            expected = json.load(f)
        unknown = set(expected) - set(KINDS) - {"rel_tol", "abs_tol"}
        if unknown:
            print(f"FAIL: unknown keys in {args.expected}: {sorted(unknown)}", file=sys.stderr)
            return 2
        rel_tol = float(expected.get("rel_tol", 1e-6))
        abs_tol = float(expected.get("abs_tol", 0.0))
        for kind in KINDS:
            for tag, points in sorted(expected.get(kind, {}).items()):
                n = compare_tag(report, acc, kind, tag, points, rel_tol, abs_tol)
                if n is None:  # missing: the plugin check would only repeat that
                    continue
                check_plugins(report, plugin_acc, kind, tag)
                counts[kind] = counts.get(kind, (0, 0))
                counts[kind] = (counts[kind][0] + 1, counts[kind][1] + n)

    for w in report.warnings:
        print(f"WARNING: {w}", file=sys.stderr)
    if report.errors:
        print(f"FAIL: {len(report.errors)} problem(s) in {args.logdir} ({len(files)} event file(s)):", file=sys.stderr)
        for e in report.errors:
            print("  " + e, file=sys.stderr)
        return 1
    parts = [f"{t} {k} tag(s) / {p} point(s)" for k, (t, p) in counts.items()]
    if args.require_tags:
        parts.append(f"{len(args.require_tags)} required prefix(es)")
    print(
        f"OK: {', '.join(parts) if parts else 'listed'} in {len(files)} event file(s), "
        f"{n_records} records, {args.logdir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
