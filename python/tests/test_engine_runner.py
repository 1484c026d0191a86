"""examples/engine_runner.py (an engine's own draft graph runner with specgraph wired in): the
example runs as pasted on the CPU and passes its own checks, and its runner, driven round by
round here (its static inputs read in place: the arena's input copies stay untouched), matches
references that share no code with it or with specgraph: the FA3 tables (reference.py), the
CSR indices (csr_reference.py) and the attention outputs (a dense float64 model below, keys
gathered by position), with poisoned outputs, a padded bucket and an idle round. On a GPU (the GPU check) the same rounds run through the captured graphs. Without torch
(CI) only the example's own message is checked; the other tests skip."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import ROOT, need_cuda, need_torch

np = pytest.importorskip("numpy")

import specgraph  # noqa: E402
import csr_reference as cref  # noqa: E402
import reference as ref  # noqa: E402

EXAMPLE = ROOT / "examples" / "engine_runner.py"


def load_example():
    spec = importlib.util.spec_from_file_location("engine_runner", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


@pytest.mark.parametrize("require_gpu", ["", "1"])
def test_without_torch_the_example_says_so(require_gpu):
    # Where torch is installed too, the example runs as if it were not (importing it fails).
    env = {**os.environ, "REQUIRE_GPU": require_gpu}
    done = subprocess.run([sys.executable, "-c", "import sys; sys.modules['torch'] = None; "
                           f"import runpy; sys.argv = "
                           f"[{str(EXAMPLE)!r}]; runpy.run_path({str(EXAMPLE)!r}, "
                           f"run_name='__main__')"],
                          capture_output=True, text=True, timeout=120, cwd=str(ROOT), env=env)
    assert done.stdout.startswith("engine_runner: needs torch (") and \
        done.stdout.rstrip().endswith("nothing to run"), done.stdout + done.stderr
    assert done.returncode == (1 if require_gpu else 0), done.stdout + done.stderr


def test_the_example_runs_as_pasted_on_cpu(torch_mod):
    done = subprocess.run([sys.executable, str(EXAMPLE), "--device", "cpu", "--rounds", "8"],
                          capture_output=True, text=True, timeout=300, cwd=str(ROOT))
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "S = 4 slots per row (3 draft forwards per graph)" in out, out
    assert "capture: none on the CPU; each round runs the graph's body eagerly" in out, out
    assert "rounds: 8 (2 idle, " in out, out  # rounds 1 and 5 are idle ranks
    assert "max relative error FA3 tables" in out and out.rstrip().endswith("PASSED"), out


def dense_reference(model, runner, rows, seqs, kv, steps):
    """attn[s][q] for every real query row q and step s, in float64: attention of the step's
    query over the committed prefix (req_to_token by position, K/V as they were before the
    round) and the branch's draft tokens 0..s (K/V recomputed from the tokens the runner
    recorded)."""
    H, D, topk = model.heads, model.head_dim, runner.topk
    r2t = model.req_to_token.cpu().numpy()
    kc, vc = (x.double().cpu().numpy() for x in kv)
    emb = model.embed.double().cpu().numpy()
    wq, wk, wv = (w.double().cpu().numpy() for w in (model.wq, model.wk, model.wv))
    tok = runner.tokens.cpu().numpy()
    out = {}
    for i, (row, n) in enumerate(zip(rows, seqs)):
        pk, pv = kc[r2t[row, :n]], vc[r2t[row, :n]]
        for t in range(topk):
            q_row = i * topk + t
            x = emb[tok[:steps, q_row]]  # [steps, H * D]
            for s in range(steps):
                q = (x[s] @ wq).reshape(H, D)
                k = np.concatenate([pk, (x[:s + 1] @ wk).reshape(-1, H, D)])
                v = np.concatenate([pv, (x[:s + 1] @ wv).reshape(-1, H, D)])
                logits = np.einsum("hd,nhd->hn", q, k) / np.sqrt(D)
                p = np.exp(logits - logits.max(-1, keepdims=True))
                out[s, q_row] = np.einsum("hn,nhd->hd", p / p.sum(-1, keepdims=True), v)
    return out


def run_rounds(device):
    torch = need_torch()
    example = load_example()
    a = example.parse(["--device", device, "--seed", "5"])
    dev = torch.device(device)
    model = example.ToyDraftModel(a, dev)
    runner = example.EagleDraftRunner(model, a.max_batch, a.topk, a.slots, dev)
    graphs, _ = runner.capture()
    assert graphs == (len(runner.capture_bs) if device == "cuda" else 0)
    bufs, cfg = runner.meta.bufs, runner.meta.plan.config
    steps, topk, S = a.slots - 1, a.topk, a.slots
    kv_indptr, kv_indices = runner.meta.csr.kv_indptr, runner.meta.csr.kv_indices
    gen = np.random.default_rng(11)
    # (real batch, the all-reduced batch): a full bucket, a padded one, an idle rank, the
    # largest bucket after an idle round (stale rows), a batch of 1 in the largest bucket.
    for bs, world in [(4, 4), (3, 6), (0, 3), (8, 8), (0, 1), (1, 7), (5, 5)]:
        rows, seqs, slots, used = model.new_round(bs, topk, S)
        first = gen.integers(0, model.vocab, bs * topk).tolist()
        for out in (runner.attn_fa3, runner.attn_csr):
            out.fill_(float("nan"))
        kv_indptr.fill_(-7)
        kv_indices.fill_(-7)
        staged_copies = (bufs.req_pool_index, bufs.seq_len, bufs.out_cache_loc)
        for x in staged_copies:  # the arena's input copies: read in place, nothing lands there
            x.fill_(-3)
        drafts = [slots[q * S + j] for q in range(bs * topk) for j in range(steps)]
        for cache in (model.k_cache, model.v_cache):  # a finite poison: a reused page may
            cache[drafts] = 12345.0  # already hold the value a draft token writes there
        kv = (model.k_cache.clone(), model.v_cache.clone())
        t = lambda x: torch.tensor(x, dtype=torch.int64, device=dev)  # noqa: E731
        bucket = runner.replay(bs, world, t(rows), t(seqs), t(slots).view(bs, topk, S), t(first))
        want_bucket = next(b for b in (1, 2, 4, 8) if b >= world)
        assert bucket == want_bucket, (bs, world, bucket)
        specgraph.check_guards(bufs)  # no refused store, no bad input read
        assert all(bool((x == -3).all()) for x in staged_copies), "inputs were copied"
        n_rows = bucket * topk

        # The FA3 tables every step's forward read, against reference.py.
        r = ref.Round(bs, rows, seqs, slots)
        pool, seq, staged = ref.staged(cfg, bucket, r)
        r2t = model.req_to_token.cpu().tolist()
        lpl, pseq, table, _ = ref.prefix(cfg, bucket, pool, seq, r2t)
        for s in range(steps):
            v = bufs.view(bucket, s)
            assert v.prefix_page_table.tolist() == table and v.prefix_seqlen.tolist() == pseq
            assert (v.expand_page_table.tolist(), v.expand_cache_seqlen.tolist()) == \
                ref.expand(cfg, bucket, s, lpl, staged), (bucket, s)

        # The CSR indices in the runner's own buffers, against csr_reference.py; the cells
        # past the bucket's rows untouched.
        case = cref.Case(seq, pool, model.req_to_token.cpu().numpy().astype(np.int64), topk,
                         steps, model.page_size, slot_stride=S)
        want = cref.steps(case, list(range(steps)), steps)
        for s in range(steps):
            ptr, idx = want[s]
            got_ptr = kv_indptr[s].cpu().tolist()
            assert got_ptr[:n_rows + 1] == ptr and set(got_ptr[n_rows + 1:]) <= {-7}, (bucket, s)
            got_idx = kv_indices[s].cpu().tolist()
            assert got_idx[:ptr[-1]] == idx and set(got_idx[ptr[-1]:]) <= {-7}, (bucket, s)

        # The attention outputs: real rows equal the dense reference on both paths, the
        # bucket's padding rows written (finite), the rows past the bucket still poisoned.
        dense = dense_reference(model, runner, rows, seqs, kv, steps)
        for out in (runner.attn_fa3, runner.attn_csr):
            o = out.double().cpu().numpy()
            for (s, q_row), want_o in dense.items():
                err = np.abs(o[s, q_row] - want_o).max() / np.abs(want_o).max()
                assert err < 1e-4, (bs, bucket, s, q_row, err)
            assert np.isfinite(o[:, :n_rows]).all() and np.isnan(o[:, n_rows:]).all()

        # The KV cache: written at the real rows' draft slots (steps 0..S-2) and on the dummy
        # page only; an idle round writes nothing but the dummy page.
        changed = set((kv[0] != model.k_cache).any(-1).any(-1).nonzero().flatten().tolist())
        drafts = set(drafts)
        assert drafts <= changed and changed - drafts <= set(range(model.page_size)), bs
        assert all(slots[q * S + S - 1] == -1 for q in range(bs * topk))  # never read
        model.free_pages(used)


def test_the_runner_matches_the_references_on_cpu(torch_mod):
    run_rounds("cpu")


def test_the_runner_captured_on_cuda_matches_the_references():
    need_cuda()
    run_rounds("cuda")
