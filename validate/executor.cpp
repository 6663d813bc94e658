// The executor: turns each task of the Program into enqueued backend work in task-id order
// (ids are in issue order and dependencies point backwards, so enqueueing in id order
// never waits on work not yet enqueued), with an event at each task's start and end.
#include "fsdptune/executor.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "fsdptune/data_check.hpp"
#include "fsdptune/workload.hpp"

namespace fsdptune {
namespace {

using Clock = std::chrono::steady_clock;

// An error every rank raised together (agree_on_errors): leave cleanly, no MPI_Abort.
struct AgreedError {
  Error error;
};

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

struct Interval {
  double start_s;
  double end_s;
};

std::vector<Interval> merge(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.start_s < b.start_s; });
  std::vector<Interval> merged;
  for (const Interval& interval : intervals) {
    if (!merged.empty() && interval.start_s <= merged.back().end_s) {
      merged.back().end_s = std::max(merged.back().end_s, interval.end_s);
    } else {
      merged.push_back(interval);
    }
  }
  return merged;
}

double length(const std::vector<Interval>& merged) {
  double total = 0;
  for (const Interval& interval : merged) total += interval.end_s - interval.start_s;
  return total;
}

// Length of the overlap of two merged interval lists.
double overlap(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double total = 0;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double start = std::max(a[i].start_s, b[j].start_s);
    const double end = std::min(a[i].end_s, b[j].end_s);
    if (end > start) total += end - start;
    (a[i].end_s < b[j].end_s) ? ++i : ++j;
  }
  return total;
}

std::string iso_date_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

void broadcast_string(std::string& text, int root) {
  int size = static_cast<int>(text.size());
  MPI_Bcast(&size, 1, MPI_INT, root, MPI_COMM_WORLD);
  text.resize(static_cast<std::size_t>(size));
  MPI_Bcast(text.data(), size, MPI_CHAR, root, MPI_COMM_WORLD);
}

