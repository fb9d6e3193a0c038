#!/usr/bin/env python3
"""Writes the data of the ready jobs for NumPy, TFRecord and regression (configs/jobs/npz-digits.json,
tfrecord-digits.json, csv-diabetes-regression.json) from the real data sets Debian's python3-sklearn
ships (scikit-learn's own copies of the UCI files, read here as CSV; scikit-learn is not imported):

    scripts/make_example_data.py [--out DIR] [--sklearn-data DIR]     # DIR default: data/

  DIR/digits-npz/train.npz, test.npz            digits (1797 8x8 images, values 0-16, 10 classes):
                                                "x" float32 (N, 8, 8), "y" int64 (N,)
  DIR/digits-tfrecord/train.tfrecord, test.tfrecord
                                                the same examples as tf.train.Example records:
                                                "image" bytes_list (64 bytes, row-major), "label" int64_list
  DIR/diabetes/train.csv, test.csv              diabetes (442 patients, 10 features, a continuous target):
                                                header age,sex,bmi,bp,s1,s2,s3,s4,s5,s6,target

Each data set is split once by a seeded permutation (numpy's RandomState, whose stream numpy keeps
fixed across versions): the first 20% of it is the test set, the rest the training set, both in the
permutation's order (so a job's validation_split, the last rows of train, is a random sample). The
same seed gives the same files, byte for byte; each file is written to a temporary name and renamed.
The TFRecord framing and the Example protobuf are encoded here by hand (docs/data.md, "TFRecord").
An error is one line naming the file, and exit code 1.
"""
import argparse
import gzip
import importlib.util
import io
import os
import struct
import sys
import zipfile

SEED = 1
TEST_FRACTION = 0.2
DEBIAN_SKLEARN_DATA = "/usr/lib/python3/dist-packages/sklearn/datasets/data"
DIABETES_COLUMNS = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]


class DataError(Exception):
    pass


def import_numpy():
    try:
        import numpy
        return numpy
    except ImportError:
        pass
    # A Python of its own (pyenv, a venv) may lack Debian's python3-numpy: run under the system one.
    system = "/usr/bin/python3"
    if os.path.realpath(sys.executable) != os.path.realpath(system) and os.path.exists(system):
        os.execv(system, [system, os.path.abspath(__file__)] + sys.argv[1:])
    raise DataError("%s: numpy is not installed (scripts/setup installs python3-sklearn, which brings python3-numpy)" % sys.executable)


def sklearn_data_dir():
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    if spec is not None and spec.submodule_search_locations:
        return os.path.join(list(spec.submodule_search_locations)[0], "datasets", "data")
    return DEBIAN_SKLEARN_DATA


def read_text(path):
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            return f.read()
    except FileNotFoundError:
        raise DataError("%s: not found (scripts/setup installs python3-sklearn, which ships it)" % path)
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise DataError("%s: %s" % (path, e))


def read_digits(np, path):
    rows = []
    for line_no, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        cells = line.split(",")
        if len(cells) != 65:
            raise DataError("%s:%d: %d fields; expected 65 (64 pixels and a label)" % (path, line_no, len(cells)))
        try:
            values = [int(c) for c in cells]
        except ValueError:
            raise DataError("%s:%d: expected integers, got %r" % (path, line_no, line[:60]))
        if min(values[:64]) < 0 or max(values[:64]) > 16 or not 0 <= values[64] <= 9:
            raise DataError("%s:%d: a pixel outside 0-16 or a label outside 0-9" % (path, line_no))
        rows.append(values)
    if len(rows) != 1797:
        raise DataError("%s: %d rows; scikit-learn's digits have 1797" % (path, len(rows)))
    a = np.array(rows, dtype=np.int64)
    return a[:, :64].reshape(-1, 8, 8), a[:, 64]


