// The cpu backend: one worker thread per stream runs its enqueued work in order; events
// are steady-clock time stamps with a flag other workers wait on; collectives are MPI
// calls on one duplicated communicator per stream (collectives on one communicator must
// be issued in the same order on every rank, which holds within a stream).
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "fsdptune/backend.hpp"
#include "fsdptune/data_check.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/kernels.hpp"

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

// Waits for a nonblocking collective by polling with short sleeps: a blocking MPI call
// spins on its core, and with several ranks per machine that spinning would steal the
// cycles of the compute threads whose overlap with communication is being measured.
void complete(MPI_Request& request, const char* call) {
  int done = 0;
  for (;;) {
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

int element_bytes(DType dtype) { return dtype == DType::kFP32 ? 4 : 2; }

float load(const std::byte* data, DType dtype, std::int64_t i) {
  if (dtype == DType::kFP32) {
    float value;
    std::memcpy(&value, data + i * 4, 4);
    return value;
  }
  std::uint16_t bits;
  std::memcpy(&bits, data + i * 2, 2);
  return data_pattern::from_bf16(bits);
}

void store(std::byte* data, DType dtype, std::int64_t i, float value) {
  if (dtype == DType::kFP32) {
    std::memcpy(data + i * 4, &value, 4);
    return;
  }
  const std::uint16_t bits = data_pattern::to_bf16(value);
  std::memcpy(data + i * 2, &bits, 2);
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
  std::vector<std::byte> send;
  std::vector<std::byte> receive;
  std::vector<std::byte> unsharded;  // all-gather only
};

class CpuBackend final : public Backend {
 public:
  ~CpuBackend() override {
    workers_.clear();  // joins the threads before the communicators go
    for (MPI_Comm& comm : comms_) {
      if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    }
    if (bf16_sum_ != MPI_OP_NULL) MPI_Op_free(&bf16_sum_);
  }

  std::string name() const override { return "cpu"; }

  std::map<std::string, std::string> environment() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string mpi(version, static_cast<std::size_t>(length));
    mpi = mpi.substr(0, mpi.find_first_of(",\n"));
    return {{"device", "cpu"},
            {"mpi", mpi},
            {"hardware_threads", std::to_string(std::thread::hardware_concurrency())}};
  }

  void prepare(const ReplayLayout& layout) override {
    layout_ = layout;
    check_mpi(MPI_Op_create(&bf16_sum, 1, &bf16_sum_), "MPI_Op_create");
    for (std::size_t s = 0; s < layout.streams.size(); ++s) {
      MPI_Comm comm = MPI_COMM_NULL;
      check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
      MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
      comms_.push_back(comm);
      workers_.push_back(
          std::make_unique<Worker>([this](const std::exception_ptr& error) { fail(error); }));
    }
    persistent_ = make_buffer(layout.persistent_bytes);
    track(layout.persistent_bytes);
    // fp32 parameter shards at the start of the persistent state, gradients after them.
    for (const ReplayBucket& bucket : layout.buckets) {
      for (const ReplaySlot& slot : bucket.slots) {
        for (std::int64_t j = 0; j < slot.slot.shard_numel; ++j) {
          store(persistent_.data(), DType::kFP32, slot.storage_offset + j,
                data_pattern::shard_value(slot, layout.rank, j));
        }
      }
    }
    for (const ReplayBucket& bucket : layout.buckets) {
      const std::int64_t bytes = bucket.shard_elements * element_bytes(bucket.dtype);
      BucketBuffers buffers;
      if (bucket.kind == CollectiveKind::kAllGather) {
        buffers.send = make_buffer(bytes);
        buffers.receive = make_buffer(bytes * layout.world_size);
        buffers.unsharded = make_buffer(bytes * layout.world_size);
      } else {
        buffers.send = make_buffer(bytes * layout.world_size);
        buffers.receive = make_buffer(bytes);
      }
      staging_bytes_ += static_cast<std::int64_t>(buffers.send.size() + buffers.receive.size() +
                                                  buffers.unsharded.size());
      buckets_.push_back(std::move(buffers));
    }
  }

  void run_ops(int stream, const std::vector<Op>& ops) override {
    enqueue(stream, [this, stream, ops] {
      for (const Op& op : ops) worker(stream).kernels().run(op);
    });
  }

  void copy_in(int stream, int bucket) override {
    enqueue(stream, [this, bucket] {
      const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
      BucketBuffers& buffers = buckets_[static_cast<std::size_t>(bucket)];
      for (const ReplaySlot& slot : layout.slots) {
        if (layout.kind == CollectiveKind::kAllGather) {
          // fp32 master shard -> the wire dtype at the slot's offset.
          for (std::int64_t j = 0; j < slot.slot.shard_numel; ++j) {
            store(buffers.send.data(), layout.dtype, slot.slot.offset + j,
                  load(persistent_.data(), DType::kFP32, slot.storage_offset + j));
          }
          continue;
        }
        // This rank's unsharded gradient, rank r's part at r * shard + offset.
        for (int r = 0; r < layout_.world_size; ++r) {
          for (std::int64_t j = 0; j < slot.slot.shard_numel; ++j) {
            const std::int64_t element = r * slot.slot.shard_numel + j;
            const float value = element < slot.slot.numel
                                    ? data_pattern::gradient_value(layout_.rank, slot.salt, element)
                                    : 0.0f;
            store(buffers.send.data(), layout.dtype,
                  r * layout.shard_elements + slot.slot.offset + j, value);
          }
        }
      }
    });
  }

  void collective(int stream, int bucket) override {
    enqueue(stream, [this, stream, bucket] {
      const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
      BucketBuffers& buffers = buckets_[static_cast<std::size_t>(bucket)];
      MPI_Comm comm = comms_[static_cast<std::size_t>(stream)];
      const auto count = static_cast<int>(layout.shard_elements);
      if (layout.kind == CollectiveKind::kAllGather) {
        // Bitwise: the gathered elements travel as bytes whatever their dtype.
        const int bytes = count * element_bytes(layout.dtype);
        MPI_Request request = MPI_REQUEST_NULL;
        check_mpi(MPI_Iallgather(buffers.send.data(), bytes, MPI_BYTE, buffers.receive.data(),
                                 bytes, MPI_BYTE, comm, &request),
                  "MPI_Iallgather");
        complete(request, "MPI_Iallgather");
        return;
      }
      const bool fp32 = layout.dtype == DType::kFP32;
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Ireduce_scatter_block(buffers.send.data(), buffers.receive.data(), count,
                                          fp32 ? MPI_FLOAT : MPI_UINT16_T,
                                          fp32 ? MPI_SUM : bf16_sum_, comm, &request),
                "MPI_Ireduce_scatter_block");
      complete(request, "MPI_Ireduce_scatter_block");
    });
  }

  void copy_out(int stream, int bucket) override {
    enqueue(stream, [this, bucket] {
      const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
      BucketBuffers& buffers = buckets_[static_cast<std::size_t>(bucket)];
      const int size = element_bytes(layout.dtype);
      const int world = layout_.world_size;
      for (const ReplaySlot& slot : layout.slots) {
        if (layout.kind == CollectiveKind::kAllGather) {
          // Rank r's piece of the parameter -> r * shard_numel of its full tensor.
          for (int r = 0; r < world; ++r) {
            std::memcpy(
                buffers.unsharded.data() +
                    (world * slot.slot.offset + r * slot.slot.shard_numel) * size,
                buffers.receive.data() + (r * layout.shard_elements + slot.slot.offset) * size,
                static_cast<std::size_t>(slot.slot.shard_numel * size));
          }
          continue;
        }
        // Accumulate into the fp32 gradient shard.
        const std::int64_t gradients = layout_.shard_storage_elements;
        for (std::int64_t j = 0; j < slot.slot.shard_numel; ++j) {
          const std::int64_t at = gradients + slot.storage_offset + j;
          store(persistent_.data(), DType::kFP32, at,
                load(persistent_.data(), DType::kFP32, at) +
                    load(buffers.receive.data(), layout.dtype, slot.slot.offset + j));
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
      std::vector<std::byte> block = make_buffer(bytes);
      std::lock_guard lock(memory_mutex_);
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
      tracked_bytes_ -= static_cast<std::int64_t>(data.size());
      std::vector<std::byte>().swap(data);
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
    return bytes;
  }

  std::vector<float> read_bucket(int bucket, BucketBuffer which) override {
    const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
    const std::vector<std::byte>& data = buffer(bucket, which);
    std::vector<float> values(data.size() / static_cast<std::size_t>(element_bytes(layout.dtype)));
    for (std::size_t i = 0; i < values.size(); ++i) {
      values[i] = load(data.data(), layout.dtype, static_cast<std::int64_t>(i));
    }
    return values;
  }

  void corrupt_bucket(int bucket, BucketBuffer which, std::int64_t element, float value) override {
    const ReplayBucket& layout = layout_.buckets[static_cast<std::size_t>(bucket)];
    store(buffer(bucket, which).data(), layout.dtype, element, value);
  }

 private:
  struct Event {
    Clock::time_point time;
    bool done = false;
  };

  Worker& worker(int stream) { return *workers_[static_cast<std::size_t>(stream)]; }

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
  std::vector<MPI_Comm> comms_;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  std::vector<std::byte> persistent_;
  std::vector<BucketBuffers> buckets_;
  std::int64_t staging_bytes_ = 0;

  mutable std::mutex memory_mutex_;
  std::deque<std::vector<std::byte>> blocks_;  // slots created at enqueue, filled on run
  std::int64_t tracked_bytes_ = 0;
  std::int64_t peak_bytes_ = 0;

  std::mutex event_mutex_;
  std::condition_variable event_signal_;
  std::vector<std::unique_ptr<Event>> events_;
  bool failed_ = false;
  std::exception_ptr first_error_;
  std::atomic<std::int64_t> progress_{0};

  std::vector<std::unique_ptr<Worker>> workers_;  // last: destroyed first
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace fsdptune