[[noreturn]] void abort_all_ranks(int rank, const std::string& message, int code) {
  std::fprintf(stderr, "fsdptune: error: rank %d: %s\n  aborting every rank (MPI_Abort)\n", rank,
               message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

// Aborts every rank when the replay makes no progress for `timeout_s`: a rank that stops
// responding leaves the others blocked in a collective forever.
class Watchdog {
 public:
  Watchdog(const Backend& backend, int rank, double timeout_s)
      : backend_(backend), rank_(rank), timeout_s_(timeout_s), thread_([this] { loop(); }) {}
  ~Watchdog() {
    stop_ = true;
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void beat(const std::string& doing) {
    std::lock_guard lock(mutex_);
    doing_ = doing;
    ++beats_;
  }

 private:
  void loop() {
    std::int64_t last_progress = -1, last_beats = -1;
    auto last_change = Clock::now();
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const std::int64_t progress = backend_.progress();
      std::string doing;
      std::int64_t beats = 0;
      {
        std::lock_guard lock(mutex_);
        doing = doing_;
        beats = beats_;
      }
      if (progress != last_progress || beats != last_beats) {
        last_progress = progress;
        last_beats = beats;
        last_change = Clock::now();
        continue;
      }
      const double idle_s = std::chrono::duration<double>(Clock::now() - last_change).count();
      if (idle_s > timeout_s_) {
        abort_all_ranks(rank_,
                        fmt::format("no progress for {:.1f} s while {} (--timeout {} s): a rank "
                                    "stopped responding or a collective hangs",
                                    idle_s, doing, timeout_s_),
                        1);
      }
    }
  }

  const Backend& backend_;
  int rank_;
  double timeout_s_;
  std::mutex mutex_;
  std::string doing_ = "starting";
  std::int64_t beats_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

const std::vector<Op>& task_ops(const Task& task, const Workload& workload) {
  static const std::vector<Op> kNone;
  const auto& units = workload.units;
  const bool has_unit = task.unit >= 0 && task.unit < static_cast<int>(units.size());
  switch (task.kind) {
    case TaskKind::kForward:
      return has_unit ? units[static_cast<std::size_t>(task.unit)].forward_ops : kNone;
    case TaskKind::kRecompute:
      return has_unit ? units[static_cast<std::size_t>(task.unit)].recompute_ops : kNone;
    case TaskKind::kBackward:
      return has_unit ? units[static_cast<std::size_t>(task.unit)].backward_ops : kNone;
    case TaskKind::kOptimizer:
      return workload.optimizer_ops;
    default:
      return kNone;
  }
}

bool is_compute(TaskKind kind) {
  return kind == TaskKind::kForward || kind == TaskKind::kRecompute ||
         kind == TaskKind::kBackward || kind == TaskKind::kOptimizer;
}

bool is_collective(TaskKind kind) {
  return kind == TaskKind::kAllGather || kind == TaskKind::kReduceScatter ||
         kind == TaskKind::kAllReduce;
}

// The memory events of one step as real allocations: a positive event allocates a block,
// a negative one releases the oldest live block of its category with exactly that size
// (else the oldest blocks of the category until the bytes are covered).
class MemoryReplay {
 public:
  explicit MemoryReplay(Backend& backend) : backend_(backend) {}

  void apply(const MemoryEvent& event, int stream) {
    auto& live = live_[static_cast<std::size_t>(event.category)];
    if (event.bytes > 0) {
      const BlockId block = backend_.allocate(stream, event.bytes);
      live.push_back({block, event.bytes, stream, backend_.record(stream)});
      return;
    }
    std::int64_t remaining = -event.bytes;
    auto exact = std::find_if(live.begin(), live.end(),
                              [&](const Live& block) { return block.bytes == remaining; });
    if (exact != live.end()) {
      release(*exact, stream);
      live.erase(exact);
      return;
    }
    while (remaining > 0 && !live.empty()) {
      remaining -= live.front().bytes;
      release(live.front(), stream);
      live.pop_front();
    }
  }

  // Releases what the step left allocated (on stream 0, after everything).
  void release_all(int stream) {
    for (auto& live : live_) {
      for (const Live& block : live) release(block, stream);
      live.clear();
    }
  }

 private:
  struct Live {
    BlockId block;
    std::int64_t bytes;
    int stream;
    EventId allocated;
  };

  void release(const Live& block, int stream) {
    // Stream-ordered memory: a release on another stream waits for the allocation.
    if (block.stream != stream) backend_.wait(stream, block.allocated);
    backend_.release(stream, block.block);
  }

  Backend& backend_;
  std::array<std::deque<Live>, static_cast<std::size_t>(MemoryCategory::kCount)> live_;
};

struct StepRecord {
  std::vector<TaskTiming> timings;
  double step_time_s = 0;      // this rank's; the executor then takes the max over ranks
  double own_step_time_s = 0;  // this rank's
  double compute_s = 0;
  double exposed_comm_s = 0;
};

class Replay {
 public:
  Replay(const ScheduleFile& schedule, const Workload& workload, Backend& backend)
      : program_(schedule.program), workload_(workload), backend_(backend) {
    has_copy_in_.assign(program_.buckets.size(), false);
    has_copy_out_.assign(program_.buckets.size(), false);
    has_all_reduce_.assign(program_.buckets.size(), false);
    for (const Task& task : program_.tasks) {
      labels_.push_back(fmt::format("task {} ({})", task.id,
                                    task.name.empty() ? to_string(task.kind) : task.name));
      if (task.bucket < 0) continue;
      const auto bucket = static_cast<std::size_t>(task.bucket);
      if (task.kind == TaskKind::kCopyIn) has_copy_in_[bucket] = true;
      if (task.kind == TaskKind::kCopyOut) has_copy_out_[bucket] = true;
      if (task.kind == TaskKind::kAllReduce) has_all_reduce_[bucket] = true;
    }
    copy_outs_.assign(program_.buckets.size(), 0);
    for (const Task& task : program_.tasks) {
      if (task.kind == TaskKind::kCopyOut || ends_with_copy_out(task)) {
        ++copy_outs_[static_cast<std::size_t>(task.bucket)];
      }
    }
  }

  // How many times one step copies bucket `bucket` out (a reduce-scatter bucket: adds it
  // into the fp32 gradient shards); more than once when the Program accumulates gradients.
  int copy_outs_per_step(int bucket) const { return copy_outs_[static_cast<std::size_t>(bucket)]; }

  StepRecord step() {
    backend_.reset_events();
    const int streams = static_cast<int>(program_.streams.size());
    const EventId begin = backend_.record(0);
    for (int s = 1; s < streams; ++s) backend_.wait(s, begin);
    std::vector<EventId> starts(program_.tasks.size()), ends(program_.tasks.size());
    MemoryReplay memory(backend_);
    for (const Task& task : program_.tasks) {
      for (const int dep : task.deps) {
        if (program_.tasks[static_cast<std::size_t>(dep)].stream != task.stream) {
          backend_.wait(task.stream, ends[static_cast<std::size_t>(dep)]);
        }
      }
      starts[static_cast<std::size_t>(task.id)] = backend_.record(task.stream);
      for (const MemoryEvent& event : task.memory) {
        if (!event.at_end) memory.apply(event, task.stream);
      }
      enqueue_work(task);
      for (const MemoryEvent& event : task.memory) {
        if (event.at_end) memory.apply(event, task.stream);
      }
      ends[static_cast<std::size_t>(task.id)] = backend_.record(task.stream);
    }
    memory.release_all(0);
    backend_.synchronize();

    StepRecord record;
    std::vector<Interval> compute, comm;
    for (const Task& task : program_.tasks) {
      const TaskTiming timing{backend_.elapsed_s(begin, starts[static_cast<std::size_t>(task.id)]),
                              backend_.elapsed_s(begin, ends[static_cast<std::size_t>(task.id)])};
      record.timings.push_back(timing);
      record.step_time_s = std::max(record.step_time_s, timing.end_s);
      const bool on_compute =
          program_.streams[static_cast<std::size_t>(task.stream)].role == StreamRole::kCompute;
      (on_compute ? compute : comm).push_back({timing.start_s, timing.end_s});
    }
    const auto compute_union = merge(compute);
    const auto comm_union = merge(comm);
    record.compute_s = length(compute_union);
    record.exposed_comm_s = length(comm_union) - overlap(comm_union, compute_union);
    return record;
  }

 private:
  void enqueue_work(const Task& task) {
    const int stream = task.stream;
    if (is_compute(task.kind)) {
      const std::vector<Op>& ops = task_ops(task, workload_);
      if (!ops.empty()) backend_.run_ops(stream, ops, labels_[static_cast<std::size_t>(task.id)]);
      return;
    }
    const auto bucket = static_cast<std::size_t>(task.bucket);
    switch (task.kind) {
      case TaskKind::kCopyIn:
        backend_.copy_in(stream, task.bucket);
        return;
      case TaskKind::kCopyOut:
        backend_.copy_out(stream, task.bucket);
        return;
      default:
        break;
    }
    if (task.kind == TaskKind::kAllReduce) {
      backend_.all_reduce(stream, task.bucket);
    } else if (is_collective(task.kind)) {
      // A plan without copy tasks (copy_in_out = false) still needs the data in place.
      if (!has_copy_in_[bucket]) backend_.copy_in(stream, task.bucket);
      backend_.collective(stream, task.bucket);
    }
    if (ends_with_copy_out(task)) backend_.copy_out(stream, task.bucket);
  }

  // Whether `task` ends with its bucket's copy-out although the Program has no copy-out
  // task for the bucket (copy_in_out = false): the collective does, or with HSDP the
  // all-reduce after it, so that the gradient shards accumulate the sum over every replica
  // as they do with a copy-out task (FSDP2's order, docs/plan-format.md).
  bool ends_with_copy_out(const Task& task) const {
    if (task.bucket < 0 || has_copy_out_[static_cast<std::size_t>(task.bucket)]) return false;
    if (task.kind == TaskKind::kAllReduce) return true;
    return (task.kind == TaskKind::kAllGather || task.kind == TaskKind::kReduceScatter) &&
           !has_all_reduce_[static_cast<std::size_t>(task.bucket)];
  }

  const Program& program_;
  const Workload& workload_;
  Backend& backend_;
  std::vector<bool> has_copy_in_;
  std::vector<bool> has_copy_out_;
  std::vector<bool> has_all_reduce_;
  std::vector<int> copy_outs_;       // per bucket, per step
  std::vector<std::string> labels_;  // per task, for data check messages
};

// The buffers of every bucket and, for reduce-scatter buckets, the fp32 gradient shards
// their copy-outs accumulated into over `steps` steps from zero.
std::optional<std::string> check_all_buckets(Backend& backend, const ReplayLayout& layout,
                                             const Replay& replay, int steps) {
  const std::vector<std::byte> gradient_shards = backend.read_gradient_shards();
  for (std::size_t b = 0; b < layout.buckets.size(); ++b) {
    const ReplayBucket& bucket = layout.buckets[b];
    const int index = static_cast<int>(b);
    const std::vector<BucketBuffer> buffers =
        bucket.kind == CollectiveKind::kAllGather
            ? std::vector<BucketBuffer>{BucketBuffer::kGathered, BucketBuffer::kUnsharded}
            : std::vector<BucketBuffer>{BucketBuffer::kReduced};
    for (const BucketBuffer which : buffers) {
      if (auto failure = check_bucket(bucket, index, which, layout.mesh, layout.rank,
                                      backend.read_bucket(index, which))) {
        return failure;
      }
    }
    if (bucket.kind == CollectiveKind::kAllGather) continue;
    if (auto failure =
            check_gradient_shards(bucket, index, layout.mesh, layout.rank,
                                  steps * replay.copy_outs_per_step(index), gradient_shards)) {
      return failure;
    }
  }
  return std::nullopt;
}

// The test hooks of --check-data (ExecutorOptions): one element no data pattern holds
// (1000; it saturates to 448 in fp8), written on the last rank after the check step.
void corrupt_for_tests(Backend& backend, const ReplayLayout& layout,
                       const ExecutorOptions& options) {
  const auto buckets = static_cast<int>(layout.buckets.size());
  if (options.corrupt_bucket >= 0 && options.corrupt_bucket < buckets) {
    // The first element of the bucket's first parameter, in its wire dtype.
    const auto& bucket = layout.buckets[static_cast<std::size_t>(options.corrupt_bucket)];
    const DType wire = bucket.slots.empty() ? bucket.dtype : bucket.slots.front().wire;
    std::vector<std::byte> bytes(static_cast<std::size_t>(bytes_per_element(wire)));
    data_pattern::encode(wire, 1000.0f, bytes.data());
    backend.overwrite_bucket(options.corrupt_bucket,
                             bucket.kind == CollectiveKind::kAllGather ? BucketBuffer::kGathered
                                                                       : BucketBuffer::kReduced,
                             0, bytes);
  }
  if (options.corrupt_gradient_shard >= 0 && options.corrupt_gradient_shard < buckets) {
    // The first own element of the bucket's first parameter's fp32 gradient shard.
    const auto& bucket = layout.buckets[static_cast<std::size_t>(options.corrupt_gradient_shard)];
    if (bucket.kind == CollectiveKind::kAllGather || bucket.slots.empty()) return;
    std::vector<std::byte> bytes(4);
    data_pattern::encode(DType::kFP32, 1000.0f, bytes.data());
    backend.overwrite_gradient_shards(4 * bucket.slots.front().storage_offset, bytes);
  }
}

Workload workload_of(const ScheduleFile& schedule) {
  return build_workload(schedule.model, normalize_job(schedule.model, schedule.job));
}

}  // namespace

MpiSession::MpiSession() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  FSDPTUNE_CHECK(!initialized, "MPI initialized twice");
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    throw_runtime("MPI_Init_thread", "MPI failed to initialize");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_free(&node);
  if (provided < MPI_THREAD_MULTIPLE && world_size_ > 1) {
    MPI_Finalize();
    throw_runtime("MPI_Init_thread", "the MPI library does not provide MPI_THREAD_MULTIPLE",
                  "the cpu backend runs collectives from one thread per stream; use an MPI "
                  "built with thread support (Open MPI: --enable-mpi-thread-multiple)");
  }
}

MpiSession::~MpiSession() { MPI_Finalize(); }

void agree_on_errors(const std::optional<Error>& local_error) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int mine = local_error ? rank : size;
  int first = size;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == size) return;
  int kind = local_error ? static_cast<int>(local_error->kind()) : 0;
  std::string where = local_error ? local_error->where() : "";
  std::string what = local_error ? local_error->message() : "";
  std::string hint = local_error ? local_error->hint() : "";
  MPI_Bcast(&kind, 1, MPI_INT, first, MPI_COMM_WORLD);
  broadcast_string(where, first);
  broadcast_string(what, first);
  broadcast_string(hint, first);
  throw Error(static_cast<ErrorKind>(kind),
              fmt::format("rank {}{}{}", first, where.empty() ? "" : ": ", where), what, hint);
}

