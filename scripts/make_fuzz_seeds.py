#!/usr/bin/env python3
"""Writes the generated seed inputs of tests/fuzz/corpus/ (committed; rerun
after changing this script). Standard library only.

  python3 scripts/make_fuzz_seeds.py

symbol_json/ and params/ also hold real MXNet exports copied from
tests/data/mxnet-models (not written here); onnx/ holds models copied from
tests/data/onnx (PyTorch exports) and from Debian's libonnx-testdata
(node/test_conv_with_strides_padding, node/test_reshape_negative_dim,
node/test_convtranspose_1d, node/test_maxpool_2d_uint8,
node/test_resize_upsample_scales_linear).
"""
import gzip
import hashlib
import pathlib
import re
import struct

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "fuzz" / "corpus"


def write(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def npy(version, descr, shape, payload):
    shape_text = "(" + "".join(f"{d}, " if len(shape) == 1 else f"{d}, " for d in shape).rstrip(" ")
    if len(shape) > 1:
        shape_text = shape_text.rstrip(",")
    shape_text += ")"
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}"
    prefix = 10 if version == 1 else 12
    pad = 64 - (prefix + len(header) + 1) % 64
    header = (header + " " * pad + "\n").encode()
    length = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + length + header + payload


def params(arrays):
    """MXNet's NDArray list format (V2 records), as `nd.save` writes it."""
    type_flags = {"f4": (0, 4), "f8": (1, 8), "f2": (2, 2), "u1": (3, 1), "i4": (4, 4), "i1": (5, 1), "i8": (6, 8)}
    out = struct.pack("<QQQ", 0x112, 0, len(arrays))
    for _, kind, shape in arrays:
        flag, size = type_flags[kind]
        count = 1
        for d in shape:
            count *= d
        out += struct.pack("<Iii", 0xF993FAC9, 0, len(shape)) + struct.pack(f"<{len(shape)}q", *shape)
        out += struct.pack("<iii", 1, 0, flag) + bytes((i * 37) % 251 for i in range(count * size))
    out += struct.pack("<Q", len(arrays))
    for name, _, _ in arrays:
        out += struct.pack("<Q", len(name)) + name.encode()
    return out


def idx_pair(count, compress):
    images = struct.pack(">IIII", 2051, count, 28, 28) + bytes((i * 7) % 256 for i in range(count * 784))
    labels = struct.pack(">II", 2049, count) + bytes(i % 10 for i in range(count))
    if compress:
        images, labels = gzip.compress(images, mtime=0), gzip.compress(labels, mtime=0)
    # The idx target's input: u32 length of the images file, then both files.
    return struct.pack("<I", len(images)) + images + labels


def main():
    write("npy", "f4_2x3_v1.npy", npy(1, "<f4", (2, 3), struct.pack("<6f", *range(6))))
    write("npy", "i8_4_v2.npy", npy(2, "<i8", (4,), struct.pack("<4q", -1, 0, 1, 1 << 40)))
    write("npy", "b1_scalar_v3.npy", npy(3, "|b1", (), b"\x01"))
    write("npy", "u1_empty_v1.npy", npy(1, "|u1", (0, 3), b""))
    write("npy", "f2_2x2x2_v1.npy", npy(1, "<f2", (2, 2, 2), bytes(range(16))))

    write("params", "two_arrays.params", params([("arg:w", "f4", (2, 3)), ("aux:mean", "i8", (3,))]))
    write("params", "scalar_and_empty.params", params([("a", "f8", ()), ("b", "u1", (0, 4))]))

    write("idx", "two_samples.gz.idx", idx_pair(2, True))
    write("idx", "one_sample_plain.idx", idx_pair(1, False))

    # IR text: every Before/After graph of the pass tests.
    seen = set()
    for source in sorted((ROOT / "tests" / "passes").glob("*_test.cc")):
        for text in re.findall(r'R"IR\((graph \{.*?\n\}\n?)\)IR"', source.read_text(), re.S):
            digest = hashlib.sha1(text.encode()).hexdigest()[:12]
            if digest not in seen:
                seen.add(digest)
                write("ir_text", f"{source.stem}_{digest}.ir", text.encode())


if __name__ == "__main__":
    main()
