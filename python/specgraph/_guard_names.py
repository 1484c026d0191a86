"""The guard words' kind and kernel names, by id: the Python mirror of
include/specgraph/guard.hpp's violation_kind and kernel_id (one list for every module)."""

KINDS = ("none", "capacity", "layout", "bad input", "order")
KERNELS = ("none", "expand_page_table", "prefix_metadata", "sparse_fallback", "sparse_stage",
           "stage_inputs", "draft_kv_indices", "verify_metadata", "verify_prefix_page_table",
           "verify_kv_indices", "verify_packed_mask", "setup_round", "step_metadata",
           "csr_step_indices")