ReplayMesh make_replay_mesh(int rank, int dp_replicate, int dp_shard, int tp, int shards_per_rank) {
  FSDPTUNE_CHECK(dp_replicate >= 1 && dp_shard >= 1 && tp >= 1 && shards_per_rank >= 1,
                 "mesh sizes must be positive");
  FSDPTUNE_CHECK(rank >= 0 && rank < dp_replicate * dp_shard * tp, "rank outside the mesh");
  ReplayMesh mesh;
  mesh.dp_replicate = dp_replicate;
  mesh.dp_shard = dp_shard;
  mesh.tp = tp;
  mesh.shards_per_rank = shards_per_rank;
  mesh.tp_rank = rank % tp;
  mesh.shard = (rank / tp) % dp_shard;
  mesh.replica = rank / (tp * dp_shard);
  return mesh;
}

ReplayMesh replay_mesh(const ScheduleFile& schedule, int rank, int world_size, bool scale_down,
                       const std::string& source) {
  if (schedule.pipeline) {
    // A version 2 schedule (docs/schedule-format.md): per-chunk Programs, no whole-job one.
    throw_bad_input(source + ": pipeline",
                    "the executor replays one FSDP Program on every rank; this is a pipeline "
                    "schedule (version 2, pp > 1 or microbatches > 1) with one per stage and "
                    "the sends between stages",
                    "tune a schedule with --pp 1 --microbatches 1");
  }
  const JobSpec job = normalize_job(schedule.model, schedule.job);
  if (job.pp != 1) {
    throw_bad_input(source + ": job.pp",
                    fmt::format("pipeline-parallel schedules (pp = {}) are not replayed: the "
                                "executor runs one Program on every rank, a pipeline needs one "
                                "per stage and the sends between stages",
                                job.pp),
                    "validate the FSDP schedule of one stage: tune it with --pp 1");
  }
  const std::int64_t others = job.dp_replicate * job.tp;  // not scaled down
  const std::int64_t expected = job.dp_shard * others;
  if (world_size == expected) {
    return make_replay_mesh(rank, static_cast<int>(job.dp_replicate),
                            static_cast<int>(job.dp_shard), static_cast<int>(job.tp), 1);
  }
  std::vector<std::string> fitting;  // world sizes a scaled-down replay accepts (< expected)
  for (std::int64_t shard = 1; shard < job.dp_shard; ++shard) {
    if (job.dp_shard % shard == 0) fitting.push_back(std::to_string(shard * others));
  }
  const std::string mesh =
      fmt::format("dp_replicate {} x dp_shard {} x tp {}", job.dp_replicate, job.dp_shard, job.tp);
  if (!scale_down) {
    throw_bad_input(
        source + ": job.dp_shard",
        fmt::format("the schedule is for {} ranks but {} were started ({})", expected, world_size,
                    mesh),
        fmt::format("run it with mpirun -np {} (or srun -n {}){}", expected, expected,
                    fitting.empty() ? std::string()
                                    : fmt::format(", or add --scale-down to replay it on {} ranks",
                                                  fmt::join(fitting, ", "))));
  }
  if (world_size % others != 0 || job.dp_shard % (world_size / others) != 0) {
    throw_bad_input(source + ": job.dp_shard",
                    fmt::format("--scale-down keeps dp_replicate and tp and divides dp_shard: "
                                "{} ranks do not fit {}",
                                world_size, mesh),
                    fmt::format("start {}{}{} ranks", fmt::join(fitting, ", "),
                                fitting.empty() ? "" : " or ", expected));
  }
  const auto shard = static_cast<int>(world_size / others);
  return make_replay_mesh(rank, static_cast<int>(job.dp_replicate), shard, static_cast<int>(job.tp),
                          static_cast<int>(job.dp_shard / shard));
}

