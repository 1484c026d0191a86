"""The comparisons of scripts/outside-check/extend_vs_sglang.py: specgraph's JSON against
SGLang's buffers for one round, with the spec's documented differences counted apart
(../shared/spec/draft-extend.md sections 2, 3 and 6; the list is in extend_vs_sglang.py's
docstring)."""
from __future__ import annotations

import json


def cdiv(a, b):
    return -(-a // b)


def first_diff(a, b):
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"at {i}: specgraph {a[i:i + 4]}, SGLang {b[i:i + 4]} (lengths {len(a)}, {len(b)})"


def compare(eng, rnd, ours, sg, doc) -> list[str]:
    """Problems; the documented differences go into doc (counts)."""
    p = []
    w, ps, bs, B = eng.w, eng.ps, len(rnd["seq_len"]), rnd["bucket"]
    tok, fa3, tri, fin = ours["tokens"], ours["fa3"], ours["triton"], ours["flashinfer"]
    for key in ("position", "out_cache_loc"):
        if tok[key] != sg[key]:
            p.append(f"{key} {first_diff(tok[key], sg[key])}")
    for r in range(B):
        mine, theirs = tok["select_index"][r], sg["select_index"][r]
        a = rnd["accept_len"][r] if r < bs else None
        if r >= bs and mine == r * w + w - 1 and theirs != mine and r * w <= theirs < r * w + w:
            doc["padded_select_index"] += 1
        elif a == 0 and mine == r * w and theirs == r * w - 1:
            doc["accept_len_zero"] += 1
        elif mine != theirs:
            p.append(f"select_index[{r}]: specgraph {mine}, SGLang {theirs} (accept {a})")
    for key in ("cache_seqlen", "cu_seqlens_q", "cu_seqlens_k"):
        if fa3[key] != sg[key]:
            p.append(f"fa3 {key} {first_diff(fa3[key], sg[key])}")
    if fa3["max_seqlen_q"] != w:
        p.append(f"fa3 max_seqlen_q {fa3['max_seqlen_q']}, SGLang's num_tokens_per_req {w}")
    if fa3["max_seqlen_k"] != max(sg["cache_seqlen"], default=0):
        p.append(f"fa3 max_seqlen_k {fa3['max_seqlen_k']}, max of SGLang's cache_seqlens "
                 f"{max(sg['cache_seqlen'], default=0)}")
    table, cap = fa3["page_table"], len(fa3["page_table"][0]) if B else 0
    need = [cdiv(n, ps) for n in sg["cache_seqlen"]]
    if B and cap != max([1] + need):
        p.append(f"fa3 page_table {cap} columns, expected max(1, ceil(L / ps)) {max([1] + need)}")
    flat = [v for row in sg["page_table"] for v in row]
    for r in range(B):
        row_problems = 0
        pool_row = eng.rtt[sg["pool_row"][r]]
        if len(table[r]) != cap:
            p.append(f"fa3 page_table row {r} has {len(table[r])} columns, not {cap}")
            continue
        for c in range(cap):
            mine = table[r][c]
            if c < min(need[r], eng.pages):
                ok = mine == sg["page_table"][r][c]
            elif c < need[r]:  # SGLang's kernel dropped this page (context edge)
                ok = mine == pool_row[c * ps] // ps
                doc["clamped_columns"] += ok
                read = flat[r * eng.pages + c] if r * eng.pages + c < len(flat) else None
                doc["foreign_pages"] += ok and read != mine
            else:
                ok = mine == 0
                doc["stale_tail_cells"] += ok and c < eng.pages and sg["page_table"][r][c] != 0
            if not ok and row_problems < 2:
                row_problems += 1
                p.append(f"fa3 page_table[{r}][{c}]: specgraph {mine}, SGLang "
                         f"{sg['page_table'][r][c] if c < eng.pages else '-'} (needs {need[r]})")
        doc["clamped_rows"] += need[r] > eng.pages
    for name, mine, qo, kv, idx in (("triton", tri, sg["t_qo"], sg["t_kv"], sg["t_idx"]),
                                    ("flashinfer", fin, sg["f_qo"], sg["f_kv"], sg["f_idx"])):
        for key, theirs in (("qo_indptr", qo), ("kv_indptr", kv), ("kv_indices", idx)):
            if mine[key] != theirs:
                p.append(f"{name} {key} {first_diff(mine[key], theirs)}")
    if tri["max_extend_len"] != sg["t_max"]:
        p.append(f"triton max_extend_len {tri['max_extend_len']}, SGLang {sg['t_max']}")
    if sg["t_past"]:
        p.append(f"SGLang's Triton path wrote {sg['t_past']} kv_indices entries past the used ones")
    if fin["kv_last_page_len"] != sg["f_last"]:
        p.append(f"flashinfer kv_last_page_len {first_diff(fin['kv_last_page_len'], sg['f_last'])}")
    if sg["f_host"] != sg["f_kv"]:
        p.append(f"SGLang's host plan {sg['f_host']} != its device kv_indptr {sg['f_kv']}")
    if sg["f_mask"] is not None:
        p.append("SGLang's draft-extend arguments carry a mask")
    zero = [dict(kind="accept_len", kernel="extend_select_index", row=r, value=0)
            for r in range(bs) if rnd["accept_len"][r] == 0]
    key = lambda v: json.dumps(v, sort_keys=True)  # noqa: E731
    if sorted(map(key, ours["violations"])) != sorted(map(key, zero)):
        p.append(f"violations {ours['violations']}, expected only the accept_len ones {zero}")
    return p


def compare_capped(eng, rnd, ours, sg) -> list[str]:
    """The run with page_table_capacity = SGLang's width: its violations and table."""
    p, w, ps, bs, B = [], eng.w, eng.ps, len(rnd["seq_len"]), rnd["bucket"]
    C = eng.pages
    need = [cdiv(n, ps) for n in sg["cache_seqlen"]]
    want = [dict(kind="accept_len", kernel="extend_select_index", row=r, value=0)
            for r in range(bs) if rnd["accept_len"][r] == 0]
    want += [dict(kind="capacity", kernel="extend_page_table", row=r, column=C, capacity=C,
                  value=eng.rtt[sg["pool_row"][r]][C * ps] // ps, count=need[r] - C)
             for r in range(B) if need[r] > C]
    key = lambda v: json.dumps(v, sort_keys=True)  # noqa: E731
    if sorted(map(key, ours["violations"])) != sorted(map(key, want)):
        p.append(f"capped violations {ours['violations']}, expected {want}")
    for r in range(B):
        row = ours["fa3"]["page_table"][r]
        expect = [sg["page_table"][r][c] if c < need[r] else 0 for c in range(C)]
        if row != expect:
            p.append(f"capped page_table row {r} {first_diff(row, expect)}")
    return p
