#!/usr/bin/env python3
"""Writes the seed corpora of the binary harnesses (plan_fuzz, kernels_fuzz, runtime_fuzz) into
tests/fuzz/corpus/<harness>/seed-*.bin, in the byte encoding of tests/fuzz/fuzz_support.hpp.
The json_fuzz seeds are plain JSON files kept by hand. Regression inputs (crash-*, regress-*)
found by fuzzing are kept beside the seeds and never touched here.

Each function below mirrors the decoding order of its harness; an input that drifts from it is
still a valid input, only a less meaningful seed. Run: python3 tests/fuzz/make_corpus.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


class enc:
    """Writes what fuzz_support.hpp's reader reads."""

    def __init__(self):
        self.b = bytearray()

    def byte(self, v):
        self.b.append(v & 0xFF)
        return self

    def u16(self, v):
        self.b += struct.pack("<H", v & 0xFFFF)
        return self

    def small(self, v, lo):  # reader::small(lo, hi) with lo <= v <= hi
        return self.u16(v - lo)

    def value(self, v, lo):  # reader::value(lo, hi, limit), "small" mode
        return self.byte(0).small(v, lo)

    def raw(self, v):  # reader::value, raw int64 mode
        self.byte(0xC0)
        self.b += struct.pack("<q", v)
        return self

    def edge(self, index):  # reader::value, edge mode: lo-1, lo, hi, hi+1, limit, limit+1, ...
        mode = next(m for m in range(0x80, 0xC0) if m % 13 == index)
        return self.byte(mode)


def write(harness, name, data):
    folder = os.path.join(HERE, "corpus", harness)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "seed-" + name + ".bin"), "wb") as f:
        f.write(bytes(data))


# ---- plan_fuzz: max_batch, topk, num_steps, page_size, max_context_len, pool_rows, kv_slots,
# options (1 checked, 2 round_graphs, 4 buckets, 8 append max_batch, 16 sparse, 32 size count).
def plan_seed(max_batch, topk, steps, ps, mcl, pool_rows, kv, options=0, buckets=None,
              sparse=None):
    e = enc()
    for v in (max_batch, topk, steps, ps, mcl, pool_rows):
        e.raw(v)
    e.raw(kv)
    e.byte(options)
    if options & 4:
        e.small(len(buckets), 1)
        e.raw(buckets[0])
        for a, b in zip(buckets, buckets[1:]):
            assert 1 <= b - a <= 8
            e.byte(b - a - 1)
    if options & 16:
        heads, max_keys, vsizes, ssizes = sparse
        e.raw(heads).raw(max_keys)
        if options & 32:
            e.small(len(vsizes), 0)
        for v, s in zip(vsizes, ssizes):
            e.raw(v).raw(s)
    return e.b


def plan_seeds():
    write("plan_fuzz", "readme-default", plan_seed(256, 8, 5, 16, 4096, 257, 1 << 24))
    write("plan_fuzz", "run-default", plan_seed(32, 4, 5, 16, 1024, 33, 1 << 24, options=3))
    write("plan_fuzz", "small", plan_seed(8, 2, 3, 4, 64, 9, 4096))
    write("plan_fuzz", "buckets", plan_seed(16, 2, 2, 1, 100, 17, 1 << 20, options=4 | 8,
                                            buckets=[1, 2, 4, 8, 12]))
    write("plan_fuzz", "bad-buckets", plan_seed(16, 2, 2, 1, 100, 17, 1 << 20, options=4,
                                                buckets=[2, 3, 3 + 8, 12]))
    write("plan_fuzz", "sparse", plan_seed(4, 1, 1, 16, 128, 5, 4096, options=16,
                                           sparse=(4, 128, [4, 4, 4, 4], [4, 4, 4, 4])))
    write("plan_fuzz", "sparse-mismatch",
          plan_seed(4, 1, 1, 16, 128, 5, 4096, options=16 | 32,
                    sparse=(3, 48, [4, 0], [0, 9])))
    write("plan_fuzz", "limits", plan_seed(1 << 20, 16, 4, 1 << 20, 1 << 28, 1 << 24,
                                           (1 << 31) * (1 << 20) - 1))
    write("plan_fuzz", "arena-limit", plan_seed(1 << 20, 16, 1024, 1, 1 << 28, 2, 1 << 30))
    write("plan_fuzz", "kv-page-limit", plan_seed(8, 1, 1, 1, 64, 9, (1 << 31) + 1))
    write("plan_fuzz", "topk-zero", plan_seed(8, 0, 1, 1, 64, 9, 64))
    # (pool_rows -5: see tests/fuzz/known_bugs/plan_fuzz/plan-command-negative-pool-rows.bin)