void check_replayable(const ScheduleFile& schedule, int world_size, const std::string& source,
                      bool scale_down) {
  const ReplayMesh mesh = replay_mesh(schedule, 0, world_size, scale_down, source);
  const Workload workload = workload_of(schedule);
  const Program& program = schedule.program;
  if (program.streams.empty()) throw_bad_input(source + ": program.streams", "no streams");
  for (std::size_t u = 0; u < workload.units.size(); ++u) {
    const Unit& unit = workload.units[u];
    for (const auto* ops : {&unit.forward_ops, &unit.recompute_ops, &unit.backward_ops}) {
      for (const Op& op : *ops) {
        if (op.kind != OpKind::kCollective) continue;
        if (op.group.ranks != mesh.tp || op.collective == CollectiveKind::kSendRecv) {
          throw_bad_input(fmt::format("{}: job (unit {} op {})", source, unit.name, op.name),
                          fmt::format("the executor runs tensor-parallel all-gathers, "
                                      "reduce-scatters and all-reduces over the tp = {} group, "
                                      "not a {} over {} ranks",
                                      mesh.tp, to_string(op.collective), op.group.ranks));
        }
      }
    }
  }
  for (std::size_t b = 0; b < program.buckets.size(); ++b) {
    const BucketLayout& bucket = program.buckets[b];
    const std::string where = fmt::format("{}: program.buckets[{}]", source, b);
    if (bucket.kind != CollectiveKind::kAllGather &&
        bucket.kind != CollectiveKind::kReduceScatter) {
      throw_bad_input(where, "the executor replays all-gather and reduce-scatter buckets only");
    }
    const bool fp8_allowed = bucket.kind == CollectiveKind::kAllGather;
    if (bucket.dtype != DType::kBF16 && bucket.dtype != DType::kFP32 &&
        !(fp8_allowed && bucket.dtype == DType::kFP8)) {
      throw_bad_input(where + ".dtype",
                      fmt::format("the executor moves bf16 or fp32{} only, not {}",
                                  fp8_allowed ? " (and fp8 for float8 all-gathers)" : "",
                                  to_string(bucket.dtype)));
    }
  }
  for (const Task& task : program.tasks) {
    const std::string where = fmt::format("{}: program.tasks[{}]", source, task.id);
    if (task.stream < 0 || task.stream >= static_cast<int>(program.streams.size())) {
      throw_bad_input(where + ".stream", "unknown stream");
    }
    for (const int dep : task.deps) {
      if (dep < 0 || dep >= task.id)
        throw_bad_input(where + ".deps", "a dependency must point back");
    }
    if (is_compute(task.kind) && task.kind != TaskKind::kOptimizer &&
        (task.unit < 0 || task.unit >= static_cast<int>(workload.units.size()))) {
      throw_bad_input(where + ".unit", "unknown unit");
    }
    if (!is_compute(task.kind) &&
        (task.bucket < 0 || task.bucket >= static_cast<int>(program.buckets.size()))) {
      throw_bad_input(where + ".bucket", "unknown bucket");
    }
    if (task.kind == TaskKind::kAllReduce &&
        program.buckets[static_cast<std::size_t>(task.bucket)].kind !=
            CollectiveKind::kReduceScatter) {
      throw_bad_input(where + ".bucket",
                      "an all-reduce (HSDP) must follow a reduce-scatter bucket");
    }
  }
  (void)make_replay_layout(schedule, workload, 0, mesh);  // checks parameters and dtypes
}

