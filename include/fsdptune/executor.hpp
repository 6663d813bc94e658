// The executor: replays a schedule's Program on real hardware, one process per rank under
// mpirun / srun (DESIGN.md "Validation"), and measures it. Every function here is called
// by every rank (they communicate over MPI_COMM_WORLD).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fsdptune/backend.hpp"
#include "fsdptune/error.hpp"
#include "fsdptune/measured.hpp"
#include "fsdptune/schedule.hpp"

namespace fsdptune {

struct ExecutorOptions {
  std::string backend = "cpu";  // "cpu" or "cuda"
  // cuda: which attention the compute tasks run (KernelOptions::attention); cpu: kAuto only.
  AttentionKernel attention = AttentionKernel::kAuto;
  int iterations = 10;  // measured steps (>= 1)
  int warmup = 3;       // untimed steps before them (>= 0)
  // One more untimed step before the warm-up, whose bucket buffers and fp32 gradient
  // shards are read back and checked after it, and whose TP collectives are checked as
  // they complete (data_check.hpp); a mismatch on any rank fails every rank.
  bool check_data = false;
  // A rank that makes no progress for this long aborts every rank (MPI_Abort).
  double timeout_s = 300;
  // Replay a schedule for a larger dp_shard on fewer ranks (docs/validation.md "Scaled-down
  // replay"): the world is dp_replicate * tp * a divisor of dp_shard, each rank holding
  // dp_shard / that shards.
  bool scale_down = false;
  // Run the compute tasks' tensor- and context-parallel collectives in op order on the
  // compute stream, not beside the compute the model overlaps them with (async TP's
  // chunks, the CP K/V gather and gradient pass; op_steps, backend.hpp): what the overlap
  // buys, measured.
  bool serial_collectives = false;
  std::string command;  // recorded in measured.json
  std::string source;   // the schedule file, named when the ranks' schedules differ
  // Test hooks. stall_rank: that rank stops responding before the first step. On the last
  // rank, with check_data: corrupt_bucket: before the checks, overwrite one element of that
  // bucket's buffer; corrupt_gradient_shard: of the fp32 gradient shard of that
  // reduce-scatter bucket's first parameter; corrupt_tp_collective: of the output of the
  // n-th TP or CP collective of the check step (0-based, in enqueue order), before it is
  // checked;
  // corrupt_message: element 0 of that pipeline message buffer (ReplayLayout::messages).
  int stall_rank = -1;
  int corrupt_bucket = -1;
  int corrupt_gradient_shard = -1;
  int corrupt_tp_collective = -1;
  int corrupt_message = -1;
};

// The corruption hooks of `options` with their flags, in a fixed order (-1: not given): what
// `validate` checks before the run and the executor names when one corrupted nothing.
struct CorruptionHook {
  enum class Target { kBucket, kGradientShard, kTpCollective, kMessage };
  Target target;
  const char* flag;
  int value;
};
std::vector<CorruptionHook> corruption_hooks(const ExecutorOptions& options);

// MPI for the lifetime of the object: MPI_Init_thread asking for MPI_THREAD_MULTIPLE (the
// cpu backend issues collectives from one thread per stream) and MPI_Finalize.
class MpiSession {
 public:
  MpiSession();
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }  // rank among the ranks on this node
  int local_size() const { return local_size_; }  // ranks on this node

 private:
  int rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
};

// Aborts every rank (MPI_Abort, exit 1) when this rank shows no sign of life for
// `timeout_s`: no beat() and, while a backend is watched, no progress of its enqueued work.
// A rank that stops responding leaves the others blocked in a collective forever. Started
// right after MPI_Init, so it covers reading the schedule and the agreements before the
// replay too (found by QA: a rank that hung opening its schedule hung every rank).
// REQUIRES: an MpiSession alive for its lifetime.
class Watchdog {
 public:
  Watchdog(int rank, double timeout_s, std::string doing);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // A sign of life, and what the rank does now (named if it aborts).
  void beat(const std::string& doing);
  // Counts `backend`'s progress as a sign of life too, until watch(nullptr).
  // REQUIRES: `backend` outlives the watch.
  void watch(const Backend* backend);

