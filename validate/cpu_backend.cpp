// The cpu backend: one worker thread per stream runs its enqueued work in order; events
// are steady-clock time stamps with a flag other workers wait on; collectives are MPI
// calls on communicators split from MPI_COMM_WORLD, one per group (shard, replica, TP) and
// stream (collectives on one communicator must be issued in the same order on every rank,
// which holds within a stream).
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "fsdptune/backend.hpp"
#include "fsdptune/data_check.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/kernels.hpp"
#include "fsdptune/mpi_count.hpp"
#include "fsdptune/polling.hpp"

namespace fsdptune {
namespace {

using Clock = std::chrono::steady_clock;

void check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw_runtime(call, std::string(text, static_cast<std::size_t>(length)));
}

// bf16 sum for MPI_Reduce_scatter_block (MPI has no bf16 type).
void bf16_sum(void* in, void* inout, int* count, MPI_Datatype* /*type*/) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *count; ++i) {
    b[i] = data_pattern::to_bf16(data_pattern::from_bf16(a[i]) + data_pattern::from_bf16(b[i]));
  }
}

constexpr const char* kLargeMessageHint =
    "replay it with --backend cuda (NCCL's counts are 64-bit), or on more ranks (scaled down: "
    "fewer shards per rank)";

// Every bucket collective and pipeline message of `layout` within an MPI call's int count
// (mpi_count), checked before anything is allocated for them.
void check_mpi_counts(const ReplayLayout& layout) {
  const std::int64_t k = layout.mesh.shards_per_rank;
  for (std::size_t b = 0; b < layout.buckets.size(); ++b) {
    const ReplayBucket& bucket = layout.buckets[b];
    const std::string where = fmt::format("bucket {} ({})", b, to_string(bucket.kind));
    if (bucket.kind == CollectiveKind::kAllGather) {
      mpi_count(bucket.shard_bytes * k, 1, where, kLargeMessageHint);
    } else {
      mpi_count(bucket.shard_elements * k, bytes_per_element(bucket.dtype), where,
                kLargeMessageHint);
    }
  }
  for (const ReplayMessage& message : layout.messages) {
    mpi_count(message.bytes, 1, fmt::format("pipeline message {}", message.tag), kLargeMessageHint);
  }
}

// Waits for a nonblocking collective (or a pipeline message) as the cpu profiler waits for
// the collectives it times (poll_until).
void complete(MPI_Request& request, const char* call) {
  poll_until([&] {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call);
    return done != 0;
  });
}

float load(const std::byte* data, DType dtype, std::int64_t i) {
  return data_pattern::decode(dtype, data + i * bytes_per_element(dtype));
}

void store(std::byte* data, DType dtype, std::int64_t i, float value) {
  data_pattern::encode(dtype, value, data + i * bytes_per_element(dtype));
}

// fp32 -> bf16 rounding to nearest even, as data_pattern::to_bf16 (which --check-data
// holds it to), open-coded so the copy loops below compile to plain memory-bound loops.
inline std::uint16_t bf16_bits(float value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, 4);
  return static_cast<std::uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

inline float fp32_at(const std::byte* data, std::int64_t i) {
  float value = 0;
  std::memcpy(&value, data + 4 * i, 4);
  return value;
}

// n fp32 values -> `wire` (the all-gather copy-in's cast). fp8 goes element by element
// through data_pattern (float8 buckets only).
void cast_from_fp32(const std::byte* source, std::byte* destination, DType wire, std::int64_t n) {
  if (wire == DType::kFP32) {
    std::memcpy(destination, source, static_cast<std::size_t>(4 * n));
  } else if (wire == DType::kBF16) {
    for (std::int64_t j = 0; j < n; ++j) {
      const std::uint16_t bits = bf16_bits(fp32_at(source, j));
      std::memcpy(destination + 2 * j, &bits, 2);
    }
  } else {
    for (std::int64_t j = 0; j < n; ++j) store(destination, wire, j, fp32_at(source, j));
  }
}

// fp32 destination[j] += source[j] in `wire` (the reduce-scatter copy-out's accumulation).
void accumulate_into_fp32(std::byte* destination, const std::byte* source, DType wire,
                          std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) {
    float addend = 0;
    if (wire == DType::kFP32) {
      addend = fp32_at(source, j);
    } else if (wire == DType::kBF16) {
      std::uint16_t bits = 0;
      std::memcpy(&bits, source + 2 * j, 2);
      const std::uint32_t widened = static_cast<std::uint32_t>(bits) << 16;
      std::memcpy(&addend, &widened, 4);
    } else {
      addend = load(source, wire, j);
    }
    const float sum = fp32_at(destination, j) + addend;
    std::memcpy(destination + 4 * j, &sum, 4);
  }
}

// A byte buffer whose pages are touched at allocation, so tracked bytes are resident.
std::vector<std::byte> make_buffer(std::int64_t bytes) {
  return std::vector<std::byte>(static_cast<std::size_t>(bytes), std::byte{0});
}

