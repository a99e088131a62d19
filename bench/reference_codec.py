#!/usr/bin/python3
"""Side-by-side benchmark: dcr vs the reference sparse-refit codec on real checkpoint pairs.

The reference is the codec of NeMo RL's sparse refit as the issue describes it: the XOR of the
old and new bits of the whole model (tensors concatenated in name order), the sorted indices of
changed elements as gaps in the narrowest of u16/u32/u64, the XOR values of those elements, both
compressed with zstd level 1, serialized with torch.save. It is re-implemented here with torch +
zstandard (Debian's python3-torch, python3-zstandard) and timed on one thread. On the real
trajectories it lands 2-7 % *below* the reference figures of their README (2.15 vs 2.22-2.30 B
per change at 0.45 %), so ratios against it are conservative. (Per-tensor gaps and payloads cost
far more: 4-5 B per change at 0.45 %.)

For every pair it prints changed elements, wire bytes per changed element for the reference,
dcr plain and dcr ctx, the byte ratios dcr/reference, and one-thread encode throughput of both
(dense bytes per second) with the ratio. Both are timed with their inputs in memory: the
reference here after reading the files, dcr by `dcr bench codec --threads 1` (diff+encode). The
two are timed in alternating rounds (the reference's best of --repeat, then dcr's), so that a
machine whose speed drifts (by 1.8x within minutes on shared VMs) slows both alike; the speed
ratio is given from the best times over all rounds ('x') and as the median of the rounds' own
ratios ('x med'). With --check it exits 1 unless both byte-ratio targets hold on every pair
(bytes are deterministic; timings are reported only).

Usage: bench/reference_codec.py --dcr build/dcr [--check] [--plain-target 0.80] [--ctx-target 0.60]
       [--rounds 5] [--repeat 3] [--json] A.safetensors B.safetensors [C.safetensors ...]
       (consecutive pairs)
"""
import argparse, io, json, os, statistics, subprocess, sys, time

import numpy as np
import torch
import zstandard


