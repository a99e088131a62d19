#!/usr/bin/env python3
"""Independent safetensors checks for the CLI integration tests (standard library only).

  st_tool.py count A B              -> "CHANGED TOTAL BYTES": elements whose bytes differ, all
                                       elements, tensor bytes of B
  st_tool.py first-diff A B         -> "TENSOR ELEMENT": first difference in name order
  st_tool.py poke PATH TENSOR ELEM  -> XORs 0x01 into the low byte of one element, in place
  st_tool.py json [KEY...]          -> parses stdin as exactly one JSON object; prints each KEY's value

A and B are .safetensors files or sharded directories (model.safetensors.index.json). Nothing
here uses dcr's code: it is the yardstick dcr is measured against.
"""
import json
import os
import struct
import sys

WIDTH = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "I16": 2, "F16": 2,
         "BF16": 2, "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8}
FORMAT = {1: "B", 2: "H", 4: "I", 8: "Q"}


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header, 8 + n


def tensors(path):
    """name -> (file, absolute byte offset, byte length, dtype, shape)."""
    if os.path.isdir(path):
        with open(os.path.join(path, "model.safetensors.index.json")) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        files = [os.path.join(path, x) for x in files]
    else:
        files = [path]
    out = {}
    for file in files:
        header, start = read_header(file)
        for name, t in header.items():
            b, e = t["data_offsets"]
            out[name] = (file, start + b, e - b, t["dtype"], t["shape"])
    return out


def tensor_bytes(entry):
    file, off, n, _, _ = entry
    with open(file, "rb") as f:
        f.seek(off)
        data = f.read(n)
    assert len(data) == n, f"{file}: short read"
    return data


def xor_view(a, b, width):
    """The element-wise XOR of two byte strings as a list of ints of `width` bytes."""
    if not a:
        return []
    x = (int.from_bytes(a, "little") ^ int.from_bytes(b, "little")).to_bytes(len(a), "little")
    return memoryview(x).cast(FORMAT[width]).tolist()


def catalogs(pa, pb):
    ta, tb = tensors(pa), tensors(pb)
    assert sorted(ta) == sorted(tb), "tensor names differ"
    for name in ta:
        assert ta[name][3:] == tb[name][3:], f"{name}: dtype/shape differ"
    return ta, tb


def count(pa, pb):
    ta, tb = catalogs(pa, pb)
    changed = total = dense = 0
    for name in sorted(ta):
        dense += tb[name][2]
        w = WIDTH[ta[name][3]]
        x = xor_view(tensor_bytes(ta[name]), tensor_bytes(tb[name]), w)
        changed += len(x) - x.count(0)
        total += len(x)
    print(changed, total, dense)


def first_diff(pa, pb):
    ta, tb = catalogs(pa, pb)
    for name in sorted(ta):
        w = WIDTH[ta[name][3]]
        x = xor_view(tensor_bytes(ta[name]), tensor_bytes(tb[name]), w)
        for i, v in enumerate(x):
            if v:
                print(name, i)
                return
    print("IDENTICAL")


def poke(path, name, element):
    file, off, n, dtype, _ = tensors(path)[name]
    w = WIDTH[dtype]
    assert (element + 1) * w <= n, "element out of range"
    with open(file, "r+b") as f:
        f.seek(off + element * w)
        b = f.read(1)
        f.seek(off + element * w)
        f.write(bytes([b[0] ^ 1]))


def json_stdin(keys):
    text = sys.stdin.read()
    obj = json.loads(text)  # raises on anything but exactly one JSON value
    assert isinstance(obj, dict), "not a JSON object"
    assert text.strip().count("\n") == 0, "more than one line of output"
    for k in keys:
        v = obj
        for part in k.split("."):
            v = v[int(part)] if isinstance(v, list) else v[part]
        print(json.dumps(v) if isinstance(v, (dict, list)) else v)


def main(argv):
    cmd, args = argv[1], argv[2:]
    if cmd == "count":
        count(*args)
    elif cmd == "first-diff":
        first_diff(*args)
    elif cmd == "poke":
        poke(args[0], args[1], int(args[2]))
    elif cmd == "json":
        json_stdin(args)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