ReplayLayout make_replay_layout(const ScheduleFile& schedule, const Workload& workload, int rank,
                                const ReplayMesh& mesh) {
  ReplayLayout layout;
  layout.rank = rank;
  layout.world_size = mesh.world_size();
  layout.mesh = mesh;
  layout.streams = schedule.program.streams;
  // Each parameter's shards_per_rank consecutive shards, back to back.
  struct Stored {
    std::int64_t offset;
    const Param* param;
  };
  std::map<std::string, Stored> storage;
  for (const Unit& unit : workload.units) {
    for (const Param& param : unit.params) {
      storage.emplace(param.name, Stored{layout.shard_storage_elements, &param});
      layout.shard_storage_elements += param.shard_numel * mesh.shards_per_rank;
    }
  }
  const int shards = mesh.schedule_dp_shard();
  for (std::size_t b = 0; b < schedule.program.buckets.size(); ++b) {
    const BucketLayout& bucket = schedule.program.buckets[b];
    ReplayBucket replay{bucket.kind, bucket.dtype, bucket.shard_elements, 0, {}, false};
    std::int64_t elements = 0;
    for (const BufferSlot& slot : bucket.slots) {
      const auto found = storage.find(slot.param);
      const std::string where = fmt::format("program.buckets[{}].slots", b);
      if (found == storage.end()) throw_bad_input(where, "unknown parameter " + slot.param);
      if (slot.offset != elements || slot.shard_numel < 0 ||
          slot.offset + slot.shard_numel > bucket.shard_elements ||
          slot.numel > slot.shard_numel * shards) {
        throw_bad_input(fmt::format("{} ({})", where, slot.param),
                        "slot outside the bucket's flat buffer");
      }
      elements += slot.shard_numel;
      const Param& param = *found->second.param;
      const DType wire =
          bucket.kind == CollectiveKind::kAllGather ? param.gather_dtype : param.reduce_dtype;
      // Reductions sum in the bucket's dtype: every slot must be in it. An all-gather
      // moves bytes, so each parameter keeps its own wire dtype (fp8 next to bf16).
      if (wire != DType::kBF16 && wire != DType::kFP32 && wire != DType::kFP8) {
        throw_bad_input(fmt::format("{} ({})", where, slot.param),
                        "the executor moves bf16, fp32 or fp8 only, not " + to_string(wire));
      }
      if (bucket.kind != CollectiveKind::kAllGather && wire != bucket.dtype) {
        throw_bad_input(fmt::format("program.buckets[{}].dtype", b),
                        fmt::format("a reduce-scatter bucket of {} holds {} gradients ({})",
                                    to_string(bucket.dtype), to_string(wire), slot.param));
      }
      replay.slots.push_back({slot, wire, replay.shard_bytes, found->second.offset,
                              data_pattern::param_salt(slot.param)});
      replay.shard_bytes += slot.shard_numel * bytes_per_element(wire);
    }
    if (elements != bucket.shard_elements) {
      throw_bad_input(
          fmt::format("program.buckets[{}].shard_elements", b),
          fmt::format("{} elements per shard, its slots hold {}", bucket.shard_elements, elements));
    }
    if (bucket.kind == CollectiveKind::kAllGather && !replay.slots.empty()) {
      // The lowering names the wire dtype when the parameters agree on one.
      const DType first = replay.slots.front().wire;
      const bool uniform = std::all_of(replay.slots.begin(), replay.slots.end(),
                                       [&](const ReplaySlot& s) { return s.wire == first; });
      if (uniform && bucket.dtype != first) {
        throw_bad_input(fmt::format("program.buckets[{}].dtype", b),
                        fmt::format("the bucket says {} but its parameters are gathered in {}",
                                    to_string(bucket.dtype), to_string(first)));
      }
    }
    layout.buckets.push_back(std::move(replay));
  }
  for (const Task& task : schedule.program.tasks) {
    if (task.kind == TaskKind::kAllReduce && task.bucket >= 0 &&
        task.bucket < static_cast<int>(layout.buckets.size())) {
      layout.buckets[static_cast<std::size_t>(task.bucket)].all_reduced = true;
    }
  }
  // Tracked as scheduled; the shard storage lives inside it when it fits (backend.hpp).
  layout.persistent_bytes = schedule.program.persistent_bytes;
  return layout;
}