class Worker {
 public:
  explicit Worker(std::function<void(const std::exception_ptr&)> on_error)
      : on_error_(std::move(on_error)), kernels_(make_cpu_kernels()), thread_([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    thread_.join();
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void enqueue(std::function<void()> work) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(work));
      ++pending_;
    }
    ready_.notify_all();
  }

  void wait_idle() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [this] { return pending_ == 0; });
  }

  OpKernels& kernels() { return *kernels_; }

 private:
  void loop() {
    for (;;) {
      std::function<void()> work;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        work = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        work();
      } catch (...) {
        on_error_(std::current_exception());
      }
      {
        std::lock_guard lock(mutex_);
        --pending_;
      }
      idle_.notify_all();
    }
  }

  std::function<void(const std::exception_ptr&)> on_error_;
  std::unique_ptr<OpKernels> kernels_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::condition_variable idle_;
  std::deque<std::function<void()>> queue_;
  std::int64_t pending_ = 0;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the members it uses exist
};

struct BucketBuffers {
  // Reduce-scatter only: an all-gather runs in place, as FSDP2's does (its copy-in writes
  // this rank's shards into the receive buffer).
  std::vector<std::byte> send;
  std::vector<std::byte> receive;
  std::vector<std::byte> unsharded;  // all-gather only
  // Reduce-scatter only: this rank's unsharded gradients in the send buffer's layout,
  // written once in prepare() and copied in every step. They stand for what the backward
  // kernels produce in FSDP; computing the data pattern inside the timed copy-in made it
  // 10-100x the copy the model prices (docs/validation.md).
  std::vector<std::byte> gradients;
  // Reduce-scatter over accumulated microbatches (gradient_microbatches > 1): the
  // gradients summed over the step's microbatches so far, what the copy-in reads.
  std::vector<std::byte> accumulated;
};

// A pipeline message's buffer and, for a send in flight, its request.
struct MessageBuffer {
  std::vector<std::byte> data;
  MPI_Request request = MPI_REQUEST_NULL;
};

// One stream's communicators: the FSDP shard group, the HSDP replica group, the TP group,
// the CP group.
struct StreamComms {
  MPI_Comm shard = MPI_COMM_NULL;
  MPI_Comm replica = MPI_COMM_NULL;
  MPI_Comm tp = MPI_COMM_NULL;
  MPI_Comm cp = MPI_COMM_NULL;
};

MPI_Comm split_world(ReplayMesh::GroupSplit split) {
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, split.color, split.key, &comm), "MPI_Comm_split");
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return comm;
}

class CpuBackend final : public Backend {
 public:
  ~CpuBackend() override {
    workers_.clear();  // joins the threads before the communicators go
    side_workers_.clear();
    for (StreamComms& comms : comms_) {
      for (MPI_Comm* comm : {&comms.shard, &comms.replica, &comms.tp, &comms.cp}) {
        if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
      }
    }
    if (bf16_sum_ != MPI_OP_NULL) MPI_Op_free(&bf16_sum_);
    if (pipeline_comm_ != MPI_COMM_NULL) MPI_Comm_free(&pipeline_comm_);
  }

  std::string name() const override { return "cpu"; }

