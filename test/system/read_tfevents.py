#!/usr/bin/env python3
"""Reads TensorBoard event files with a reader tfd did not write: protoc compiles event.proto and
summary.proto (written here from the published field numbers) and python3-protobuf parses each
record; the TFRecord framing and its masked CRC-32C are checked in pure Python.

  read_tfevents.py --check WORKDIR         exit 0 if protoc and python3-protobuf work, else 77
  read_tfevents.py WORKDIR PATH...         PATH: an event file, or a folder of them (recursively)

Prints one JSON object: {path: {"records", "truncated", "file_version", "scalars": {tag: [[step,
value], ...]}, "histograms": {tag: [[step, num, bucket_count], ...]}}}. Exits 1 naming the file
and record when a file breaks the format: a bad CRC, a record protobuf cannot parse, a first record
other than file_version "brain.Event:2", a tag whose steps do not increase, a value that is not
finite, a histogram whose buckets do not add up to its count.
"""
import importlib
import json
import math
import os
import shutil
import struct
import subprocess
import sys

EVENT_PROTO = """syntax = "proto3";
package tfdcheck;
import "summary.proto";
message Event {
  double wall_time = 1;
  int64 step = 2;
  oneof what {
    string file_version = 3;
    bytes graph_def = 4;
    Summary summary = 5;
  }
}
"""
SUMMARY_PROTO = """syntax = "proto3";
package tfdcheck;
message HistogramProto {
  double min = 1;
  double max = 2;
  double num = 3;
  double sum = 4;
  double sum_squares = 5;
  repeated double bucket_limit = 6 [packed = true];
  repeated double bucket = 7 [packed = true];
}
message Summary {
  message Value {
    string node_name = 7;
    string tag = 1;
    oneof value {
      float simple_value = 2;
      bytes obsolete_old_style_histogram = 3;
      HistogramProto histo = 5;
    }
  }
  repeated Value value = 1;
}
"""


def skip(why):
    print("skipped: " + why, file=sys.stderr)
    sys.exit(77)


def fail(why):
    print("read_tfevents: " + why, file=sys.stderr)
    sys.exit(1)


def load_protos(workdir):
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        # A Python of its own (pyenv, a venv) may lack Debian's python3-protobuf: try the system one.
        if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") and os.path.exists("/usr/bin/python3"):
            os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
        skip("python3-protobuf is not installed (apt-get install python3-protobuf)")
    if shutil.which("protoc") is None:
        skip("protoc is not installed (apt-get install protobuf-compiler)")
    os.makedirs(workdir, exist_ok=True)
    for name, text in (("event.proto", EVENT_PROTO), ("summary.proto", SUMMARY_PROTO)):
        with open(os.path.join(workdir, name), "w") as f:
            f.write(text)
    r = subprocess.run(["protoc", "-I", workdir, "--python_out", workdir, "event.proto", "summary.proto"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail("protoc: " + r.stderr.strip())
    sys.path.insert(0, workdir)
    return importlib.import_module("event_pb2")


def crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = crc32c_table()


def masked_crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(path):
    """The complete records of the file, and whether it ends in an incomplete one."""
    with open(path, "rb") as f:
        data = f.read()
    records, at = [], 0
    while at < len(data):
        if len(data) - at < 12:
            return records, True
        (n,) = struct.unpack_from("<Q", data, at)
        (len_crc,) = struct.unpack_from("<I", data, at + 8)
        if masked_crc32c(data[at:at + 8]) != len_crc:
            fail("%s: record %d at byte %d: the length's CRC does not match" % (path, len(records), at))
        if len(data) - at < 16 + n:
            return records, True
        body = data[at + 12:at + 12 + n]
        (body_crc,) = struct.unpack_from("<I", data, at + 12 + n)
        if masked_crc32c(body) != body_crc:
            fail("%s: record %d at byte %d: the data's CRC does not match" % (path, len(records), at))
        records.append(body)
        at += 16 + n
    return records, False


def read_file(event_pb2, path):
    records, truncated = read_records(path)
    out = {"records": len(records), "truncated": truncated, "file_version": None, "scalars": {}, "histograms": {}}
    last_step = {}
    for i, raw in enumerate(records):
        ev = event_pb2.Event()
        try:
            ev.ParseFromString(raw)
        except Exception as e:  # google.protobuf.message.DecodeError
            fail("%s: record %d: protobuf cannot parse it: %s" % (path, i, e))
        if i == 0:
            if ev.WhichOneof("what") != "file_version" or ev.file_version != "brain.Event:2":
                fail("%s: the first record is not file_version brain.Event:2: %s" % (path, ev))
            out["file_version"] = ev.file_version
            continue
        if ev.WhichOneof("what") != "summary":
            fail("%s: record %d holds no summary" % (path, i))
        if not (ev.wall_time > 1.5e9):
            fail("%s: record %d: wall_time %r is not a recent Unix time" % (path, i, ev.wall_time))
        for v in ev.summary.value:
            if v.tag in last_step and ev.step <= last_step[v.tag]:
                fail("%s: record %d: tag %s goes from step %d back to %d" % (path, i, v.tag, last_step[v.tag], ev.step))
            last_step[v.tag] = ev.step
            kind = v.WhichOneof("value")
            if kind == "simple_value":
                if not math.isfinite(v.simple_value):
                    fail("%s: record %d: %s is %r" % (path, i, v.tag, v.simple_value))
                out["scalars"].setdefault(v.tag, []).append([ev.step, v.simple_value])
            elif kind == "histo":
                h = v.histo
                if len(h.bucket) != len(h.bucket_limit) or abs(sum(h.bucket) - h.num) > 0.5 or not h.min <= h.max:
                    fail("%s: record %d: histogram %s does not add up: %s" % (path, i, v.tag, h))
                out["histograms"].setdefault(v.tag, []).append([ev.step, h.num, len(h.bucket)])
            else:
                fail("%s: record %d: tag %s holds %s" % (path, i, v.tag, kind))
    return out


def main(argv):
    if len(argv) >= 2 and argv[0] == "--check":
        load_protos(argv[1])
        return 0
    if len(argv) < 2:
        fail("usage: read_tfevents.py [--check] WORKDIR PATH...")
    event_pb2 = load_protos(argv[0])
    files = []
    for p in argv[1:]:
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                files += [os.path.join(root, n) for n in names if "tfevents" in n]
        else:
            files.append(p)
    if not files:
        fail("no event files under " + " ".join(argv[1:]))
    json.dump({f: read_file(event_pb2, f) for f in sorted(files)}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