# ---- kernels_fuzz: select byte = kernel | path << 2 (kernel: 0 expand, 1 prefix, 2 sparse,
# 3 fallback; path: 0 eager, 1 deferred, 2 graph, 3 *_host).
def expand_seed(path, batch, topk, ps, d, stride, slots_read, capacity, lpl, rows,
                slot_limit=None, layout=None):
    e = enc().byte(0 | path << 2)
    e.value(batch, 1).value(topk, 1).value(ps, 1).value(d, 1).value(stride, 1)
    e.value(slots_read, 1).value(capacity, 1)
    e.byte(0)  # page_table_stride = capacity
    if slot_limit is None:
        e.byte(0)
    else:
        e.byte(1).raw(slot_limit)
    e.byte(0 if layout is None else 0x80 | layout)
    e.byte(0)  # no null pointers
    for v in lpl:
        e.byte(v)
    for first_page, consecutive in rows:  # engine-like rows: a fresh page, then the next ones
        e.byte(1 if consecutive else 0).u16(first_page)
        if not consecutive:
            raise ValueError("only consecutive-page rows are written by this generator")
    return e.b


def prefix_seed(path, batch, topk, ps, pool_rows, stride, pool_seeds, requests, bad=None):
    e = enc().byte(1 | path << 2)
    e.value(batch, 1).value(topk, 1).value(ps, 1).value(pool_rows, 1).value(stride, 1)
    e.byte(0)  # capacity = ceil(stride / ps)
    e.byte(0)  # page_table_stride = capacity
    e.byte(0)  # default slot_limit
    e.byte(0)  # no null pointers
    for i, seed in enumerate(pool_seeds):
        e.u16(seed)
        if bad and i in bad:
            pos, value = bad[i]
            e.byte(0xC0).byte(pos).raw(value)
        else:
            e.byte(0)
    for pool, seq in requests:
        e.value(pool, 0).value(seq, 0)
    return e.b


def sparse_seed(path, kind, k, heads=4, size=4, counts=(0, 0), vin=(), sin=()):
    e = enc().byte(2 | path << 2)
    e.value(heads, 1).value(size, 0).value(size, 0).value(size, 1).value(size, 1)
    e.byte(kind).value(48, 1)  # chunk_len 48
    e.byte(k)  # prev = 48 * k
    e.byte(47)  # end = prev + 48
    e.byte(0)  # chunk_q_len = end - prev
    e.byte(0)  # no null pointers
    for _ in range(heads):
        e.value(size, 0).value(size, 0)
        e.byte(counts[0] | counts[1] << 4)
        for i in range(size):
            e.value(vin[i] if i < len(vin) else 0, 0)
        for i in range(size):
            e.value(sin[i] if i < len(sin) else 0, 0)
    return e.b