  std::map<std::string, std::string> environment() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string mpi(version, static_cast<std::size_t>(length));
    mpi = mpi.substr(0, mpi.find_first_of(",\n"));
    std::lock_guard lock(memory_mutex_);
    return {{"device", "cpu"},
            {"mpi", mpi},
            {"hardware_threads", std::to_string(std::thread::hardware_concurrency())},
            {"block_pool_bytes", std::to_string(pool_bytes_)}};
  }

  // Each communicator, shard and bucket set up counts as progress: the watchdog watches the
  // set-up too (found by QA: --timeout 0.5 aborted healthy runs while their buffers were
  // written).
  void prepare(const ReplayLayout& layout) override {
    check_mpi_counts(layout);
    layout_ = layout;
    const ReplayMesh& mesh = layout.mesh;
    check_mpi(MPI_Op_create(&bf16_sum, 1, &bf16_sum_), "MPI_Op_create");
    tp_scratch_.resize(layout.streams.size());
    for (std::size_t s = 0; s < layout.streams.size(); ++s) {
      // Every rank splits in the same order; key orders the group by its coordinate.
      StreamComms comms;
      comms.shard = split_world(mesh.shard_split());  // ReplayMesh::*_split
      comms.replica = split_world(mesh.replica_split());
      comms.tp = split_world(mesh.tp_split());
      comms.cp = split_world(mesh.cp_split());
      comms_.push_back(comms);
      ++progress_;
      workers_.push_back(
          std::make_unique<Worker>([this](const std::exception_ptr& error) { fail(error); }));
      side_workers_.push_back(
          std::make_unique<Worker>([this](const std::exception_ptr& error) { fail(error); }));
    }
    persistent_ = make_buffer(layout.persistent_bytes);
    track(layout.persistent_bytes);
    // fp32 parameter shards, then gradient shards: at the start of the persistent state
    // when they fit, else (scaled down: several shards per rank) in a buffer of their own.
    const std::int64_t storage_bytes = 2 * 4 * layout.shard_storage_elements;
    if (storage_bytes <= layout.persistent_bytes) {
      storage_ = persistent_.data();
    } else {
      separate_storage_ = make_buffer(storage_bytes);
      storage_ = separate_storage_.data();
      staging_bytes_ += storage_bytes;
    }
    const int k = mesh.shards_per_rank;
    for (const ReplayBucket& bucket : layout.buckets) {
      if (bucket.kind != CollectiveKind::kAllGather) continue;
      for (const ReplaySlot& slot : bucket.slots) {
        for (int v = 0; v < k; ++v) {
          for (std::int64_t j = 0; j < slot.slot.shard_numel; ++j) {
            store(storage_, DType::kFP32, slot.storage_offset + v * slot.slot.shard_numel + j,
                  data_pattern::shard_value(slot, mesh.first_virtual_shard() + v, j));
          }
          ++progress_;
        }
      }
    }
    for (const ReplayBucket& bucket : layout.buckets) {
      BucketBuffers buffers;
      const std::int64_t own = bucket.shard_bytes * k;
      const std::int64_t all = bucket.shard_bytes * mesh.schedule_dp_shard();
      if (bucket.kind == CollectiveKind::kAllGather) {
        buffers.receive = make_buffer(all);
        buffers.unsharded = make_buffer(all);
      } else {
        buffers.send = make_buffer(all);
        buffers.receive = make_buffer(own);
        buffers.gradients = make_buffer(all);
        write_gradients(bucket, buffers.gradients.data());
        if (bucket.gradient_microbatches > 1) buffers.accumulated = make_buffer(all);
      }
      staging_bytes_ += static_cast<std::int64_t>(
          buffers.send.size() + buffers.receive.size() + buffers.unsharded.size() +
          buffers.gradients.size() + buffers.accumulated.size());
      buckets_.push_back(std::move(buffers));
      ++progress_;
    }
    if (!layout.messages.empty()) {
      check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &pipeline_comm_), "MPI_Comm_dup");
      MPI_Comm_set_errhandler(pipeline_comm_, MPI_ERRORS_RETURN);
    }
    for (const ReplayMessage& message : layout.messages) {
      // A send carries the sender's deterministic contents (written once, like the
      // gradients: the timed work is moving the bytes).
      MessageBuffer buffer{make_buffer(message.bytes), MPI_REQUEST_NULL};
      const std::int64_t size = bytes_per_element(message.dtype);
      for (std::int64_t i = 0; message.outgoing && i < message.bytes / size; ++i) {
        store(buffer.data.data(), message.dtype, i,
              data_pattern::message_value(message.tag, message.sender, i));
      }
      staging_bytes_ += message.bytes;
      messages_.push_back(std::move(buffer));
    }
  }

  void accumulate_gradients(int stream, int bucket, bool first) override {
    enqueue(stream, [this, bucket, first] {
      const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
      BucketBuffers& buffers = buckets_[static_cast<std::size_t>(bucket)];
      FSDPTUNE_CHECK(layout.kind == CollectiveKind::kReduceScatter && !buffers.accumulated.empty(),
                     "accumulate_gradients of a bucket that does not accumulate");
      if (first) {
        std::memcpy(buffers.accumulated.data(), buffers.gradients.data(),
                    buffers.accumulated.size());
        return;
      }
      // .grad += this microbatch's gradient, in the reduce dtype (the bucket's).
      const std::int64_t n =
          static_cast<std::int64_t>(buffers.accumulated.size()) / bytes_per_element(layout.dtype);
      std::byte* sum = buffers.accumulated.data();
      const std::byte* addend = buffers.gradients.data();
      if (layout.dtype == DType::kFP32) {
        for (std::int64_t j = 0; j < n; ++j) {
          const float value = fp32_at(sum, j) + fp32_at(addend, j);
          std::memcpy(sum + 4 * j, &value, 4);
        }
      } else {
        for (std::int64_t j = 0; j < n; ++j)
          store(sum, layout.dtype, j, load(sum, layout.dtype, j) + load(addend, layout.dtype, j));
      }
    });
  }

  void send(int stream, int message) override {
    enqueue(stream, [this, message] {
      const ReplayMessage& what = layout_.messages[static_cast<std::size_t>(message)];
      MessageBuffer& buffer = messages_[static_cast<std::size_t>(message)];
      // Issued, not awaited: complete_sends does (a send never holds up the stream).
      check_mpi(MPI_Isend(buffer.data.data(),
                          mpi_count(static_cast<std::int64_t>(buffer.data.size()), 1,
                                    "MPI_Isend (pipeline)", kLargeMessageHint),
                          MPI_BYTE, what.peer, what.tag, pipeline_comm_, &buffer.request),
                "MPI_Isend (pipeline)");
    });
  }

  void receive(int stream, int message) override {
    enqueue(stream, [this, message] {
      const ReplayMessage& what = layout_.messages[static_cast<std::size_t>(message)];
      MessageBuffer& buffer = messages_[static_cast<std::size_t>(message)];
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Irecv(buffer.data.data(),
                          mpi_count(static_cast<std::int64_t>(buffer.data.size()), 1,
                                    "MPI_Irecv (pipeline)", kLargeMessageHint),
                          MPI_BYTE, what.peer, what.tag, pipeline_comm_, &request),
                "MPI_Irecv (pipeline)");
      complete(request, "MPI_Irecv (pipeline)");
    });
  }

  void complete_sends(int stream) override {
    enqueue(stream, [this] {
      for (MessageBuffer& buffer : messages_) {
        if (buffer.request != MPI_REQUEST_NULL) complete(buffer.request, "MPI_Isend (pipeline)");
      }
    });
  }

  std::vector<std::byte> read_message(int message) override {
    return messages_[static_cast<std::size_t>(message)].data;
  }

  void overwrite_message(int message, std::int64_t byte_offset,
                         const std::vector<std::byte>& bytes) override {
    std::vector<std::byte>& data = messages_[static_cast<std::size_t>(message)].data;
    FSDPTUNE_CHECK(byte_offset >= 0 && byte_offset + static_cast<std::int64_t>(bytes.size()) <=
                                           static_cast<std::int64_t>(data.size()),
                   "overwrite_message outside the buffer");
    std::copy(bytes.begin(), bytes.end(), data.begin() + byte_offset);
  }

  void run_ops(int stream, const std::vector<Op>& ops, const std::vector<OpStep>& steps,
               const std::string& task) override {
    if (!steps.empty() && !check_.tp_collectives) {
      enqueue(stream, [this, stream, ops, steps] { run_steps(stream, ops, steps); });
      return;
    }
    // Checked TP collectives get their sequence numbers here, in enqueue order.
    std::vector<std::optional<TpCheck>> checks(ops.size());
    for (std::size_t i = 0; i < ops.size() && check_.tp_collectives; ++i) {
      if (ops[i].kind != OpKind::kCollective) continue;
      const int sequence = tp_sequence_++;
      checks[i] = TpCheck{sequence, fmt::format("{} op {}", task, ops[i].name),
                          sequence == check_.corrupt_tp_collective};
    }
    enqueue(stream, [this, stream, ops, checks = std::move(checks)] {
      for (std::size_t i = 0; i < ops.size(); ++i) {
        if (ops[i].kind == OpKind::kCollective) {
          tp_collective(stream, ops[i], checks[i]);
        } else {
          worker(stream).kernels().run(ops[i]);
        }
      }
    });
  }

  void copy_in(int stream, int bucket) override {
    enqueue(stream, [this, bucket] {
      const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
      BucketBuffers& buffers = buckets_[static_cast<std::size_t>(bucket)];
      if (layout.kind != CollectiveKind::kAllGather) {
        // The gradients the backward produced (prepare()): FSDP's copy-in copies them into
        // the flat buffer, which is the byte copy the model prices.
        const std::vector<std::byte>& gradients =
            buffers.accumulated.empty() ? buffers.gradients : buffers.accumulated;
        std::memcpy(buffers.send.data(), gradients.data(), buffers.send.size());
        return;
      }
      const ReplayMesh& mesh = layout_.mesh;
      // In place: this rank's shards at their place in the gathered buffer.
      std::byte* own = buffers.receive.data() + mesh.first_virtual_shard() * layout.shard_bytes;
      for (const ReplaySlot& slot : layout.slots) {
        const std::int64_t n = slot.slot.shard_numel;
        // Each fp32 master shard -> the wire dtype at its shard's slot.
        for (int v = 0; v < mesh.shards_per_rank; ++v) {
          cast_from_fp32(storage_ + 4 * (slot.storage_offset + v * n),
                         own + v * layout.shard_bytes + slot.byte_offset, slot.wire, n);
        }
      }
    });
  }

  void collective(int stream, int bucket) override {
    enqueue(stream, [this, stream, bucket] {
      const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
      BucketBuffers& buffers = buckets_[static_cast<std::size_t>(bucket)];
      MPI_Comm comm = comms_[static_cast<std::size_t>(stream)].shard;
      if (layout.kind == CollectiveKind::kAllGather) {
        // Bitwise: the gathered elements travel as bytes whatever their dtypes. In place:
        // copy_in wrote this rank's part (shard ranks are ordered by shard).
        const int bytes = mpi_count(layout.shard_bytes * layout_.mesh.shards_per_rank, 1,
                                    "MPI_Iallgather", kLargeMessageHint);
        MPI_Request request = MPI_REQUEST_NULL;
        check_mpi(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_BYTE, buffers.receive.data(), bytes, MPI_BYTE,
                                 comm, &request),
                  "MPI_Iallgather");
        complete(request, "MPI_Iallgather");
        return;
      }
      // Each rank receives its shards_per_rank consecutive shards.
      const int count = mpi_count(layout.shard_elements * layout_.mesh.shards_per_rank,
                                  bytes_per_element(layout.dtype), "MPI_Ireduce_scatter_block",
                                  kLargeMessageHint);
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(
          MPI_Ireduce_scatter_block(buffers.send.data(), buffers.receive.data(), count,
                                    mpi_type(layout.dtype), mpi_sum(layout.dtype), comm, &request),
          "MPI_Ireduce_scatter_block");
      complete(request, "MPI_Ireduce_scatter_block");
    });
  }

  void all_reduce(int stream, int bucket) override {
    enqueue(stream, [this, stream, bucket] {
      const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
      BucketBuffers& buffers = buckets_[static_cast<std::size_t>(bucket)];
      const int count =
          mpi_count(layout.shard_elements * layout_.mesh.shards_per_rank,
                    bytes_per_element(layout.dtype), "MPI_Iallreduce", kLargeMessageHint);
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buffers.receive.data(), count, mpi_type(layout.dtype),
                               mpi_sum(layout.dtype),
                               comms_[static_cast<std::size_t>(stream)].replica, &request),
                "MPI_Iallreduce");
      complete(request, "MPI_Iallreduce");
    });
  }

  void copy_out(int stream, int bucket) override {
    enqueue(stream, [this, bucket] {
      const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
      BucketBuffers& buffers = buckets_[static_cast<std::size_t>(bucket)];
      const ReplayMesh& mesh = layout_.mesh;
      const int shards = mesh.schedule_dp_shard();
      for (const ReplaySlot& slot : layout.slots) {
        const std::int64_t n = slot.slot.shard_numel;
        const std::int64_t size = bytes_per_element(slot.wire);
        if (layout.kind == CollectiveKind::kAllGather) {
          // Shard v's piece of the parameter -> v * shard_numel of its full tensor.
          for (int v = 0; v < shards; ++v) {
            std::memcpy(buffers.unsharded.data() + shards * slot.byte_offset + v * n * size,
                        buffers.receive.data() + v * layout.shard_bytes + slot.byte_offset,
                        static_cast<std::size_t>(n * size));
          }
          continue;
        }
        // Accumulate each own shard into its fp32 gradient shard.
        const std::int64_t gradients = layout_.shard_storage_elements;
        for (int v = 0; v < mesh.shards_per_rank; ++v) {
          const std::byte* received =
              buffers.receive.data() + v * layout.shard_bytes + slot.byte_offset;
          accumulate_into_fp32(storage_ + 4 * (gradients + slot.storage_offset + v * n), received,
                               slot.wire, n);
        }
      }
    });
  }

  BlockId allocate(int stream, std::int64_t bytes) override {
    BlockId id = 0;
    {
      std::lock_guard lock(memory_mutex_);
      id = static_cast<BlockId>(blocks_.size());
      blocks_.emplace_back();
    }
    enqueue(stream, [this, id, bytes] {
      std::vector<std::byte> block = take_cached_block(bytes);
      const bool made = static_cast<std::int64_t>(block.size()) != bytes;
      if (made) block = make_buffer(bytes);  // outside the lock: it touches every page
      std::lock_guard lock(memory_mutex_);
      if (made) pool_bytes_ += bytes;
      blocks_[static_cast<std::size_t>(id)] = std::move(block);
      tracked_bytes_ += bytes;
      peak_bytes_ = std::max(peak_bytes_, tracked_bytes_);
    });
    return id;
  }

  void release(int stream, BlockId block) override {
    enqueue(stream, [this, block] {
      std::lock_guard lock(memory_mutex_);
      std::vector<std::byte>& data = blocks_[static_cast<std::size_t>(block)];
      const auto bytes = static_cast<std::int64_t>(data.size());
      tracked_bytes_ -= bytes;
      cached_blocks_.emplace(bytes, std::move(data));
      data = {};
    });
  }

  EventId record(int stream) override {
    const EventId id = static_cast<EventId>(events_.size());
    events_.push_back(std::make_unique<Event>());
    Event* event = events_.back().get();
    enqueue(stream, [this, event] {
      std::lock_guard lock(event_mutex_);
      event->time = Clock::now();
      event->done = true;
      event_signal_.notify_all();
    });
    return id;
  }

  void wait(int stream, EventId id) override {
    Event* event = events_[static_cast<std::size_t>(id)].get();
    enqueue(stream, [this, event] {
      std::unique_lock lock(event_mutex_);
      event_signal_.wait(lock, [&] { return event->done || failed_; });
      if (!event->done) throw_runtime("cpu backend", "abandoned: another stream failed");
    });
  }

  void synchronize() override {
    for (auto& worker : workers_) worker->wait_idle();
    std::lock_guard lock(event_mutex_);
    if (first_error_) std::rethrow_exception(first_error_);
  }

  double elapsed_s(EventId from, EventId to) const override {
    const Event& a = *events_[static_cast<std::size_t>(from)];
    const Event& b = *events_[static_cast<std::size_t>(to)];
    FSDPTUNE_CHECK(a.done && b.done, "elapsed_s of an event that has not happened");
    return std::chrono::duration<double>(b.time - a.time).count();
  }

  void reset_events() override { events_.clear(); }

  std::int64_t progress() const override { return progress_.load(); }

  std::int64_t peak_tracked_bytes() const override {
    std::lock_guard lock(memory_mutex_);
    return peak_bytes_;
  }

  void reset_peak() override {
    std::lock_guard lock(memory_mutex_);
    peak_bytes_ = tracked_bytes_;
  }

  std::int64_t staging_bytes() const override { return staging_bytes_; }

  std::int64_t kernel_workspace_bytes() const override {
    std::int64_t bytes = 0;
    for (const auto& worker : workers_) bytes += worker->kernels().workspace_bytes();
    std::lock_guard lock(memory_mutex_);
    return bytes + tp_scratch_bytes_;
  }

  void set_data_check(const DataCheck& check) override {
    check_ = check;
    tp_sequence_ = 0;
    std::lock_guard lock(check_mutex_);
    tp_failure_.reset();
  }

  std::optional<std::string> tp_check_failure() override {
    std::lock_guard lock(check_mutex_);
    if (!tp_failure_) return std::nullopt;
    return tp_failure_->second;
  }

  std::vector<std::byte> read_gradient_shards() override {
    const std::byte* gradients = storage_ + 4 * layout_.shard_storage_elements;
    return {gradients, gradients + 4 * layout_.shard_storage_elements};
  }

  void overwrite_gradient_shards(std::int64_t byte_offset,
                                 const std::vector<std::byte>& bytes) override {
    FSDPTUNE_CHECK(byte_offset >= 0 && byte_offset + static_cast<std::int64_t>(bytes.size()) <=
                                           4 * layout_.shard_storage_elements,
                   "overwrite_gradient_shards outside the shards");
    std::copy(bytes.begin(), bytes.end(),
              storage_ + 4 * layout_.shard_storage_elements + byte_offset);
  }

  std::vector<std::byte> read_bucket(int bucket, BucketBuffer which) override {
    return buffer(bucket, which);
  }

  void overwrite_bucket(int bucket, BucketBuffer which, std::int64_t byte_offset,
                        const std::vector<std::byte>& bytes) override {
    std::vector<std::byte>& data = buffer(bucket, which);
    FSDPTUNE_CHECK(byte_offset >= 0 && byte_offset + static_cast<std::int64_t>(bytes.size()) <=
                                           static_cast<std::int64_t>(data.size()),
                   "overwrite_bucket outside the buffer");
    std::copy(bytes.begin(), bytes.end(), data.begin() + byte_offset);
  }

 private:
  struct Event {
    Clock::time_point time;
    bool done = false;
  };

  // A TP collective checked under --check-data (DataCheck).
  struct TpCheck {
    int sequence;      // among this rank's checked TP collectives, in enqueue order
    std::string what;  // the task and op, for the message
    bool corrupt;      // test hook: overwrite output element 0 before the check
  };

  // This rank's unsharded gradient of each parameter (data_pattern::gradient_value with
  // the bucket's amplitude, 0 in the padding), shard v's part at v * shard_bytes +
  // byte_offset: the send buffer's layout.
  void write_gradients(const ReplayBucket& bucket, std::byte* gradients) const {
    const ReplayMesh& mesh = layout_.mesh;
    for (const ReplaySlot& slot : bucket.slots) {
      const std::int64_t n = slot.slot.shard_numel;
      for (int v = 0; v < mesh.schedule_dp_shard(); ++v) {
        std::byte* destination = gradients + v * bucket.shard_bytes + slot.byte_offset;
        for (std::int64_t j = 0; j < n; ++j) {
          const std::int64_t element = v * n + j;
          float value = 0.0f;
          if (element < slot.slot.numel) {
            value = data_pattern::gradient_value(mesh.data_parallel_rank(), slot.salt, element,
                                                 bucket.gradient_amplitude);
          }
          store(destination, slot.wire, j, value);
        }
      }
    }
  }

  Worker& worker(int stream) { return *workers_[static_cast<std::size_t>(stream)]; }

  // A collective started beside a stream (OpStep::kStart), done when its side thread has
  // run it (or failed: the failure is the run's, fail()).
  struct SideCall {
    std::mutex mutex;
    std::condition_variable finished;
    bool done = false;
  };

  // On the stream's thread: `steps` of `ops` (op_steps), a started collective on the
  // stream's side thread, over the stream's own communicators (nothing else uses them
  // until the kWait).
  void run_steps(int stream, const std::vector<Op>& ops, const std::vector<OpStep>& steps) {
    std::shared_ptr<SideCall> pending;
    for (const OpStep& step : steps) {
      if (step.kind == OpStep::Kind::kWait) {
        FSDPTUNE_CHECK(pending != nullptr, "op steps wait for no collective");
        {
          std::unique_lock lock(pending->mutex);
          pending->finished.wait(lock, [&] { return pending->done; });
        }
        pending.reset();
        std::lock_guard lock(event_mutex_);
        if (failed_) return;
        continue;
      }
      const std::optional<Op> part = op_part(ops[step.op], step.parts);
      FSDPTUNE_CHECK(part.has_value(), "op steps run an op that does not split");
      if (step.kind == OpStep::Kind::kRun) {
        if (part->kind == OpKind::kCollective) {
          // One collective at a time on the stream's communicators and scratch.
          FSDPTUNE_CHECK(pending == nullptr, "op steps run a collective beside another");
          tp_collective(stream, *part, std::nullopt);
        } else {
          worker(stream).kernels().run(*part);
        }
        continue;
      }
      FSDPTUNE_CHECK(pending == nullptr, "op steps start a second collective in flight");
      pending = std::make_shared<SideCall>();
      side_workers_[static_cast<std::size_t>(stream)]->enqueue([this, stream, op = *part, pending] {
        try {
          tp_collective(stream, op, std::nullopt);
        } catch (...) {
          fail(std::current_exception());
        }
        {
          std::lock_guard lock(pending->mutex);
          pending->done = true;
        }
        pending->finished.notify_all();
      });
    }
    FSDPTUNE_CHECK(pending == nullptr, "op steps end with a collective in flight");
  }

  MPI_Datatype mpi_type(DType dtype) const {
    return dtype == DType::kFP32 ? MPI_FLOAT : MPI_UINT16_T;
  }
  MPI_Op mpi_sum(DType dtype) const { return dtype == DType::kFP32 ? MPI_SUM : bf16_sum_; }

  // A tensor- or context-parallel collective of the compute path (TpCollective,
  // data_check.hpp) on the stream's scratch buffers. Outside a check its contents are
  // whatever the scratch holds: what is measured is the time of moving real bytes between
  // the group's ranks. Checked, the input is data_pattern::tp_input and the output is
  // compared with tp_expected once the collective completed.
  void tp_collective(int stream, const Op& op, const std::optional<TpCheck>& check) {
    const StreamComms& comms = comms_[static_cast<std::size_t>(stream)];
    const bool context = op.parallel_dim == ParallelDim::kContext;
    MPI_Comm comm = context ? comms.cp : comms.tp;
    const TpCollective collective =
        tp_collective_of(op, compute_collective_ranks(op, layout_.mesh));
    const DType dtype = collective.dtype;
    const std::int64_t size = bytes_per_element(dtype);
    const std::int64_t ranks = collective.ranks;
    const std::int64_t part = collective.part;
    std::vector<std::byte>& scratch = tp_scratch_[static_cast<std::size_t>(stream)];
    const std::int64_t needed = 2 * part * ranks * size;
    if (static_cast<std::int64_t>(scratch.size()) < needed) {
      const auto before = static_cast<std::int64_t>(scratch.size());
      scratch = make_buffer(needed);
      std::lock_guard lock(memory_mutex_);
      tp_scratch_bytes_ += needed - before;
    }
    std::byte* input = scratch.data();
    std::byte* output = scratch.data() + part * ranks * size;
    const int tp_rank = compute_collective_rank(op, layout_.mesh);
    if (check) {
      for (std::int64_t i = 0; i < collective.input_elements(); ++i) {
        store(input, dtype, i, data_pattern::tp_input(tp_rank, i, collective.amplitude));
      }
    }
    MPI_Request request = MPI_REQUEST_NULL;
    const char* call = context ? "MPI_Iallgather (cp)" : "MPI_Iallgather (tp)";
    switch (op.collective) {
      case CollectiveKind::kAllGather: {
        const int bytes = mpi_count(part * size, 1, call, kLargeMessageHint);
        check_mpi(MPI_Iallgather(input, bytes, MPI_BYTE, output, bytes, MPI_BYTE, comm, &request),
                  call);
        break;
      }
      case CollectiveKind::kReduceScatter:
        call = context ? "MPI_Ireduce_scatter_block (cp)" : "MPI_Ireduce_scatter_block (tp)";
        check_mpi(
            MPI_Ireduce_scatter_block(input, output, mpi_count(part, size, call, kLargeMessageHint),
                                      mpi_type(dtype), mpi_sum(dtype), comm, &request),
            call);
        break;
      case CollectiveKind::kAllReduce:
        call = context ? "MPI_Iallreduce (cp)" : "MPI_Iallreduce (tp)";
        check_mpi(
            MPI_Iallreduce(input, output, mpi_count(part * ranks, size, call, kLargeMessageHint),
                           mpi_type(dtype), mpi_sum(dtype), comm, &request),
            call);
        break;
      case CollectiveKind::kSendRecv:
        throw_bad_input("op " + op.name, "point-to-point sends are not replayed");
    }
    complete(request, call);
    if (!check) return;
    if (check->corrupt) store(output, dtype, 0, 1000.0f);  // no tp_expected value
    if (auto failure = check_tp_output(collective, check->what, tp_rank, layout_.rank, output)) {
      // The first in enqueue order: streams finish their checks in any order.
      std::lock_guard lock(check_mutex_);
      if (!tp_failure_ || tp_failure_->first > check->sequence) {
        tp_failure_.emplace(check->sequence, std::move(*failure));
      }
    }
  }

  void enqueue(int stream, std::function<void()> work) {
    FSDPTUNE_CHECK(stream >= 0 && stream < static_cast<int>(workers_.size()),
                   "enqueue on an unknown stream");
    worker(stream).enqueue([this, work = std::move(work)] {
      {
        std::lock_guard lock(event_mutex_);
        if (failed_) return;  // after a failure, drain without running
      }
      work();
      ++progress_;
    });
  }

  void fail(const std::exception_ptr& error) {
    std::lock_guard lock(event_mutex_);
    if (!first_error_) first_error_ = error;
    failed_ = true;
    event_signal_.notify_all();
  }

  void track(std::int64_t bytes) {
    std::lock_guard lock(memory_mutex_);
    tracked_bytes_ += bytes;
    peak_bytes_ = std::max(peak_bytes_, tracked_bytes_);
  }

  std::vector<std::byte>& buffer(int bucket, BucketBuffer which) {
    BucketBuffers& buffers = buckets_[static_cast<std::size_t>(bucket)];
    switch (which) {
      case BucketBuffer::kGathered:
        return buffers.receive;
      case BucketBuffer::kUnsharded:
        return buffers.unsharded;
      case BucketBuffer::kReduced:
        return buffers.receive;
    }
    return buffers.receive;
  }

  ReplayLayout layout_;
  std::vector<StreamComms> comms_;
  std::vector<std::vector<std::byte>> tp_scratch_;  // per stream, grown to the largest op
  DataCheck check_;                                 // host thread only (set_data_check, run_ops)
  int tp_sequence_ = 0;  // checked TP collectives enqueued in this check period
  std::mutex check_mutex_;
  std::optional<std::pair<int, std::string>> tp_failure_;  // sequence, message
  std::int64_t tp_scratch_bytes_ = 0;
  std::byte* storage_ = nullptr;             // fp32 parameter shards, then gradient shards
  std::vector<std::byte> separate_storage_;  // when they do not fit the persistent state
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  std::vector<std::byte> persistent_;
  std::vector<BucketBuffers> buckets_;
  std::vector<MessageBuffer> messages_;  // ReplayLayout::messages
  MPI_Comm pipeline_comm_ = MPI_COMM_NULL;
  std::int64_t staging_bytes_ = 0;

  // A cached free block of exactly `bytes` (empty: none), under memory_mutex_.
  std::vector<std::byte> take_cached_block(std::int64_t bytes) {
    std::lock_guard lock(memory_mutex_);
    const auto cached = cached_blocks_.find(bytes);
    if (cached == cached_blocks_.end()) return {};
    std::vector<std::byte> block = std::move(cached->second);
    cached_blocks_.erase(cached);
    return block;
  }

  mutable std::mutex memory_mutex_;
  std::deque<std::vector<std::byte>> blocks_;  // slots created at enqueue, filled on run
  // Released blocks by size, reused by the next allocation of that size, as PyTorch's
  // CUDA caching allocator keeps freed blocks (and the cuda backend's pool its memory):
  // resident, never returned to the OS. Freeing them instead let glibc trim or unmap the
  // memory, so each step's allocations page-faulted and zeroed it again, how much of it
  // depending on the order of the allocations and on the threads' malloc arenas: a
  // kept-gathered schedule replayed 24-59% long, by an amount that changed between
  // launches (docs/validation.md "Freed blocks stay resident").
  std::multimap<std::int64_t, std::vector<std::byte>> cached_blocks_;
  std::int64_t pool_bytes_ = 0;  // every block made: the pool's resident size
  std::int64_t tracked_bytes_ = 0;
  std::int64_t peak_bytes_ = 0;

  std::mutex event_mutex_;
  std::condition_variable event_signal_;
  std::vector<std::unique_ptr<Event>> events_;
  bool failed_ = false;
  std::exception_ptr first_error_;
  std::atomic<std::int64_t> progress_{0};

  // Per stream: the thread a started collective runs on (OpStep::kStart) while the
  // stream's thread computes.
  std::vector<std::unique_ptr<Worker>> side_workers_;
  std::vector<std::unique_ptr<Worker>> workers_;  // last: destroyed first
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace fsdptune
