// CUPTI activity buffers and records, decoded into activity.hpp's plain records. This is
// the part of the CUPTI collector that needs CUPTI's headers and cuptiActivityGetNextRecord
// but no GPU: CUPTI's record walk works on any buffer, so the tests feed it synthetic
// CUpti_ActivityKernel10 / CUpti_ActivityAPI / CUpti_ActivityExternalCorrelation records.
// Built only when the CUDA toolkit is found (cmake/FsdptuneCuda.cmake).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <cupti_activity.h>

#include "activity.hpp"

namespace fsdptune::collect {

// The kernel record version of the CUPTI we build against (CUDA 13: version 10). The one
// place that names it.
using CuptiKernelRecord = CUpti_ActivityKernel10;

// One CUPTI record as a plain record. Kinds the profiler does not use (memcpy, memset,
// context, ...) give nullopt. The kernel name is copied: CUPTI owns its string.
std::optional<ActivityRecord> decode_cupti_record(const CUpti_Activity& record);

// Buffers for cuptiActivityRegisterCallbacks. CUPTI calls the buffer-requested callback
// for an empty buffer and the buffer-completed callback (from its own worker thread) with
// a filled one; the collector forwards both here. Thread-safe.
class ActivityBufferPool {
 public:
  // CUPTI's guidance: buffers of a few MiB; records are 8-byte aligned.
  static constexpr std::size_t kDefaultBufferBytes = 8u << 20;
  static constexpr std::size_t kAlignmentBytes = ACTIVITY_RECORD_ALIGNMENT;

  explicit ActivityBufferPool(std::size_t buffer_bytes = kDefaultBufferBytes);
  ~ActivityBufferPool();
  ActivityBufferPool(const ActivityBufferPool&) = delete;
  ActivityBufferPool& operator=(const ActivityBufferPool&) = delete;

  // Buffer-requested: a fresh zeroed buffer of buffer_bytes(), aligned to kAlignmentBytes;
  // *max_records = 0 lets CUPTI fill it.
  void on_buffer_requested(std::uint8_t** buffer, std::size_t* size_bytes,
                           std::size_t* max_records);
  // Buffer-completed: walks the first `valid_bytes` with cuptiActivityGetNextRecord,
  // keeps the decoded records, counts `dropped_records`, then frees the buffer (which must
  // come from on_buffer_requested, or be nullptr). A walk error other than the end of the
  // buffer is remembered and rethrown by take_records as Error(kRuntime).
  void on_buffer_completed(std::uint8_t* buffer, std::size_t valid_bytes,
                           std::size_t dropped_records);

  // The records decoded so far, in arrival order; clears them.
  std::vector<ActivityRecord> take_records();
  std::int64_t dropped_records() const;
  std::int64_t buffers_in_flight() const;  // requested, not completed
  std::size_t buffer_bytes() const { return buffer_bytes_; }

 private:
  const std::size_t buffer_bytes_;
  mutable std::mutex mutex_;
  std::vector<ActivityRecord> records_;
  std::int64_t dropped_records_ = 0;
  std::int64_t buffers_in_flight_ = 0;
  std::optional<CUptiResult> walk_error_;
};

// "CUPTI_ERROR_..." for a result code.
std::string cupti_result_name(CUptiResult result);
// Throws Error(kRuntime) naming `call` when `result` is not CUPTI_SUCCESS.
void check_cupti(CUptiResult result, const char* call);

}  // namespace fsdptune::collect
