// The executor's device: what one rank needs to replay a Program for real (DESIGN.md
// "Validation"). Modelled on a CUDA device: work is *enqueued* on streams and runs in
// enqueue order per stream; streams synchronise through events; the host waits with
// synchronize(). The cpu backend emulates this with one worker thread per stream and MPI
// collectives; the cuda backend is CUDA streams, events, cuBLAS and NCCL.
//
// Buffers: the backend owns, per rank,
//   - the persistent state (ReplayLayout::persistent_bytes, tracked): the fp32 master
//     parameter shards and the fp32 gradient shards live at its start;
//   - per bucket, the flat buffers its collective runs on (staging, untracked: allocated
//     once in prepare(), reported as staging_bytes): all-gather send [shard] -> receive
//     [shard * ranks] -> unsharded parameters [shard * ranks]; reduce-scatter send
//     [shard * ranks] -> receive [shard];
//   - blocks allocated and released by the schedule's memory events (tracked).
// peak_tracked_bytes() is the high-water mark of the tracked bytes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fsdptune/program.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune {

// A bucket's parameters with where their fp32 shards live in the persistent state.
struct ReplaySlot {
  BufferSlot slot;                  // layout in the bucket's flat buffer
  std::int64_t storage_offset = 0;  // elements, into the fp32 parameter / gradient shards
  std::uint32_t salt = 0;           // data_pattern::param_salt(slot.param)
  bool operator==(const ReplaySlot&) const = default;
};

struct ReplayBucket {
  CollectiveKind kind = CollectiveKind::kAllGather;
  DType dtype = DType::kBF16;       // element type on the wire
  std::int64_t shard_elements = 0;  // per rank
  std::vector<ReplaySlot> slots;
  bool operator==(const ReplayBucket&) const = default;
};

// Everything a backend needs before the first enqueue.
struct ReplayLayout {
  int rank = 0;
  int world_size = 1;
  std::vector<Stream> streams;
  std::vector<ReplayBucket> buckets;        // index = Program bucket index
  std::int64_t shard_storage_elements = 0;  // fp32 elements of all parameter shards
  std::int64_t persistent_bytes = 0;        // >= 2 * 4 * shard_storage_elements
  bool operator==(const ReplayLayout&) const = default;
};

// Which of a bucket's buffers to read back (data checks).
enum class BucketBuffer {
  kGathered,   // all-gather receive: [shard * ranks] in the collective's layout
  kUnsharded,  // all-gather copy-out destination: each parameter's full tensor, padded,
               // parameter of slot s at ranks * s.offset
  kReduced,    // reduce-scatter receive: this rank's [shard]
};

using EventId = int;
using BlockId = int;

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;  // "cpu" or "cuda"
  // Device, library versions: recorded in measured.json.
  virtual std::map<std::string, std::string> environment() const = 0;

  // Creates the streams, allocates the persistent state and the staging buffers, and
  // fills the parameter shards with data_pattern::param_value. Once, before any enqueue.
  virtual void prepare(const ReplayLayout& layout) = 0;

  // --- work, enqueued on `stream` (index into ReplayLayout::streams) ---
  virtual void run_ops(int stream, const std::vector<Op>& ops) = 0;
  // All-gather bucket: parameter shards (fp32) -> send buffer in the bucket's dtype.
  // Reduce-scatter bucket: writes this rank's unsharded gradients
  // (data_pattern::gradient_value) into the send buffer in the bucket layout.
  virtual void copy_in(int stream, int bucket) = 0;
  // The bucket's collective: MPI or NCCL all-gather / reduce-scatter (sum).
  virtual void collective(int stream, int bucket) = 0;
  // All-gather: receive buffer -> unsharded parameters. Reduce-scatter: receive buffer
  // added into the fp32 gradient shards.
  virtual void copy_out(int stream, int bucket) = 0;
  // A memory event: allocates (and touches) `bytes` of tracked memory / releases a block.
  virtual BlockId allocate(int stream, std::int64_t bytes) = 0;
  virtual void release(int stream, BlockId block) = 0;

  // --- events and synchronisation ---
  virtual EventId record(int stream) = 0;
  virtual void wait(int stream, EventId event) = 0;
  // Blocks until all enqueued work is done. Throws Error(kRuntime) for a failure in the
  // enqueued work (the first one).
  virtual void synchronize() = 0;
  // Seconds from `from` to `to`. REQUIRES: both recorded and synchronize() returned.
  virtual double elapsed_s(EventId from, EventId to) const = 0;
  // Forgets all events (ids restart at 0). REQUIRES: synchronize() returned.
  virtual void reset_events() = 0;

  // Units of enqueued work completed so far; the watchdog's sign of life. Thread-safe.
  virtual std::int64_t progress() const = 0;

  // --- memory ---
  virtual std::int64_t peak_tracked_bytes() const = 0;
  virtual void reset_peak() = 0;  // peak := tracked bytes now. REQUIRES: synchronized.
  virtual std::int64_t staging_bytes() const = 0;
  virtual std::int64_t kernel_workspace_bytes() const = 0;

  // Decoded to float. REQUIRES: synchronize() returned.
  virtual std::vector<float> read_bucket(int bucket, BucketBuffer which) = 0;
  // Overwrites one element of a bucket buffer (fault injection for tests of the checks).
  virtual void corrupt_bucket(int bucket, BucketBuffer which, std::int64_t element,
                              float value) = 0;
};

// The cpu backend: worker threads per stream, Eigen kernels, MPI collectives on one
// duplicated communicator per stream. REQUIRES: MPI initialized with
// MPI_THREAD_MULTIPLE (or a world of one rank).
std::unique_ptr<Backend> make_cpu_backend();
// The cuda backend on `device`: CUDA streams and events, cuBLAS kernels, NCCL
// communicators (one per stream, unique ids broadcast over MPI), memory events from a
// cudaMallocAsync pool. Throws Error(kRuntime) when built without CUDA or no device.
std::unique_ptr<Backend> make_cuda_backend(int device);
// CUDA devices visible; 0 when built without CUDA.
int cuda_backend_device_count();

}  // namespace fsdptune