def read_diabetes(data_dir):
    x_path = os.path.join(data_dir, "diabetes_data_raw.csv.gz")
    y_path = os.path.join(data_dir, "diabetes_target.csv.gz")
    x_rows, y_rows = [], []
    for line_no, line in enumerate(read_text(x_path).splitlines(), 1):
        cells = line.split()
        if not cells:
            continue
        if len(cells) != len(DIABETES_COLUMNS):
            raise DataError("%s:%d: %d fields; expected %d" % (x_path, line_no, len(cells), len(DIABETES_COLUMNS)))
        try:
            [float(c) for c in cells]
        except ValueError:
            raise DataError("%s:%d: expected numbers, got %r" % (x_path, line_no, line[:60]))
        x_rows.append(cells)  # written as the file has them
    for line_no, line in enumerate(read_text(y_path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            y_rows.append("%.10g" % float(line))
        except ValueError:
            raise DataError("%s:%d: expected a number, got %r" % (y_path, line_no, line[:60]))
    if len(x_rows) != 442 or len(y_rows) != 442:
        raise DataError("%s: %d rows and %s: %d; scikit-learn's diabetes has 442" % (x_path, len(x_rows), y_path, len(y_rows)))
    return x_rows, y_rows


def split(np, n):
    order = np.random.RandomState(SEED).permutation(n)
    n_test = int(round(n * TEST_FRACTION))
    return order[n_test:], order[:n_test]


def write_atomic(path, data):
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        raise DataError("%s: %s" % (path, e.strerror or e))


def npz_bytes(np, arrays):
    # np.savez stamps each member with the time; a fixed stamp keeps the file the same run to run.
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, array in arrays:
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(array), allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, member.getvalue())
    return out.getvalue()


def make_crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC32C_TABLE = make_crc32c_table()


def masked_crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC32C_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number, payload):
    # A length-delimited protobuf field (wire type 2): key, length, bytes.
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def example(image, label):
    # tensorflow.Example (common/data/proto/example.proto): features = 1; Features.feature = 1, a
    # map whose entries are key = 1, value = 2; Feature: bytes_list = 1, int64_list = 3; each list's
    # value = 1, packed for int64.
    image_feature = field(1, field(1, image))
    label_feature = field(3, field(1, varint(label)))
    features = field(1, field(1, b"image") + field(2, image_feature)) + field(1, field(1, b"label") + field(2, label_feature))
    return field(1, features)


def tfrecord_bytes(images, labels):
    out = bytearray()
    for image, label in zip(images, labels):
        record = example(bytes(image.astype("uint8").tobytes()), int(label))
        head = struct.pack("<Q", len(record))
        out += head + struct.pack("<I", masked_crc32c(head)) + record + struct.pack("<I", masked_crc32c(record))
    return bytes(out)


def make_dir(path):
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise DataError("%s: %s" % (path, e.strerror or e))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="data", help="the folder to write into (default: data)")
    parser.add_argument("--sklearn-data", default=None, help="scikit-learn's datasets/data folder (default: found)")
    args = parser.parse_args()
    np = import_numpy()
    data_dir = args.sklearn_data or sklearn_data_dir()

    # Every input is read and checked before anything is written.
    x, y = read_digits(np, os.path.join(data_dir, "digits.csv.gz"))
    features, target = read_diabetes(data_dir)

    train, test = split(np, len(y))
    npz_dir = os.path.join(args.out, "digits-npz")
    tfrecord_dir = os.path.join(args.out, "digits-tfrecord")
    make_dir(npz_dir)
    make_dir(tfrecord_dir)
    for name, rows in (("train", train), ("test", test)):
        path = os.path.join(npz_dir, name + ".npz")
        write_atomic(path, npz_bytes(np, [("x", x[rows].astype(np.float32)), ("y", y[rows])]))
        print("%s: %d examples, x float32 (%d, 8, 8), y int64" % (path, len(rows), len(rows)))
        path = os.path.join(tfrecord_dir, name + ".tfrecord")
        write_atomic(path, tfrecord_bytes(x[rows].reshape(len(rows), 64), y[rows]))
        print("%s: %d tf.train.Example records" % (path, len(rows)))

    train, test = split(np, len(target))
    diabetes_dir = os.path.join(args.out, "diabetes")
    make_dir(diabetes_dir)
    for name, rows in (("train", train), ("test", test)):
        path = os.path.join(diabetes_dir, name + ".csv")
        lines = [",".join(DIABETES_COLUMNS + ["target"])] + [",".join(features[i] + [target[i]]) for i in rows]
        write_atomic(path, ("\n".join(lines) + "\n").encode())
        print("%s: %d rows, 10 features and the target" % (path, len(rows)))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except DataError as e:
        print("make_example_data.py: %s" % e, file=sys.stderr)
        sys.exit(1)