def load_bits(path):
    """Tensors of a safetensors file as integer views of their bits, by name."""
    with open(path, 'rb') as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], 'little')
    header = json.loads(raw[8:8 + n])
    widths = {'BF16': np.int16, 'F16': np.int16, 'F32': np.int32, 'F64': np.int64, 'I8': np.int8, 'U8': np.int8,
              'I16': np.int16, 'I32': np.int32, 'I64': np.int64, 'BOOL': np.int8, 'F8_E4M3': np.int8, 'F8_E5M2': np.int8}
    out = {}
    for name, meta in sorted(header.items()):
        if name == '__metadata__':
            continue
        b, e = meta['data_offsets']
        out[name] = torch.from_numpy(np.frombuffer(raw, dtype=widths[meta['dtype']], count=(e - b) // np.dtype(widths[meta['dtype']]).itemsize, offset=8 + n + b).copy())
    return out


def reference_encode(old, new):
    cctx = zstandard.ZstdCompressor(level=1)
    x = torch.bitwise_xor(torch.cat([old[k] for k in old]), torch.cat([new[k] for k in new]))
    idx = torch.nonzero(x).flatten()
    gaps = torch.diff(idx, prepend=torch.zeros(1, dtype=idx.dtype)) if idx.numel() else idx
    top = int(gaps.max()) if idx.numel() else 0
    gap_dtype = np.uint16 if top < 2**16 else np.uint32 if top < 2**32 else np.uint64
    as_tensor = lambda b: torch.frombuffer(bytearray(b), dtype=torch.uint8)
    payload = {'gaps': as_tensor(cctx.compress(gaps.numpy().astype(gap_dtype).tobytes())),
               'gap_dtype': np.dtype(gap_dtype).name,
               'values': as_tensor(cctx.compress(x[idx].numpy().tobytes())), 'count': int(idx.numel())}
    buf = io.BytesIO()
    torch.save(payload, buf)
    return buf.getvalue()


def dcr_bench(dcr, a, b, repeat):
    """dcr's plain and ctx rows for the pair from `dcr bench codec` on one thread: wire bytes and
    diff+encode throughput with both checkpoints in memory (best of `repeat`), as the reference
    is timed here (its inputs are read before the clock starts)."""
    r = subprocess.run([dcr, 'bench', 'codec', '--threads', '1', '--repeat', str(repeat), '--json', a, b],
                       check=True, capture_output=True, text=True)
    return {row['codec']: row for row in json.loads(r.stdout)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--dcr', required=True)
    ap.add_argument('--check', action='store_true')
    ap.add_argument('--plain-target', type=float, default=0.80)
    ap.add_argument('--ctx-target', type=float, default=0.60)
    ap.add_argument('--repeat', type=int, default=3, help='timing repetitions per round (best is kept)')
    ap.add_argument('--rounds', type=int, default=5, help='alternating rounds of reference and dcr timings')
    ap.add_argument('--json', action='store_true')
    ap.add_argument('files', nargs='+')
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows, ok = [], True
    for a, b in zip(args.files, args.files[1:]):
        old, new = load_bits(a), load_bits(b)
        dense = sum(t.numel() * t.element_size() for t in new.values())
        best, ref = float('inf'), None
        best_dcr = {}  # codec -> fastest encode GB/s over the rounds
        round_ratios = {'plain': [], 'ctx': []}
        for _ in range(max(1, args.rounds)):
            round_best = float('inf')
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                ref = reference_encode(old, new)
                round_best = min(round_best, time.perf_counter() - t0)
            best = min(best, round_best)
            rows_dcr = dcr_bench(args.dcr, a, b, args.repeat)
            for codec in ('plain', 'ctx'):
                gbps = rows_dcr[codec]['encode_GBps']
                round_ratios[codec].append(gbps / (dense / round_best / 1e9))
                if codec not in best_dcr or gbps > best_dcr[codec]['encode_GBps']:
                    best_dcr[codec] = rows_dcr[codec]
        plain, ctx = best_dcr['plain'], best_dcr['ctx']
        n = plain['changed_elements']
        if n == 0:
            continue
        row = {'pair': f'{os.path.basename(a)} -> {os.path.basename(b)}', 'changed': n,
               'density': n / plain['total_elements'],
               'ref_B_per_change': len(ref) / n, 'plain_B_per_change': plain['wire_bytes'] / n,
               'ctx_B_per_change': ctx['wire_bytes'] / n,
               'plain_ratio': plain['wire_bytes'] / len(ref), 'ctx_ratio': ctx['wire_bytes'] / len(ref),
               'ref_encode_GBps': dense / best / 1e9, 'plain_encode_GBps': plain['encode_GBps'],
               'ctx_encode_GBps': ctx['encode_GBps']}
        row['plain_speedup'] = row['plain_encode_GBps'] / row['ref_encode_GBps']
        row['ctx_speedup'] = row['ctx_encode_GBps'] / row['ref_encode_GBps']
        row['plain_speedup_median'] = statistics.median(round_ratios['plain'])
        row['ctx_speedup_median'] = statistics.median(round_ratios['ctx'])
        ok &= row['plain_ratio'] <= args.plain_target and row['ctx_ratio'] <= args.ctx_target
        rows.append(row)
    if args.json:
        print(json.dumps(rows))
    else:
        print(f"{'pair':44} {'chg %':>6} {'ref B/c':>8} {'plain':>6} {'ctx':>6} {'plain/ref':>9} {'ctx/ref':>8} "
              f"{'ref GB/s':>8} {'plain x':>7} {'ctx x':>6} {'plain x med':>11} {'ctx x med':>9}")
        for r in rows:
            print(f"{r['pair']:44} {100 * r['density']:6.3f} {r['ref_B_per_change']:8.3f} {r['plain_B_per_change']:6.3f} "
                  f"{r['ctx_B_per_change']:6.3f} {r['plain_ratio']:9.3f} {r['ctx_ratio']:8.3f} {r['ref_encode_GBps']:8.3f} "
                  f"{r['plain_speedup']:7.2f} {r['ctx_speedup']:6.2f} {r['plain_speedup_median']:11.2f} "
                  f"{r['ctx_speedup_median']:9.2f}")
        print("B/c = wire bytes per changed element; ratios = dcr wire bytes / reference wire bytes; "
              "'x' = dcr one-thread diff+encode throughput / reference's, best times of alternating rounds in this "
              "run; 'x med' = median of the rounds' own ratios")
    if args.check and not ok:
        print(f"FAIL: a byte ratio exceeds plain {args.plain_target} / ctx {args.ctx_target}", file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
