#include "cupti_activity.hpp"

#include <cstdlib>
#include <cstring>

#include <cupti.h>
#include <fmt/format.h>

#include "fsdptune/error.hpp"

namespace fsdptune::collect {

std::optional<ActivityRecord> decode_cupti_record(const CUpti_Activity& record) {
  ActivityRecord out;
  switch (record.kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto& kernel = reinterpret_cast<const CuptiKernelRecord&>(record);
      out.kind = ActivityKind::kKernel;
      out.start_ns = kernel.start;
      out.end_ns = kernel.end;
      out.correlation_id = kernel.correlationId;
      out.name = kernel.name != nullptr ? kernel.name : "";
      out.device_id = kernel.deviceId;
      out.stream_id = kernel.streamId;
      return out;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const auto& api = reinterpret_cast<const CUpti_ActivityAPI&>(record);
      out.kind = record.kind == CUPTI_ACTIVITY_KIND_RUNTIME ? ActivityKind::kRuntimeApi
                                                            : ActivityKind::kDriverApi;
      out.start_ns = api.start;
      out.end_ns = api.end;
      out.correlation_id = api.correlationId;
      out.thread_id = api.threadId;
      return out;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      const auto& external = reinterpret_cast<const CUpti_ActivityExternalCorrelation&>(record);
      out.kind = ActivityKind::kExternalCorrelation;
      out.correlation_id = external.correlationId;
      out.external_id = external.externalId;
      return out;
    }
    default:
      return std::nullopt;
  }
}

ActivityBufferPool::ActivityBufferPool(std::size_t buffer_bytes)
    : buffer_bytes_((buffer_bytes + kAlignmentBytes - 1) / kAlignmentBytes * kAlignmentBytes) {
  FSDPTUNE_CHECK(buffer_bytes_ > 0, "activity buffers must not be empty");
}

ActivityBufferPool::~ActivityBufferPool() = default;

void ActivityBufferPool::on_buffer_requested(std::uint8_t** buffer, std::size_t* size_bytes,
                                             std::size_t* max_records) {
  void* memory = std::aligned_alloc(kAlignmentBytes, buffer_bytes_);
  FSDPTUNE_CHECK(memory != nullptr, "out of host memory for a CUPTI activity buffer");
  std::memset(memory, 0, buffer_bytes_);
  *buffer = static_cast<std::uint8_t*>(memory);
  *size_bytes = buffer_bytes_;
  *max_records = 0;
  std::lock_guard lock(mutex_);
  ++buffers_in_flight_;
}

void ActivityBufferPool::on_buffer_completed(std::uint8_t* buffer, std::size_t valid_bytes,
                                             std::size_t dropped_records) {
  if (buffer == nullptr) return;
  std::vector<ActivityRecord> decoded;
  std::optional<CUptiResult> error;
  CUpti_Activity* record = nullptr;
  while (valid_bytes > 0) {
    const CUptiResult status = cuptiActivityGetNextRecord(buffer, valid_bytes, &record);
    if (status == CUPTI_ERROR_MAX_LIMIT_REACHED) break;  // end of the valid records
    if (status != CUPTI_SUCCESS) {
      error = status;
      break;
    }
    if (auto plain = decode_cupti_record(*record)) decoded.push_back(std::move(*plain));
  }
  std::free(buffer);
  std::lock_guard lock(mutex_);
  --buffers_in_flight_;
  dropped_records_ += static_cast<std::int64_t>(dropped_records);
  if (error && !walk_error_) walk_error_ = error;
  records_.insert(records_.end(), std::make_move_iterator(decoded.begin()),
                  std::make_move_iterator(decoded.end()));
}

std::vector<ActivityRecord> ActivityBufferPool::take_records() {
  std::lock_guard lock(mutex_);
  if (walk_error_) {
    const CUptiResult error = *walk_error_;
    walk_error_.reset();
    throw_runtime(
        "cuptiActivityGetNextRecord",
        fmt::format("reading a CUPTI activity buffer failed: {}", cupti_result_name(error)));
  }
  std::vector<ActivityRecord> out;
  out.swap(records_);
  return out;
}

std::int64_t ActivityBufferPool::dropped_records() const {
  std::lock_guard lock(mutex_);
  return dropped_records_;
}

std::int64_t ActivityBufferPool::buffers_in_flight() const {
  std::lock_guard lock(mutex_);
  return buffers_in_flight_;
}

std::string cupti_result_name(CUptiResult result) {
  const char* text = nullptr;
  if (cuptiGetResultString(result, &text) != CUPTI_SUCCESS || text == nullptr) {
    return fmt::format("CUPTI error {}", static_cast<int>(result));
  }
  return text;
}

void check_cupti(CUptiResult result, const char* call) {
  if (result == CUPTI_SUCCESS) return;
  throw_runtime(call, fmt::format("{} failed: {}", call, cupti_result_name(result)),
                "check that the CUDA driver supports this CUPTI version and that no other "
                "profiler (nsys, ncu) is attached");
}

}  // namespace fsdptune::collect