def kernels_seeds():
    # docs/metadata.md section 3 test vectors, case A and B (runtime-style slice), every path.
    for path in range(4):
        write("kernels_fuzz", f"expand-case-a-path{path}",
              expand_seed(path, 1, 2, 4, 1, 2, 2, 2, [3], [(5, True), (7, True)]))
    write("kernels_fuzz", "expand-case-b-sliced",
          expand_seed(0, 1, 2, 4, 5, 6, 5, 6, [3], [(6, True), (8, True)]))
    # The worked crash: a 5-slot row read into the 2-wide step-0 table (capacity violation).
    write("kernels_fuzz", "expand-worked-crash",
          expand_seed(0, 1, 1, 2, 1, 5, 5, 2, [1], [(0, True)]))
    write("kernels_fuzz", "expand-layout-checked",
          expand_seed(2, 2, 2, 4, 3, 4, 3, 4, [1, 3], [(1, True), (3, True), (5, True), (9, True)],
                      slot_limit=1 << 12, layout=2))
    # Section 2 example: ps 4, max_context_len 16, seq_len 10, and a padded request.
    for path in range(4):
        write("kernels_fuzz", f"prefix-path{path}",
              prefix_seed(path, 2, 2, 4, 3, 16, [0, 17, 99], [(1, 10), (0, 1)]))
    write("kernels_fuzz", "prefix-bad-slot",
          prefix_seed(0, 2, 1, 2, 2, 12, [5, 6], [(1, 12), (0, 3)], bad={1: (4, -7)}))
    # Section 6 reference configuration: chunk_len 48, 4 heads, sizes 4; intra/succ/inter stages.
    write("kernels_fuzz", "sparse-intra-fallback", sparse_seed(0, 0, 0))
    write("kernels_fuzz", "sparse-succ", sparse_seed(1, 1, 1, counts=(3, 2), vin=(1, 50, 60),
                                                     sin=(40, 90)))
    write("kernels_fuzz", "sparse-inter-host", sparse_seed(3, 2, 2, counts=(4, 4),
                                                           vin=(0, 10, 47, 100),
                                                           sin=(5, 60, 100, 127)))
    write("kernels_fuzz", "sparse-graph-overflow", sparse_seed(2, 0, 2, counts=(4, 4),
                                                               vin=(96, 97, 98, 99),
                                                               sin=(96, 100, 110, 120)))
    # Section 6 fallback table, and a capped one.
    for seq, count, cap in ((48, 4, 4), (32, 4, 4), (10, 4, 4), (3, 4, 4), (10, 6, 6), (7, 3, 3),
                            (0, 4, 4), (5, 0, 1), (50, 5, 4)):
        e = enc().byte(3).value(seq, 0).value(count, 0).value(cap, 1).byte(0)
        write("kernels_fuzz", f"fallback-{seq}-{count}-{cap}", e.b)


# ---- runtime_fuzz: config, executor, req_to_token, then operations ((op & 0x7f) % 14: 0 stage,
# 1 stage_device, 2 replay, 3 run_round, 4 run_eager, 5 capture, 6 capture with a failing
# forward, 7 read_guards, 8 setup_round, 9 step_metadata, 10 stage_round, 11 run_round_on_device,
# 12 a composed graph, 13 a composed device-depth round; op & 0x80 on a deferred executor: no arena snapshot, so work stays queued).
# The switch is in runtime_fuzz.cpp (world::run_ops).
PAGE_SIZES = [1, 2, 4, 8, 16, 3, 5, 7]


