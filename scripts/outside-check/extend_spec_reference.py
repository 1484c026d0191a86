#!/usr/bin/env python3
"""An independent Python reference of `specgraph metadata extend`'s contract
(../shared/spec/draft-extend.md section 7, written from the spec, no library code): invoked as
`extend_spec_reference.py metadata extend`, JSON on stdin, JSON on stdout, so
extend_vs_sglang.py can run with `--specgraph scripts/outside-check/extend_spec_reference.py`
to check SGLang's own code against the spec alone (input checking is not modelled: inputs are
assumed valid).
"""
import json, sys

def main():
    assert sys.argv[1:] == ["metadata", "extend"]
    d = json.load(sys.stdin)
    ps, W = d["page_size"], d["num_draft_tokens"]
    seq, acc, pool, rtt = d["seq_len"], d["accept_len"], d["req_pool_index"], d["req_to_token"]
    bs = len(seq)
    B = d.get("bucket", bs)
    real = lambda r: r < bs
    L = [seq[r] + W if real(r) else 1 for r in range(B)]
    row = [pool[r] if real(r) else 0 for r in range(B)]
    cdiv = lambda a, b: -(-a // b)
    need = [cdiv(L[r], ps) for r in range(B)]
    C = d.get("page_table_capacity", max([1] + need))
    viol = []
    pos, slot, sel = [], [], []
    for r in range(B):
        for j in range(W):
            pos.append(seq[r] + j if real(r) else 0)
            slot.append(rtt[row[r]][seq[r] + j] if real(r) else 0)
        if real(r):
            if acc[r] == 0:
                sel.append(r * W)
                viol.append({"kind": "accept_len", "kernel": "extend_select_index", "row": r, "value": 0})
            else:
                sel.append(r * W + acc[r] - 1)
        else:
            sel.append(r * W + W - 1)
    pt = []
    for r in range(B):
        cells = [rtt[row[r]][c * ps] // ps if c < need[r] else 0 for c in range(C)]
        if need[r] > C:
            viol.append({"kind": "capacity", "kernel": "extend_page_table", "row": r, "column": C,
                         "capacity": C, "value": rtt[row[r]][C * ps] // ps, "count": need[r] - C})
        pt.append(cells)
    cuk = [0]
    for x in L:
        cuk.append(cuk[-1] + x)
    kvl = [seq[r] if real(r) else 0 for r in range(B)]
    tp = [0]
    for x in kvl:
        tp.append(tp[-1] + x)
    ti = [rtt[row[r]][p] for r in range(B) for p in range(kvl[r])]
    fi = [rtt[row[r]][p] for r in range(B) for p in range(L[r])]
    out = {"tokens": {"position": pos, "out_cache_loc": slot, "select_index": sel},
           "fa3": {"cache_seqlen": L, "cu_seqlens_q": [r * W for r in range(B + 1)], "cu_seqlens_k": cuk,
                   "page_table": pt, "max_seqlen_q": W, "max_seqlen_k": max(L) if B else 0},
           "triton": {"qo_indptr": [r * W for r in range(B + 1)], "kv_indptr": tp, "kv_indices": ti,
                      "max_extend_len": W},
           "flashinfer": {"qo_indptr": [r * W for r in range(B + 1)], "kv_indptr": cuk, "kv_indices": fi,
                          "kv_last_page_len": [1] * B},
           "violations": viol}
    print(json.dumps(out, separators=(",", ":")))

main()
