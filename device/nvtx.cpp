#include "device/nvtx.hpp"

#if defined(SPECGRAPH_HAS_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif

namespace specgraph::detail {

#if defined(SPECGRAPH_HAS_NVTX)
namespace {
nvtxDomainHandle_t domain() {
  static const nvtxDomainHandle_t d = nvtxDomainCreateA("specgraph");
  return d;
}
}  // namespace

nvtx_string nvtx_register(const char* message) {
  return nvtxDomainRegisterStringA(domain(), message);
}

nvtx_range::nvtx_range(nvtx_string message, std::int64_t payload, std::uint32_t category) noexcept {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.category = category;
  a.colorType = NVTX_COLOR_ARGB;
  a.color = 0xff2f80edu;
  a.payloadType = NVTX_PAYLOAD_TYPE_INT64;
  a.payload.llValue = payload;
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered =
      static_cast<nvtxStringHandle_t>(const_cast<void*>(message));  // NOLINT: NVTX handle type
  nvtxDomainRangePushEx(domain(), &a);
}

nvtx_range::~nvtx_range() {
  nvtxDomainRangePop(domain());
}
#else
nvtx_string nvtx_register(const char*) {
  return nullptr;
}
nvtx_range::nvtx_range(nvtx_string, std::int64_t, std::uint32_t) noexcept {}
nvtx_range::~nvtx_range() = default;
#endif

}  // namespace specgraph::detail
