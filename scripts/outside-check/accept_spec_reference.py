#!/usr/bin/env python3
"""An independent Python reference of `specgraph metadata accept`'s contract
(../shared/spec/round-on-device.md sections 2 to 7, output as section 10; written from the spec,
no library code): invoked as `accept_spec_reference.py metadata accept`, JSON on stdin, JSON on
stdout, so accept_vs_sglang.py can run with `--specgraph scripts/outside-check/
accept_spec_reference.py` to check SGLang's own code against the spec alone (input checking is
not modelled: inputs are assumed valid). `accept_spec_reference.py --self-test` checks it on the
spec's worked examples E1 to E3 (section 11), verbatim.

One input beyond the contract, for chained rounds (python/tests/round_graphs_run.py): `idle`
([bs] booleans), the real rows that finished in an earlier round and were left in place (section
6: "built as a padded row"). An idle row is written as padding, takes no pages and is inactive,
but stays finished (`finished` True); its `emit_len` and `slots_to_free` are None (the library
keeps the cells of the round it finished in; the caller keeps them).
"""
import json
import sys


def cdiv(a, b):
    return -(-a // b)


def r1(ps, topk, num_steps, d):
    """Section 5.1's per-round reserve."""
    if ps == 1 or topk == 1:
        return max(num_steps * topk, d)
    return max(cdiv(ps - 1 + num_steps, ps) * ps * topk, d)


def walk(parent, draft, target, num_steps):
    """Section 3: the accepted nodes 0 = n_0 < n_1 < ... < n_c."""
    kids = [[] for _ in parent]
    for i in range(1, len(parent)):
        if parent[i] >= 0:
            kids[parent[i]].append(i)
    path = [0]
    while len(path) <= num_steps:
        u = path[-1]
        v = next((v for v in kids[u] if draft[v] == target[u]), None)
        if v is None:
            break
        path.append(v)
    return path


def finish(outputs, stops, left):
    """Section 6: (finished, emit_len) for one round's output tokens."""
    a = len(outputs)
    e = next((k for k, t in enumerate(outputs) if t in stops), None)
    if e is not None:
        return True, min(e + 1, left) if left is not None else e + 1
    if left is not None and a >= left:
        return True, left
    return False, a


def accept(d):
    ps, topk, ns, D = d["page_size"], d["topk"], d["num_steps"], d["num_draft_tokens"]
    S = ns + 1
    seq, pool, rtt = d["seq_len"], d["req_pool_index"], [list(x) for x in d["req_to_token"]]
    W = len(rtt[0])
    bs = len(seq)
    real = d.get("real_batch", bs)
    R = d.get("reserve", r1(ps, topk, ns, D))
    stops = set(d.get("stop_token_ids", []))
    left = d.get("max_new_tokens_left")
    ring = d["free_pages"]
    ceil_page = lambda x: cdiv(x, ps) * ps  # noqa: E731
    out = {k: [] for k in ("accepted_nodes", "accept_length", "accept_index", "predict",
                           "bonus_token", "output_token", "new_seq_len", "finished",
                           "emit_len", "slots_to_free", "allocated_len")}
    out["kv_moves"] = []
    ext = {"input_id": [], "hidden_source": [], "select_index": []}
    viol, go_on = [], []
    idle = d.get("idle", [False] * bs)
    for r in range(bs):
        row = pool[r]
        V = lambda i: rtt[row][seq[r] + i]  # noqa: E731
        if r >= real or idle[r]:  # section 7 (an idle row: section 6)
            kept = r < real
            for k, v in (("accepted_nodes", []), ("accept_length", 0), ("accept_index", [-1] * S),
                         ("predict", [0] * D), ("bonus_token", 0), ("output_token", []),
                         ("new_seq_len", seq[r]), ("finished", kept),
                         ("emit_len", None if kept else 0),
                         ("slots_to_free", None if kept else [])):
                out[k].append(v)
            ext["input_id"].append([])
            ext["hidden_source"].append([])
            ext["select_index"].append(r * D + D - 1)
            go_on.append(False)
            continue
        tgt = d["target_predict"][r]
        path = walk(d["parent"][r], d["draft_token"][r], tgt, ns)
        a = len(path)
        toks = [tgt[n] for n in path]
        out["accepted_nodes"].append(path)
        out["accept_length"].append(a - 1)
        out["accept_index"].append([r * D + n for n in path] + [-1] * (S - a))
        out["predict"].append([tgt[i] if i in path else 0 for i in range(D)])
        out["bonus_token"].append(toks[-1])
        out["output_token"].append(toks)
        out["new_seq_len"].append(seq[r] + a)
        if topk > 1:
            out["kv_moves"] += [[V(k), V(n)] for k, n in enumerate(path) if V(k) != V(n)]
        ext["input_id"].append(toks)
        ext["hidden_source"].append([r * D + n for n in path])
        ext["select_index"].append(r * D + a - 1)
        fin, emit = finish(toks, stops, left[r] if left is not None else None)
        out["finished"].append(fin)
        out["emit_len"].append(emit)
        owned = seq[r] + min(a, emit + 1)
        al = d["allocated_len"][r]
        out["slots_to_free"].append([rtt[row][p] for p in range(ceil_page(owned), al)]
                                    if fin else [])
        go_on.append(not fin)
    # Section 5.2: the ring, all or nothing.
    nxt, need = list(d["allocated_len"]), [0] * bs
    for r in range(bs):
        if go_on[r]:
            al = d["allocated_len"][r]
            x = max(al, ceil_page(out["new_seq_len"][r] + R))
            if x > W:
                viol.append({"kind": "row_width", "kernel": "accept_alloc", "row": r,
                             "need": x, "width": W})
                continue
            nxt[r], need[r] = x, cdiv(x, ps) - cdiv(al, ps)
    N = sum(need)
    writes = []
    if N > len(ring):
        viol.append({"kind": "ring", "kernel": "accept_alloc", "need": N,
                     "available": len(ring)})
        nxt, N = list(d["allocated_len"]), 0
    else:
        off = 0
        for r in range(bs):
            if nxt[r] == d["allocated_len"][r]:
                continue
            row, cur = pool[r], d["allocated_len"][r]
            for p in range(cur, min(nxt[r], ceil_page(cur))):
                writes.append([row, p, rtt[row][cur - 1] + 1 + (p - cur)])
            for p in range(ceil_page(cur), nxt[r]):
                m, o = (p - ceil_page(cur)) // ps, (p - ceil_page(cur)) % ps
                writes.append([row, p, ring[off + m] * ps + o])
            off += need[r]
        for row, p, slot in writes:
            rtt[row][p] = slot
    out["allocated_len"] = nxt
    out["pages_taken"] = N
    out["req_to_token_writes"] = writes
    out["extend"] = ext
    # Section 5.3: the next round's inputs.
    nr = {k: [] for k in ("active", "seq_len", "root_token", "draft_position",
                          "draft_out_cache_loc", "verify_out_cache_loc")}
    nr["tail_copies"] = []
    ring_failed = any(v["kind"] == "ring" for v in viol)
    for r in range(bs):
        act = go_on[r] and not ring_failed
        nr["active"].append(act)
        if not act:
            nr["seq_len"].append(1)
            nr["root_token"].append(0)
            nr["draft_position"].append([0] * topk)
            nr["draft_out_cache_loc"].append([[0] * ns for _ in range(topk)])
            nr["verify_out_cache_loc"].append([0] * D)
            continue
        s, row, al = out["new_seq_len"][r], pool[r], nxt[r]
        bad = []

        def slot(p):
            if p >= al:
                bad.append(p)
                return 0
            return rtt[row][p]

        if ps == 1 or topk == 1:
            P = lambda t, j: s + t * ns + j  # noqa: E731
        else:
            nnp = cdiv(s % ps + ns, ps)
            P = lambda t, j: s + t * ps * nnp + j  # noqa: E731
            fp = s - s % ps
            for t in range(1, topk):
                for o in range(s % ps):
                    nr["tail_copies"].append([slot(fp + t * nnp * ps + o), slot(fp + o)])
        nr["seq_len"].append(s)
        nr["root_token"].append(out["bonus_token"][r])
        nr["draft_position"].append([s] * topk)
        nr["draft_out_cache_loc"].append([[slot(P(t, j)) for j in range(ns)]
                                          for t in range(topk)])
        nr["verify_out_cache_loc"].append([slot(s + j) for j in range(D)])
        if bad:
            viol.append({"kind": "unbacked", "kernel": "next_round_slots", "row": r,
                         "position": min(bad), "allocated": al})
    out["next_round"] = nr
    out["violations"] = viol
    return out


def _e1():
    rtt = [[0] * 16, [100 + p for p in range(13)] + [0] * 3, [200 + p for p in range(11)] + [0] * 5]
    return dict(page_size=1, topk=1, num_steps=3, num_draft_tokens=4, seq_len=[5, 3],
                req_pool_index=[1, 2], req_to_token=rtt, parent=[[-1, 0, 1, 2]] * 2,
                draft_token=[[7, 11, 12, 13], [4, 5, 6, 8]],
                target_predict=[[11, 12, 9, 0], [5, 6, 8, 3]], allocated_len=[13, 11],
                free_pages=[300, 301, 302, 303, 304], reserve=8, stop_token_ids=[6])


def _e2():
    rtt = [[0] * 17, [100 + p for p in range(14)] + [0] * 3]
    return dict(page_size=1, topk=2, num_steps=2, num_draft_tokens=4, seq_len=[6, 1],
                req_pool_index=[1, 0], req_to_token=rtt, parent=[[-1, 0, 0, 1]] * 2,
                draft_token=[[7, 11, 21, 12], [0] * 4], target_predict=[[11, 12, 5, 30], [0] * 4],
                allocated_len=[14, 0], free_pages=[400, 401, 402, 403], reserve=8, real_batch=1)


def _e3():
    pages = [5, 9, 2, 7, 3, 11, 0]
    row = [pages[p // 4] * 4 + p % 4 for p in range(28)]
    d = _e2()
    d.update(page_size=4, req_to_token=[[0] * 28, row], allocated_len=[24, 0],
             free_pages=[13, 4, 6], reserve=16)
    return d


def self_test():
    """E1 to E3 of section 11, each number as the spec states it."""
    o = accept(_e1())
    assert o["accepted_nodes"] == [[0, 1, 2], [0, 1, 2, 3]] and o["accept_length"] == [2, 3]
    assert o["bonus_token"] == [9, 3] and o["output_token"] == [[11, 12, 9], [5, 6, 8, 3]]
    assert o["new_seq_len"] == [8, 7] and o["kv_moves"] == []
    assert o["accept_index"] == [[0, 1, 2, -1], [4, 5, 6, 7]]
    assert o["predict"] == [[11, 12, 9, 0], [5, 6, 8, 3]]
    assert o["finished"] == [False, True] and o["emit_len"][1] == 2
    assert o["slots_to_free"] == [[], [206, 207, 208, 209, 210]]
    assert o["extend"]["select_index"] == [2, 7]
    assert o["extend"]["hidden_source"] == [[0, 1, 2], [4, 5, 6, 7]]
    assert o["allocated_len"][0] == 16 and o["pages_taken"] == 3
    assert o["req_to_token_writes"] == [[1, 13, 300], [1, 14, 301], [1, 15, 302]]
    nr = o["next_round"]
    assert nr["draft_out_cache_loc"][0] == [[108, 109, 110]]
    assert nr["verify_out_cache_loc"][0] == [108, 109, 110, 111]
    assert nr["active"] == [True, False] and o["violations"] == []
    o = accept(_e2())
    assert o["accepted_nodes"] == [[0, 1, 3], []] and o["bonus_token"] == [30, 0]
    assert o["output_token"][0] == [11, 12, 30] and o["predict"][0] == [11, 12, 0, 30]
    assert o["new_seq_len"] == [9, 1] and o["kv_moves"] == [[108, 109]]
    assert o["extend"]["input_id"][0] == [11, 12, 30]
    assert o["extend"]["hidden_source"][0] == [0, 1, 3]
    assert o["extend"]["select_index"] == [2, 7]
    assert o["allocated_len"][0] == 17
    assert o["req_to_token_writes"] == [[1, 14, 400], [1, 15, 401], [1, 16, 402]]
    nr = o["next_round"]
    assert nr["draft_out_cache_loc"][0] == [[109, 110], [111, 112]]
    assert nr["verify_out_cache_loc"][0] == [109, 110, 111, 112]
    assert nr["active"] == [True, False] and o["accept_index"][1] == [-1, -1, -1]
    o = accept(_e3())
    assert o["kv_moves"] == [[8, 9]] and o["accepted_nodes"][0] == [0, 1, 3]
    assert o["allocated_len"][0] == 28 and o["pages_taken"] == 1
    assert o["req_to_token_writes"] == [[1, p, 52 + p - 24] for p in range(24, 28)]
    nr = o["next_round"]
    assert nr["draft_out_cache_loc"][0] == [[9, 10], [29, 30]]
    assert nr["tail_copies"] == [[28, 8]]
    assert nr["verify_out_cache_loc"][0] == [9, 10, 11, 28] and o["violations"] == []
    print("accept_spec_reference: E1, E2, E3 as section 11 states them")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    assert sys.argv[1:] == ["metadata", "accept"], sys.argv
    print(json.dumps(accept(json.load(sys.stdin)), separators=(",", ":")))


if __name__ == "__main__":
    main()