 private:
  void loop();

  int rank_;
  double timeout_s_;
  std::mutex mutex_;
  std::string doing_;
  std::int64_t beats_ = 0;
  const Backend* backend_ = nullptr;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Ranks agree on the schedule (its hash) and on the flags that decide the replay's
// collectives (--iters, --check-data, ...), before anything else is checked of the
// schedule: ranks given other files are told so, not of what one file fails. Returns the
// hash. Throws the agreed Error (agree_on_errors) on a mismatch.
std::string agree_on_schedule(const ScheduleFile& schedule, const ExecutorOptions& options);

// Every rank passes its own outcome; when any rank has an error, every rank throws the
// error of the lowest failing rank, its `where` prefixed with "rank r: ", marked on all but
// rank 0 as printed by another rank (main prints it once).
void agree_on_errors(const std::optional<Error>& local_error);

// The run's mesh for `rank` of `world_size`: the schedule's [pp, dp_replicate, dp_shard,
// tp] when world_size is their product; with `scale_down`, dp_shard divided by the factor
// that makes the product world_size (which must divide dp_shard). Throws Error(kBadInput)
// naming `source` and job.dp_shard (job.pp for a pipeline) with the world sizes that would
// work otherwise.
ReplayMesh replay_mesh(const ScheduleFile& schedule, int rank, int world_size, bool scale_down,
                       const std::string& source);

// Throws Error(kBadInput) naming `source` and the field when this executor cannot replay
// the schedule on `world_size` ranks: no mesh (replay_mesh), wire dtypes other than bf16 /
// fp32 (and fp8 for float8 all-gathers), unknown tasks, units or parameters, TP
// collectives whose group is not the job's tp. A pipeline schedule: every chunk's Program
// so (`pipeline.chunks[c].program...`), split into a forward phase (every task up to the
// last forward task: gathers, copies, forwards), a backward phase and the optimizer as
// its tail; pp x virtual_stages chunks; kept-gathered chunks not resharding after forward.
void check_replayable(const ScheduleFile& schedule, int world_size, const std::string& source,
                      bool scale_down = false);

// --check-data compares sums for equality, so every partial sum must be an exact integer
// (data_check.hpp): throws Error(kBadInput) naming --check-data, the source and the bucket
// or op when one cannot be on `world_size` ranks (`scale_down` as for replay_mesh): a
// reduce-scatter bucket whose gradient_amplitude is 0 (more addends -- shard ranks x
// replicas when all-reduced x microbatches accumulated -- than its reduce dtype holds exact
// integers, bf16 256, or than fp32's 2^24 once the gradient shards add its copy-outs), or
// a TP reduction over more ranks than its dtype's limit. The hint: an fp32 reduce dtype,
// fewer ranks or microbatches. REQUIRES: check_replayable passed.
void check_data_exact(const ScheduleFile& schedule, int world_size, const std::string& source,
                      bool scale_down = false);

// The cpu backend holds every rank's memory in this host's: Error(kRuntime) naming `source`
// when `local_ranks` ranks of the schedule's predicted peak (predicted.peak_allocated_bytes,
// the largest stage's for a pipeline) exceed `host_bytes` -- a GPU job's schedule replayed on
// CPUs would otherwise swap or be killed mid-step. The hint: a scaled job.
void check_host_memory(const ScheduleFile& schedule, int local_ranks, std::int64_t host_bytes,
                       const std::string& source);
// Physical memory of this host (sysconf), 0 when unknown.
std::int64_t host_memory_bytes();

// The buckets with their parameters' wire dtypes, byte offsets and storage offsets, for
// `rank` of the run's `mesh` (rank = MPI_COMM_WORLD rank). For a pipeline: the buckets of
// the rank's chunks (plan_pipeline_replay's bucket_offsets), the shards of their
// parameters, its messages and two more streams for them ("pipeline send", "pipeline
// receive"); the Programs' streams by index (the most any chunk has, on every rank).
ReplayLayout make_replay_layout(const ScheduleFile& schedule, const Workload& workload, int rank,
                                const ReplayMesh& mesh);

// One action of a pipeline rank (docs/validation.md "Pipelines"): what of its chunk's
// one-microbatch Program it runs, which of those tasks' memory events apply, and the
// messages around it. A chunk that keeps its parameters gathered (keep_gathered, M > 1)
// runs its all-gathers in the first forward only and its reduce-scatters in the last
// backward only (of each pipeline step), its compute in every action; other chunks run
// the whole forward (backward) phase of their Program in every forward (backward).
struct ReplayAction {
  int chunk = 0;
  int microbatch = 0;
  bool backward = false;
  std::vector<int> tasks;  // ids in the chunk's Program, ascending (chunk_action_tasks)
  // What of its phase it runs and how its memory events apply (chunk_action_scope,
  // pipeline.hpp: the rules the stage memory prices too).
  ChunkActionScope scope;
  int receive_message = -1;  // ReplayLayout::messages index awaited before the action
  int send_message = -1;     // sent after its compute
  // The rank's previous action is a backward that reduce-scatters (every one of a chunk
  // re-gathered per microbatch, else the last of each pipeline step): the compute stream
  // first waits for everything the rank's streams have queued (those reduce-scatters), as
  // FSDP2's post-backward callback makes it wait for them (reduce_scatter_wait_s).
  bool after_reduce_scatters = false;
  bool operator==(const ReplayAction&) const = default;
};

struct PipelineReplayPlan {
  std::vector<int> chunks;                // this rank's chunks (c % pp == stage), ascending
  std::vector<int> bucket_offsets;        // per chunk of the job: its first bucket in the
                                          // layout's buckets (-1: not on this rank)
  std::vector<ReplayAction> actions;      // pipeline_order(...) of the stage
  std::vector<std::pair<int, int>> tail;  // (chunk, task): optimizers, after the last action
  std::vector<ReplayMessage> messages;    // in the order the actions use them
  bool operator==(const PipelineReplayPlan&) const = default;
};

// The actions `rank` of the run's `mesh` replays for a version 2 schedule, in
// pipeline_order (the simulator's order), with its messages: forward (c, m) receives chunk
// c - 1's activation of m and sends its own to chunk c + 1; backward (c, m) receives the
// gradient from chunk c + 1 and sends one to chunk c - 1 (tag (c M + m) 2 + backward, c
// the sender's chunk), between the ranks of adjacent stages at the same place in them.
// REQUIRES: schedule.pipeline, check_replayable passed.
PipelineReplayPlan plan_pipeline_replay(const ScheduleFile& schedule, const ReplayMesh& mesh,
                                        int rank);

// One rank's step of a pipeline replay, each the median over the measured steps.
struct RankStepFigures {
  double end_s = 0;  // its last task's end: its step
  double compute_s = 0;
  double exposed_comm_s = 0;
  double busy_s = 0;          // its actions' time (MeasuredStage::busy_s)
  double pipeline_end_s = 0;  // its last action's end
  std::int64_t peak_allocated_bytes = 0;
};

struct PipelineStageFigures {
  std::vector<MeasuredStage> stages;  // by pipeline rank
  std::size_t slowest_rank = 0;       // the latest end (the first of equal ends)
};

// A pipeline replay's stages from its ranks' figures (rank r in stage r / stage_size): each
// stage as its slowest rank, figure by figure; and the rank of the latest end, whose compute
// and exposed communication the measured file reports, as the prediction's summary takes
// the slowest rank (docs/measured-format.md). REQUIRES: ranks not empty, stage_size >= 1.
PipelineStageFigures pipeline_stage_figures(const std::vector<RankStepFigures>& ranks,
                                            int stage_size);

// Replays the schedule (check step, warm-up, measured steps) on every rank. Returns the
// measured result; complete on rank 0 (others hold their own view). A failure after the
// replay started aborts every rank with MPI_Abort after printing the reason: there is no
// partial result. `watchdog` is beaten throughout and watches the backend while it lives.
// REQUIRES: agree_on_schedule returned `hash`, check_replayable passed, an MpiSession
// alive.
MeasuredResult execute(const ScheduleFile& schedule, const std::string& hash,
                       const ExecutorOptions& options, const MpiSession& mpi, Watchdog& watchdog);

}  // namespace fsdptune
