// Error translation, tensor checks, the executor cache and the NVTX ranges of the extension.
#include <tvm/ffi/extra/c_env_api.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "python/src/binding.hpp"
#include "specgraph/runtime.hpp"

#if defined(SPECGRAPH_HAS_CUDA)
#include <cuda_runtime_api.h>
#endif
#if defined(SPECGRAPH_PY_HAS_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif

namespace specgraph::python {

void throw_kind(const char* kind, const std::string& message, ffi_map context) {
  throw ffi::Error(kind, message, /*backtrace=*/"", /*cause_chain=*/std::nullopt,
                   /*extra_context=*/ffi::ObjectRef(std::move(context)));
}

void translate_current_exception() {
  try {
    throw;
  } catch (const ffi::Error&) {
    throw;
  } catch (const invalid_argument& e) {
    throw_kind(kind_invalid_argument, e.what(),
               {{"field", ffi::String(e.field())}, {"location", ffi::String(e.location())}});
  } catch (const guard_violation& e) {
    throw_kind(kind_guard_violation, e.what());
  } catch (const capture_failed& e) {
    throw_kind(kind_capture_failed, e.what(),
               {{"bucket", static_cast<std::int64_t>(e.bucket())},
                {"step", static_cast<std::int64_t>(e.step())}});
  } catch (const capture_violation& e) {
    throw_kind(kind_capture_failed, e.what());
  } catch (const cuda_error& e) {
    throw_kind(kind_cuda_error, e.what(), {{"code", static_cast<std::int64_t>(e.code())}});
  } catch (const unavailable& e) {
    throw_kind(kind_cuda_error, e.what());
  } catch (const error& e) {
    throw_kind(kind_error, e.what());
  } catch (const std::bad_alloc& e) {
    throw_kind("MemoryError", e.what());
  } catch (const std::exception& e) {
    throw_kind(kind_error, e.what());
  }
}

std::string describe_dtype(DLDataType t) {
  std::string s;
  if (t.code == kDLBool) {
    s = t.bits == 8 ? "bool" : "bool" + std::to_string(t.bits);
  } else if (t.code == kDLBfloat && t.bits == 16) {
    s = "bfloat16";
  } else {
    const char* code = t.code == kDLInt       ? "int"
                       : t.code == kDLUInt    ? "uint"
                       : t.code == kDLFloat   ? "float"
                       : t.code == kDLComplex ? "complex"
                                              : nullptr;
    s = code != nullptr
            ? code + std::to_string(t.bits)
            : "dtype code " + std::to_string(t.code) + " bits " + std::to_string(t.bits);
  }
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

std::string describe_shape(const ffi::TensorView& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

std::string describe_device(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda:" + std::to_string(d.device_id);
    case kDLCUDAHost: return "cuda_host";
    default: return "device type " + std::to_string(d.device_type);
  }
}

std::int32_t int32_arg(const char* field, std::int64_t v) {
  SPECGRAPH_EXPECTS(v >= INT32_MIN && v <= INT32_MAX, field,
                    std::to_string(v) + " does not fit in int32");
  return static_cast<std::int32_t>(v);
}

bool check_int_tensor(const char* field, const ffi::TensorView& t, int_kind kind,
                      std::int64_t min_elements, DLDevice device) {
  const DLDataType dt = t.dtype();
  const bool is32 = dt.code == kDLInt && dt.bits == 32 && dt.lanes == 1;
  const bool is64 = dt.code == kDLInt && dt.bits == 64 && dt.lanes == 1;
  const bool ok = kind == int_kind::int32 ? is32 : kind == int_kind::int64 ? is64 : (is32 || is64);
  const char* wanted = kind == int_kind::int32   ? "int32"
                       : kind == int_kind::int64 ? "int64"
                                                 : "int32 or int64";
  SPECGRAPH_EXPECTS(ok, field, "dtype " + describe_dtype(dt) + ", expected " + wanted);
  const DLDevice d = t.device();
  SPECGRAPH_EXPECTS(
      d.device_type == device.device_type && d.device_id == device.device_id, field,
      "on " + describe_device(d) + ", but the arena is on " + describe_device(device));
  SPECGRAPH_EXPECTS(t.IsContiguous(), field, "not contiguous");
  SPECGRAPH_EXPECTS(
      t.numel() >= min_elements, field,
      std::to_string(t.numel()) + " elements, expected at least " + std::to_string(min_elements));
  return is64;
}

// ---- executors --------------------------------------------------------------------------------
namespace {

// A cuda executor over `stream` of `device`. The legacy stream (null) belongs to whatever device
// is current when the executor is made: the arena's is made current meanwhile.
std::unique_ptr<executor> make_cuda_executor_on(int device, device_stream stream) {
#if defined(SPECGRAPH_HAS_CUDA)
  int current = 0;
  if (stream == nullptr && cudaGetDevice(&current) == cudaSuccess && current != device) {
    const cudaError_t set = cudaSetDevice(device);
    if (set != cudaSuccess) {
      throw cuda_error(static_cast<int>(set),
                       std::string("cudaSetDevice: ") + cudaGetErrorString(set));
    }
    struct restore {
      int device;
      ~restore() { (void)cudaSetDevice(device); }
    } back{current};
    return make_cuda_executor(stream);
  }
#else
  (void)device;
#endif
  return make_cuda_executor(stream);  // throws unavailable in a host-only build
}

}  // namespace

executor& executor_for(DLDevice device) {
  if (device.device_type == kDLCPU) {
    static const std::unique_ptr<executor> host = make_host_executor();
    return *host;
  }
  SPECGRAPH_EXPECTS(device.device_type == kDLCUDA, "arena",
                    "on " + describe_device(device) + ": specgraph runs on cpu or cuda memory");
  auto* stream = static_cast<device_stream>(TVMFFIEnvGetStream(kDLCUDA, device.device_id));
  static std::mutex mutex;
  static std::map<std::pair<int, device_stream>, std::unique_ptr<executor>> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  auto& slot = cache[{device.device_id, stream}];
  if (!slot) {
    // The legacy stream (null) belongs to whatever device is current: make it the arena's.
    slot = make_cuda_executor_on(device.device_id, stream);
  }
  return *slot;
}

// ---- NVTX -------------------------------------------------------------------------------------
namespace {
bool nvtx_enabled = false;
#if defined(SPECGRAPH_PY_HAS_NVTX)
struct nvtx_names {
  nvtxDomainHandle_t domain = nvtxDomainCreateA("specgraph");
  nvtxStringHandle_t names[static_cast<int>(op_id::count)] = {};
  nvtx_names() {
    const char* text[] = {"stage_",
                          "round_setup_",
                          "step_metadata_",
                          "sparse_stage_",
                          "count_violations_",
                          "check_guards",
                          "initialize_",
                          "step_metadata_device_",
                          "advance_step_",
                          "csr_step_indices_",
                          "csr_round_indices_",
                          "csr_indices_device_",
                          "begin_round_"};
    static_assert(sizeof(text) / sizeof(text[0]) == static_cast<std::size_t>(op_id::count),
                  "one NVTX name per op_id");
    for (int i = 0; i < static_cast<int>(op_id::count); ++i) {
      names[i] = nvtxDomainRegisterStringA(domain, text[i]);
    }
  }
};
const nvtx_names& names() {
  static const nvtx_names n;
  return n;
}
#endif
}  // namespace

void set_nvtx_enabled(bool on) {
  nvtx_enabled = on;
#if defined(SPECGRAPH_PY_HAS_NVTX)
  if (on) (void)names();
#endif
}

op_range::op_range(op_id id) {
#if defined(SPECGRAPH_PY_HAS_NVTX)
  if (!nvtx_enabled) return;
  const nvtx_names& n = names();
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = n.names[static_cast<int>(id)];
  nvtxDomainRangePushEx(n.domain, &a);
  pushed_ = true;
#else
  (void)id;
#endif
}

op_range::~op_range() {
#if defined(SPECGRAPH_PY_HAS_NVTX)
  if (pushed_) nvtxDomainRangePop(names().domain);
#endif
}

}  // namespace specgraph::python
