// A minimal NVTX injection library for the tests: loaded by NVTX through NVTX_INJECTION64_PATH,
// it records every domain range push (domain, registered message, payload, category, nesting
// depth) so a test can assert what Nsight Systems would show.
#include <nvtx3/nvToolsExt.h>

#include <cstdint>
#include <deque>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct recorder {
  std::mutex m;
  std::deque<std::string> domains;  // stable addresses: handles point into these
  std::deque<std::string> strings;
  std::vector<std::string> events;  // "depth|domain|message|payload|category"
  int depth = 0;
  std::string dump;
};

recorder& rec() {
  static recorder r;
  return r;
}

nvtxDomainHandle_t domain_create(const char* name) {
  std::lock_guard<std::mutex> lock(rec().m);
  rec().domains.emplace_back(name);
  return reinterpret_cast<nvtxDomainHandle_t>(&rec().domains.back());
}

nvtxStringHandle_t register_string(nvtxDomainHandle_t, const char* s) {
  std::lock_guard<std::mutex> lock(rec().m);
  rec().strings.emplace_back(s);
  return reinterpret_cast<nvtxStringHandle_t>(&rec().strings.back());
}

int range_push(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* a) {
  std::lock_guard<std::mutex> lock(rec().m);
  std::ostringstream e;
  e << rec().depth << '|' << (domain ? *reinterpret_cast<const std::string*>(domain) : "") << '|';
  if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED) {
    e << *reinterpret_cast<const std::string*>(a->message.registered);
  } else if (a->messageType == NVTX_MESSAGE_TYPE_ASCII) {
    e << a->message.ascii;
  }
  e << '|' << (a->payloadType == NVTX_PAYLOAD_TYPE_INT64 ? a->payload.llValue : -1) << '|'
    << a->category;
  rec().events.push_back(e.str());
  return rec().depth++;
}

int range_pop(nvtxDomainHandle_t) {
  std::lock_guard<std::mutex> lock(rec().m);
  return --rec().depth;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  const auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size)) return 0;
  *table[NVTX_CBID_CORE2_DomainCreateA] = reinterpret_cast<NvtxFunctionPointer>(&domain_create);
  *table[NVTX_CBID_CORE2_DomainRegisterStringA] =
      reinterpret_cast<NvtxFunctionPointer>(&register_string);
  *table[NVTX_CBID_CORE2_DomainRangePushEx] = reinterpret_cast<NvtxFunctionPointer>(&range_push);
  *table[NVTX_CBID_CORE2_DomainRangePop] = reinterpret_cast<NvtxFunctionPointer>(&range_pop);
  return 1;
}

// One recorded event per line; for the test, through dlsym.
__attribute__((visibility("default"))) const char* specgraph_nvtx_recorder_dump() {
  std::lock_guard<std::mutex> lock(rec().m);
  rec().dump.clear();
  for (const std::string& e : rec().events) rec().dump += e + "\n";
  return rec().dump.c_str();
}

}  // extern "C"
