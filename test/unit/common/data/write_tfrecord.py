#!/usr/bin/env python3
"""Writes TFRecord files of tf.train.Example with protobuf's own Python library, for the TFRecord
reader's test (data_tfrecord_test.cc): protoc compiles common/data/proto/example.proto (TensorFlow's
package, names and field numbers) to Python, python3-protobuf serializes each Example, and the
record framing with its masked CRC-32C is written here in pure Python, apart from tfd's C++.

  write_tfrecord.py PROTO WORKDIR OUT   PROTO: example.proto; writes OUT and OUT.gz (GZIP)

The records (i = 0..4): "pixels" float_list [i / 2, -i, 0.001 * i], "count" int64_list
[i, 2**40 + i], "species" bytes_list [b"cat" for even i, b"dog" for odd], "id" int64_list [100 + i].
Exits 77 when python3-protobuf or protoc is missing.
"""
import gzip
import importlib
import os
import shutil
import struct
import subprocess
import sys


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(record):
    head = struct.pack("<Q", len(record))
    return head + struct.pack("<I", masked(head)) + record + struct.pack("<I", masked(record))


def main(argv):
    if len(argv) != 3:
        print("usage: write_tfrecord.py PROTO WORKDIR OUT", file=sys.stderr)
        return 2
    proto, workdir, out = argv
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        # A Python of its own (pyenv, a venv) may lack Debian's python3-protobuf: try the system one.
        if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") and os.path.exists("/usr/bin/python3"):
            os.execv("/usr/bin/python3", ["/usr/bin/python3", __file__] + argv)
        print("skipped: python3-protobuf is not installed", file=sys.stderr)
        return 77
    if shutil.which("protoc") is None:
        print("skipped: protoc is not installed", file=sys.stderr)
        return 77
    os.makedirs(workdir, exist_ok=True)
    r = subprocess.run(["protoc", "-I", os.path.dirname(os.path.abspath(proto)), "--python_out", workdir, os.path.abspath(proto)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print("protoc: " + r.stderr.strip(), file=sys.stderr)
        return 1
    sys.path.insert(0, workdir)
    pb = importlib.import_module("example_pb2")
    data = b""
    for i in range(5):
        ex = pb.Example()
        f = ex.features.feature
        f["pixels"].float_list.value.extend([i / 2, -i, 0.001 * i])
        f["count"].int64_list.value.extend([i, 2**40 + i])
        f["species"].bytes_list.value.append(b"cat" if i % 2 == 0 else b"dog")
        f["id"].int64_list.value.append(100 + i)
        data += frame(ex.SerializeToString())
    with open(out, "wb") as fh:
        fh.write(data)
    with gzip.open(out + ".gz", "wb") as fh:
        fh.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