class runtime_seed:
    def __init__(self, max_batch, topk, steps, ps, mcl, pool_rows, kv, options=0,
                 deferred=False, modes=0):
        self.cfg = dict(max_batch=max_batch, topk=topk, steps=steps, ps=ps, mcl=mcl,
                        pool_rows=pool_rows, kv=kv)
        e = self.e = enc()
        e.small(max_batch, 1).small(topk, 1).small(steps, 1)
        e.byte(PAGE_SIZES.index(ps))
        e.small(mcl, 1).small(pool_rows, 1)
        e.byte(0).small(kv, 1)
        e.byte(options)
        assert not options & (4 | 16)
        e.byte(modes)  # 1 device_steps, 2 device_depth
        e.byte(1 if deferred else 0)
        for r in range(1, pool_rows):
            e.u16(1000 + 77 * r)
        e.byte(0)  # no bad req_to_token slots

    def stage(self, requests, wide=False, op=0):
        # requests: (pool_row, seq_len); branch pages: fresh ones from the generator.
        c, e = self.cfg, self.e
        e.byte(op).value(len(requests), 1).byte(1 if wide else 0).byte(0)
        pages = max(2, c["kv"] // c["ps"])
        for pool, seq in requests:
            if c["pool_rows"] > 1:
                e.small(pool, 1)
            e.small(seq, 1)
            lpl = seq % c["ps"]
            for t in range(c["topk"]):
                e.u16(3 + 5 * t)
                for j in range(1, c["steps"]):
                    if (lpl + j) % c["ps"] == 0:
                        e.u16(11 + 7 * t + j)
        assert pages > 12
        return self

    def stage_device(self, batch, pool_rows_values, seqs, types=0, op=1):
        e = self.e
        e.byte(op).value(batch, 1).byte(types)
        for _ in range(batch * self.cfg["topk"] * self.cfg["steps"]):
            e.byte(0).u16(40 + len(e.b) % 50)
        for v in pool_rows_values:
            e.value(v, 0)
        for v in seqs:
            e.value(v, 1)
        return self

    def op(self, code, *values, lo=0):
        # replay / run_eager / step choices are value32(0, ...); run_round's depth value32(1, ...).
        self.e.byte(code)
        for v in values:
            self.e.value(v, 1 if (code & 0x7F) % 14 == 3 else lo)
        return self

    def byte(self, v):
        self.e.byte(v)
        return self

    def value(self, v, lo):
        self.e.value(v, lo)
        return self

    def bytes(self):
        return self.e.b


def runtime_seeds():
    s = runtime_seed(4, 2, 3, 4, 32, 5, 4096)
    s.stage([(1, 10), (2, 17), (3, 4)]).op(5).op(3, 3).op(7)
    write("runtime_fuzz", "stage-capture-round", s.bytes())

    s = runtime_seed(4, 2, 3, 4, 32, 5, 4096, options=1 | 2, deferred=True)
    s.op(5).stage([(1, 9)], wide=True).op(3, 3).stage([(2, 31), (4, 1)], op=0x80).op(0x82, 0)
    s.op(0x82, 1).op(4, 2).op(7)
    write("runtime_fuzz", "checked-round-graphs-deferred", s.bytes())

    s = runtime_seed(3, 1, 2, 1, 16, 4, 4096)
    s.stage([(1, 5), (2, 16)]).op(4, 0).op(4, 1).op(2, 0).op(5).op(2, 1).op(2, 0)
    write("runtime_fuzz", "eager-then-replay-order", s.bytes())

    s = runtime_seed(4, 2, 2, 2, 24, 4, 4096)
    s.op(5).stage_device(3, [1, 2, 3], [7, 24, 1]).op(3, 2)
    s.stage_device(2, [1, 9], [5, 99], types=3).op(3, 2).op(7)
    write("runtime_fuzz", "stage-device", s.bytes())

    s = runtime_seed(8, 1, 4, 8, 40, 3, 4096)
    s.op(2, 0).op(5).op(2, 0).op(6).byte(0).stage([(1, 33), (2, 8)]).op(6).byte(1).op(3, 4)
    write("runtime_fuzz", "misuse-and-failing-forward", s.bytes())

    s = runtime_seed(4, 2, 3, 4, 32, 5, 4096)
    s.stage([(1, 12), (4, 3)]).op(8).byte(1).byte(0).op(9).byte(1).value(2, 0)
    s.stage_device(2, [1, 3], [8, 9], op=10)
    s.op(12).byte(0).value(1, 0).op(7)
    write("runtime_fuzz", "composable-ops", s.bytes())

    # device_depth: the runtime's one-launch round, then the harness's own step body wrapped by
    # capture_device_depth_round (op 13, bucket index 2: bucket 3 of 1..4).
    s = runtime_seed(4, 2, 3, 4, 32, 5, 4096, modes=1 | 2)
    s.op(5).stage([(1, 10), (2, 17), (3, 4)]).op(11)
    s.stage([(4, 9), (1, 30), (2, 2)]).op(13).byte(2).op(7)
    write("runtime_fuzz", "device-depth-rounds", s.bytes())


# ---- kv_indices_fuzz: select (path | int64 << 2 | device counter << 3), page_size, entry mode
# byte (< 0x80: 1,
# < 0xf0: page_size), topk, num_steps, batch, pool_rows, width, window flag [window, sink],
# max_seq_len, first_step, step_count, capacity, growth, stride byte (< 0x80: packed), indptr byte
# (< 0xf0: rows + 1), slot-limit flag, [the device step counter], then (seq_len, req_pool_index)
# per request, the table generator's u16 and a bad-entry byte (< 0xc0: none).
def kv_seed(path, int64, ps, paged, topk, steps, pool_rows, width, max_seq, first, count,
            capacity, growth, requests, window=None, counter=None):
    select = path | (4 if int64 else 0) | (8 if counter is not None else 0)
    e = enc().byte(select).value(ps, 1).byte(0x90 if paged else 0)
    e.value(topk, 1).value(steps, 1).value(len(requests), 1).value(pool_rows, 1).value(width, 1)
    if window:
        e.byte(1).value(window[0], 0).value(window[1], 0)
    else:
        e.byte(0)
    e.value(max_seq, 0).value(first, 0).value(count, 1).value(capacity, 0).value(growth, 0)
    e.byte(0).byte(0).byte(0)
    if counter == "past":  # reader::value's edge hi + 1: first_step + step_count
        e.edge(3)
    elif counter is not None:
        e.value(counter, first)
    for seq, pool in requests:
        e.value(seq, 0).value(pool, 0)
    return e.u16(1234).byte(0).b


def kv_indices_seeds():
    for path in range(4):  # A1 of docs/csr.md, exact capacities C_s = 4 * (3 + s + 1)
        write("kv_indices_fuzz", f"a1-path{path}",
              kv_seed(path, path % 2, 1, False, 2, 3, 3, 9, 3, 0, 3, 16, 4, [(3, 1), (2, 2)]))
    write("kv_indices_fuzz", "a2-paged",
          kv_seed(0, False, 4, True, 2, 2, 1, 6, 6, 0, 2, 16, 2, [(6, 0)]))
    write("kv_indices_fuzz", "window",
          kv_seed(2, True, 1, False, 1, 2, 1, 12, 10, 0, 2, 7, 1, [(10, 0)], window=(4, 2)))
    write("kv_indices_fuzz", "sglang-27338-short",
          kv_seed(1, False, 1, False, 8, 3, 3, 36, 16, 0, 3, 32, 0, [(12, 1), (9, 2)]))
    write("kv_indices_fuzz", "sub-range",
          kv_seed(3, False, 2, False, 3, 4, 2, 40, 9, 1, 2, 20, 6, [(5, 1), (1, 0), (9, 1)]))
    for path in range(4):  # A1 under a device step counter at step 2 (the plan's C_s)
        write("kv_indices_fuzz", f"a1-counter-path{path}",
              kv_seed(path, path % 2, 1, False, 2, 3, 3, 9, 3, 0, 3, 16, 4, [(3, 1), (2, 2)],
                      counter=2))
    write("kv_indices_fuzz", "counter-spent",  # a counter one past the launch: nothing written
          kv_seed(2, False, 4, True, 2, 2, 1, 6, 6, 0, 2, 16, 2, [(6, 0)], counter="past"))


# ---- verify_fuzz: select (path | bound-only mask << 2), page_size, draft_tokens, batch,
# real_batch, pool_rows, width, max_seq_len, prefix_capacity, prefix stride byte (< 0xf0:
# capacity + byte % 3), expand stride byte (< 0xf0: D + byte % 2), kv_indices_capacity,
# packed_mask_capacity, slot-limit flag, then (seq_len, req_pool_index) per request, the table
# generator's u16, a bad-entry byte (< 0xc0: none), the mask length byte (< 0xe0: exact, < 0xf0:
# D * D per real request short, else + 1), the mask density u16 (of 65536) and its generator u16.
def verify_seed(path, ps, d, real, pool_rows, width, max_seq, prefix_cap, kv_cap, packed_cap,
                requests, bound=False, length_mode=0, density=40000):
    e = enc().byte(path | (4 if bound else 0)).value(ps, 1).value(d, 1)
    e.value(len(requests), 1).value(real, 1).value(pool_rows, 1).value(width, 1)
    e.value(max_seq, 1).value(prefix_cap, 0).byte(0).byte(0).value(kv_cap, 0)
    e.value(packed_cap, 0).byte(0)
    for seq, pool in requests:
        e.value(seq, 1).value(pool, 0)
    return e.u16(4321).byte(0).byte(length_mode).u16(density).u16(77).b


def verify_seeds():
    for path in range(4):  # B1's shape: ps 1, D 4, seq_len 5, exact capacities
        write("verify_fuzz", f"b1-path{path}", verify_seed(path, 1, 4, 1, 1, 9, 5, 5, 9, 5,
                                                            [(5, 0)]))
    write("verify_fuzz", "b2-ps4", verify_seed(0, 4, 3, 2, 3, 12, 6, 3, 15, 7, [(6, 1), (3, 2)]))
    write("verify_fuzz", "b3-padded", verify_seed(3, 1, 3, 1, 2, 8, 4, 4, 11, 5, [(4, 1), (1, 0)]))
    write("verify_fuzz", "double-count",
          verify_seed(1, 1, 5, 3, 1, 40, 20, 20, 60, 40, [(12, 0), (8, 0), (17, 0)],
                      length_mode=0xe0))
    write("verify_fuzz", "short-capacities",
          verify_seed(2, 16, 6, 2, 2, 64, 40, 1, 20, 9, [(33, 1), (40, 0)]))
    write("verify_fuzz", "static-mask-buffer",
          verify_seed(0, 4, 8, 2, 3, 30, 20, 5, 200, 100, [(9, 1), (20, 2), (1, 0)], bound=True,
                      length_mode=17))


# ---- extend_fuzz: select (path | device word << 2 | layouts << 3), drop byte (>= 0xf0: field
# drop % 15 null), page_size, W, batch, real_batch, pool_rows, width, max_seq_len, slot-limit flag
# (1: then the limit), page-capacity mode (% 4: exact, -1, +1, small u16; >= 0xf0: a value),
# stride byte (< 0xf0: capacity + byte % 3), prefix and full capacity modes, then (seq_len,
# accept_len, req_pool_index) per request, the table generator's u16, a bad-entry byte (< 0xc0:
# none) and, with the device word, its value.
def extend_seed(path, ps, w, real, pool_rows, width, max_seq, requests, layouts=15, word=None,
                caps=(0, 0, 0), slot_limit=None, bad_entry=None, drop=0):
    e = enc().byte(path | (4 if word is not None else 0) | (layouts << 3)).byte(drop)
    e.value(ps, 1).value(w, 1).value(len(requests), 0).value(real, 0).value(pool_rows, 1)
    e.value(width, 1).value(max_seq, 0)
    if slot_limit is None:
        e.byte(0)
    else:
        e.byte(1).value(slot_limit, 1)
    e.byte(caps[0]).byte(0).byte(caps[1]).byte(caps[2])
    for seq, accept, pool in requests:  # out of range: raw; accept_len 0: the lo - 1 edge
        e.raw(seq) if seq > max_seq else e.value(seq, 0)
        e.edge(0) if accept == 0 else e.value(accept, 1)
        e.value(pool, 0)
    e.u16(4321)
    if bad_entry is None:
        e.byte(0)
    else:
        e.byte(0xC0).u16(bad_entry).raw(-1)
    if word is not None:
        e.value(word, 0)
    return e.b


def extend_seeds():
    for path in range(4):  # X1's shape: ps 1, W 4, two requests, exact capacities
        write("extend_fuzz", f"x1-path{path}",
              extend_seed(path, 1, 4, 2, 3, 16, 8, [(5, 3, 1), (7, 4, 2)]))
    write("extend_fuzz", "ps4-padded", extend_seed(0, 4, 3, 1, 2, 12, 6, [(6, 2, 1), (2, 1, 0)]))
    write("extend_fuzz", "short-capacities",  # every capacity one short: guards 1-3 record
          extend_seed(1, 16, 6, 2, 3, 40, 30, [(30, 6, 1), (17, 1, 2)], caps=(1, 1, 1)))
    write("extend_fuzz", "accept-zero", extend_seed(2, 1, 5, 2, 2, 20, 10, [(3, 0, 1), (10, 5, 0)]))
    write("extend_fuzz", "bad-slot", extend_seed(0, 2, 4, 3, 4, 24, 12,
                                                 [(12, 2, 1), (4, 4, 2), (9, 1, 3)], bad_entry=30))
    write("extend_fuzz", "bad-seq-len", extend_seed(1, 1, 2, 2, 2, 8, 4, [(5, 1, 1), (2, 2, 1)]))
    write("extend_fuzz", "device-word", extend_seed(2, 8, 4, 3, 3, 20, 16,
                                                    [(9, 2, 1), (16, 4, 2), (1, 1, 0)], word=2))
    write("extend_fuzz", "host-bad-slot", extend_seed(3, 1, 3, 2, 2, 10, 7, [(7, 3, 1), (2, 1, 1)],
                                                      slot_limit=100))
    for layouts in (1, 2, 4, 8):
        write("extend_fuzz", f"layout-{layouts}",
              extend_seed(layouts % 4, 2, 3, 2, 3, 14, 9, [(9, 3, 1), (4, 2, 2)], layouts=layouts))
    write("extend_fuzz", "partial-layout",  # page_table dropped: refused by name
          extend_seed(0, 1, 2, 1, 2, 8, 4, [(3, 1, 1)], drop=0xF3))
    write("extend_fuzz", "empty-bucket", extend_seed(0, 1, 4, 0, 1, 8, 4, []))


if __name__ == "__main__":
    plan_seeds()
    kernels_seeds()
    runtime_seeds()
    kv_indices_seeds()
    verify_seeds()
    extend_seeds()