MeasuredResult execute(const ScheduleFile& schedule, const ExecutorOptions& options,
                       const MpiSession& mpi) {
  const int rank = mpi.rank();
  const int world = mpi.world_size();

  // Ranks agree on the schedule before any collective of the replay.
  std::string hash = schedule_hash(schedule);
  std::string root_hash = hash;
  broadcast_string(root_hash, 0);
  std::optional<Error> mismatch;
  if (hash != root_hash) {
    mismatch = Error(ErrorKind::kBadInput, "schedule",
                     fmt::format("schedule hash {} differs from rank 0's {}", hash, root_hash),
                     "every rank must replay the same schedule file");
  }
  agree_on_errors(mismatch);

  // Setting up the backend is local: agree on its outcome before the replay.
  const Workload workload = workload_of(schedule);
  const ReplayMesh mesh = replay_mesh(schedule, rank, world, options.scale_down, "schedule");
  const ReplayLayout layout = make_replay_layout(schedule, workload, rank, mesh);
  std::unique_ptr<Backend> backend;
  std::optional<Error> setup_error;
  try {
    if (options.backend == "cpu") {
      backend = make_cpu_backend();
    } else if (options.backend == "cuda") {
      backend = make_cuda_backend(mpi.local_rank());
    } else {
      throw_bad_input("--backend", "unknown backend '" + options.backend + "'", "cpu or cuda");
    }
  } catch (const Error& e) {
    setup_error = e;
  }
  agree_on_errors(setup_error);

  MeasuredResult measured;
  try {
    backend->prepare(layout);
    Watchdog watchdog(*backend, rank, options.timeout_s);
    Replay replay(schedule, workload, *backend);
    if (rank == options.stall_rank) {
      watchdog.beat("stalled on purpose (--debug-stall-rank)");
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }

    std::vector<StepRecord> records;
    const int total = (options.check_data ? 1 : 0) + options.warmup + options.iterations;
    for (int step = 0; step < total; ++step) {
      const bool checking = options.check_data && step == 0;
      const bool measuring = step >= total - options.iterations;
      if (step == total - options.iterations) backend->reset_peak();
      if (checking) {
        backend->set_data_check({true, rank == world - 1 ? options.corrupt_tp_collective : -1});
      }
      watchdog.beat(fmt::format("waiting for the other ranks before step {}", step));
      MPI_Barrier(MPI_COMM_WORLD);
      watchdog.beat(fmt::format("replaying step {}", step));
      StepRecord record = replay.step();
      record.own_step_time_s = record.step_time_s;
      double slowest_s = 0;
      MPI_Allreduce(&record.step_time_s, &slowest_s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      record.step_time_s = slowest_s;
      if (checking) {
        watchdog.beat("checking data");
        std::optional<std::string> message = backend->tp_check_failure();
        backend->set_data_check({});
        if (rank == world - 1) corrupt_for_tests(*backend, layout, options);
        if (!message) message = check_all_buckets(*backend, layout, replay, 1);
        std::optional<Error> failure;
        if (message) failure = Error(ErrorKind::kRuntime, "--check-data", *message);
        try {
          agree_on_errors(failure);
        } catch (const Error& e) {
          throw AgreedError{e};
        }
      }
      if (measuring) records.push_back(std::move(record));
    }
    watchdog.beat("collecting results");

    std::int64_t peak = backend->peak_tracked_bytes();
    std::int64_t max_peak = 0;
    MPI_Allreduce(&peak, &max_peak, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);

    measured.schedule_hash = hash;
    measured.backend = backend->name();
    measured.world_size = world;
    measured.dp_replicate = mesh.dp_replicate;
    measured.dp_shard = mesh.dp_shard;
    measured.tp = mesh.tp;
    measured.shards_per_rank = mesh.shards_per_rank;
    measured.iterations = options.iterations;
    measured.warmup = options.warmup;
    measured.data_checked = options.check_data;
    std::vector<double> compute, exposed;
    for (const StepRecord& record : records) {
      measured.step_times_s.push_back(record.step_time_s);
      compute.push_back(record.compute_s);
      exposed.push_back(record.exposed_comm_s);
    }
    measured.step_time_s = median(measured.step_times_s);
    measured.compute_s = median(compute);
    measured.exposed_comm_s = median(exposed);
    measured.peak_allocated_bytes = max_peak;
    for (std::size_t t = 0; t < schedule.program.tasks.size(); ++t) {
      std::vector<double> starts, ends;
      for (const StepRecord& record : records) {
        starts.push_back(record.timings[t].start_s);
        ends.push_back(record.timings[t].end_s);
      }
      measured.timings.push_back({median(starts), median(ends)});
    }
    // Every rank's own view (medians over the measured steps), gathered to rank 0: a
    // collective's time on one rank includes waiting for the others to join it.
    {
      std::vector<double> own_steps;
      for (const StepRecord& record : records) own_steps.push_back(record.own_step_time_s);
      std::vector<double> mine{median(own_steps)};
      for (const TaskTiming& timing : measured.timings) {
        mine.push_back(timing.start_s);
        mine.push_back(timing.end_s);
      }
      std::vector<double> all(rank == 0 ? mine.size() * static_cast<std::size_t>(world) : 0);
      MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(),
                 static_cast<int>(mine.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
      for (int r = 0; rank == 0 && r < world; ++r) {
        const double* values = all.data() + static_cast<std::size_t>(r) * mine.size();
        RankMeasurement view{values[0], {}};
        for (std::size_t t = 0; t < measured.timings.size(); ++t) {
          view.timings.push_back({values[1 + 2 * t], values[2 + 2 * t]});
        }
        measured.ranks.push_back(std::move(view));
      }
    }
    measured.environment = backend->environment();
    measured.environment["host"] = host_name();
    measured.environment["date"] = iso_date_utc();
    measured.environment["command"] = options.command;
    measured.environment["staging_bytes"] = std::to_string(backend->staging_bytes());
    measured.environment["kernel_workspace_bytes"] =
        std::to_string(backend->kernel_workspace_bytes());
  } catch (const AgreedError& agreed) {
    throw agreed.error;
  } catch (const Error& e) {
    abort_all_ranks(rank, e.what(), e.exit_code());
  } catch (const std::exception& e) {
    abort_all_ranks(rank, e.what(), 1);
  }
  return measured;
}

}  // namespace fsdptune
